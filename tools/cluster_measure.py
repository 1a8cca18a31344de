"""`trifit batch --dask` throughput: images/s on a local Dask cluster of 1, 2, 4 ... workers (one
per GPU, pinned by TRIFIT_ADAPTER as `--dask local:N` pins them) and the scaling efficiency
(images/s with N workers / (N x images/s with one)); beside them, the same images through one
process's local batch (`--sequential`, and batched), the baselines a cluster has to beat.

Each worker count gets its own cluster, started as `--dask local:N` starts it (trifit.cluster.connect)
and warmed (every worker's engine made and its pipelines built by one short fit each) before the
timed repeats; a repeat is one run_cluster_batch over all the images (force: every image refitted),
timed from submission to the last scene written. The scenes of every run are compared byte for
byte with the first worker count's (they must not depend on the worker or the order).

    python tools/cluster_measure.py --workers 1,2,4 --images 32 --size 176 --tris 150 --iters 800 \
        --repeats 3 --json OUT.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def make_images(folder: Path, count: int, size: int) -> list[Path]:
    """``count`` different pictures (crops, turns and mirrors of the bundled samples), longer side ``size``."""
    from PIL import Image, ImageOps

    from trifit.resources import sample_path

    photos = [Image.open(sample_path(n)).convert("RGB") for n in ("astronaut.png", "chelsea.png")]
    out = []
    for k in range(count):
        im = photos[k % 2]
        w, h = im.size
        c = 0.6 + 0.4 * ((k // 2) % 5) / 4
        box = (int((w - w * c) * ((k * 7) % 10) / 10), int((h - h * c) * ((k * 3) % 10) / 10))
        im = im.crop((box[0], box[1], box[0] + int(w * c), box[1] + int(h * c))).rotate(90 * ((k // 10) % 4), expand=True)
        if k % 3 == 2:
            im = ImageOps.mirror(im)
        im.thumbnail((size, size), Image.Resampling.LANCZOS)
        p = folder / f"img{k:03d}.png"
        im.save(p)
        out.append(p)
    return out


def measure_cluster(workers: int, folder: Path, tmp: Path, a, stop, scenes_ref: dict | None) -> dict:
    from trifit.cluster import connect, run_cluster_batch
    from trifit.run import StopConditions

    t0 = time.perf_counter()
    client, cluster = connect(("local", workers), "gpu")
    try:
        start_s = time.perf_counter() - t0
        warm = tmp / f"warm{workers}"
        warm.mkdir()
        for k in range(workers):  # one short fit per worker, at once: each worker's engine and pipelines
            (warm / f"w{k}.png").write_bytes((folder / "img000.png").read_bytes())
        t1 = time.perf_counter()
        run_cluster_batch([str(warm)], tmp / f"warm{workers}-out", dask=cluster.scheduler_address, triangles=a.tris,
                          size=a.size, stop=StopConditions(iterations=20), backend="gpu", progress=False,
                          note=lambda _: None)
        warm_s = time.perf_counter() - t1
        adapters = client.run(lambda: __import__("trifit.cluster", fromlist=["_engines"])._engines["gpu"].description)
        runs = []
        for rep in range(a.repeats):
            out = tmp / f"w{workers}-r{rep}"
            t2 = time.perf_counter()
            result = run_cluster_batch([str(folder)], out, dask=cluster.scheduler_address, triangles=a.tris, size=a.size,
                                       stop=stop, backend="gpu", progress=False, force=True, note=lambda _: None)
            wall = time.perf_counter() - t2
            assert result.done == a.images and not result.failed, result.as_dict()
            scenes = {p.name: p.read_bytes() for p in out.glob("*.trifit.json")}
            same = None if scenes_ref is None else scenes == scenes_ref
            scenes_ref = scenes_ref or scenes
            fit_s = [r.seconds for r in result.results]
            runs.append({"repeat": rep, "wall_s": wall, "images_per_s": a.images / wall,
                         "fit_s_median": statistics.median(fit_s), "scenes_equal_first": same,
                         "mean_psnr": statistics.fmean(r.psnr for r in result.results)})
            print(f"  {workers} worker(s) repeat {rep}: {wall:7.2f} s, {a.images / wall:6.2f} images/s, "
                  f"median fit {statistics.median(fit_s):.2f} s, scenes equal to the first run's: {same}", flush=True)
    finally:
        client.close()
        cluster.close()
    ips = [r["images_per_s"] for r in runs]
    return {"workers": workers, "cluster_start_s": start_s, "warm_s": warm_s, "adapters": sorted(adapters.values()),
            "runs": runs, "images_per_s_median": statistics.median(ips), "images_per_s_min": min(ips),
            "images_per_s_max": max(ips), "scenes": scenes_ref}


def measure_local(folder: Path, tmp: Path, a, stop) -> list[dict]:
    from trifit import Engine
    from trifit.batch import run_batch
    from trifit.run import StopConditions

    engine = Engine("gpu")
    rows = []
    for sequential in (True, False):
        run_batch([str(folder)], tmp / f"local-warm-{sequential}", triangles=a.tris, size=a.size, engine=engine,
                  stop=StopConditions(iterations=20), progress=False, sequential=sequential)
        ips, scenes = [], None
        for rep in range(a.repeats):
            out = tmp / f"local-{sequential}-{rep}"
            t0 = time.perf_counter()
            result = run_batch([str(folder)], out, triangles=a.tris, size=a.size, engine=engine, stop=stop,
                               progress=False, sequential=sequential)
            wall = time.perf_counter() - t0
            assert result.done == a.images and not result.failed
            ips.append(a.images / wall)
            scenes = {p.name: p.read_bytes() for p in out.glob("*.trifit.json")}
            print(f"  local {'sequential' if sequential else 'batched'} repeat {rep}: {wall:7.2f} s, "
                  f"{a.images / wall:6.2f} images/s", flush=True)
        rows.append({"path": "local sequential" if sequential else "local batched", "images_per_s": ips,
                     "images_per_s_median": statistics.median(ips), "scenes": scenes})
    engine_description = engine.description
    for r in rows:
        r["adapter"] = engine_description
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workers", default="1,2,4", help="worker counts (one GPU each), comma separated")
    p.add_argument("--images", type=int, default=32)
    p.add_argument("--size", type=int, default=176)
    p.add_argument("--tris", type=int, default=150)
    p.add_argument("--iters", type=int, default=800)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-local", action="store_true", help="skip the one-process baselines")
    p.add_argument("--share", action="store_true",
                   help="run worker counts above the adapter count too, workers sharing adapters (a check, not a measure)")
    p.add_argument("--json")
    a = p.parse_args()
    from trifit import __version__
    from trifit.engine import gpu_adapters
    from trifit.run import StopConditions

    adapters = gpu_adapters()
    counts = [int(v) for v in a.workers.split(",")]
    print(f"# {time.strftime('%Y-%m-%d %H:%M %Z')} trifit {__version__}: {a.images} images, {a.size} px, {a.tris} "
          f"triangles, {a.iters} iterations, {a.repeats} repeats; {len(adapters)} adapter(s): "
          f"{', '.join(x['name'] for x in adapters)}", flush=True)
    stop = StopConditions(iterations=a.iters)
    report = {"shared_adapters": a.share, "date": time.strftime("%Y-%m-%d %H:%M %Z"), "trifit": __version__,
              "images": a.images, "size": a.size,
              "triangles": a.tris, "iterations": a.iters, "repeats": a.repeats, "adapters": adapters, "clusters": [],
              "local": [], "skipped": []}
    with tempfile.TemporaryDirectory(prefix="trifit-cluster-measure-") as tmp:
        tmp = Path(tmp)
        folder = tmp / "images"
        folder.mkdir()
        make_images(folder, a.images, a.size)
        ref = None
        for n in counts:
            if n > max(1, len(adapters)) and not a.share:
                report["skipped"].append(f"{n} workers: only {len(adapters)} adapter(s)")
                print(f"# skipped {n} workers: only {len(adapters)} adapter(s)", flush=True)
                continue
            row = measure_cluster(n, folder, tmp, a, stop, ref)
            ref = ref or row["scenes"]
            report["clusters"].append(row)
        if not a.no_local:
            report["local"] = measure_local(folder, tmp, a, stop)
        one = next((r for r in report["clusters"] if r["workers"] == 1), None)
        for r in report["clusters"]:
            r["scaling_efficiency"] = r["images_per_s_median"] / (r["workers"] * one["images_per_s_median"]) if one else None
        for r in report["local"]:
            r["scenes_equal_cluster"] = None if ref is None else r["scenes"] == ref
        for r in report["clusters"] + report["local"]:
            r.pop("scenes", None)
    print("# workers  images/s median (min-max)  scaling efficiency")
    for r in report["clusters"]:
        eff = r["scaling_efficiency"]
        print(f"# {r['workers']:7d}  {r['images_per_s_median']:8.2f} ({r['images_per_s_min']:.2f}-{r['images_per_s_max']:.2f})"
              f"  {'' if eff is None else f'{eff:.2f}'}")
    for r in report["local"]:
        print(f"# {r['path']}: {r['images_per_s_median']:.2f} images/s ({min(r['images_per_s']):.2f}-"
              f"{max(r['images_per_s']):.2f}); scenes equal to the cluster's: {r['scenes_equal_cluster']}")
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
