"""`trifit batch` both ways on one folder of equal-size images, in one process (one warm engine):
batched (the images in lockstep through one fit loop) and --sequential (one fit after another),
same settings and iterations. Prints and writes images/s and PSNR per path.

    python tools/batch_vs_sequential.py FOLDER [--tris 150 --size 176 --iters 800 --repeats 3 --json OUT.json]
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from trifit import Engine, StopConditions  # noqa: E402
from trifit.batch import find_images, run_batch  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("folder")
    p.add_argument("--tris", type=int, default=150)
    p.add_argument("--size", type=int, default=176)
    p.add_argument("--iters", type=int, default=800)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json")
    a = p.parse_args()
    engine = Engine("gpu")
    n = len(find_images([a.folder]))
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} {n} images, {a.tris} triangles, {a.size} px, {a.iters} iterations; "
          f"{engine.description}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        # warm-up: pipelines for both paths built before anything is timed
        for sequential in (False, True):
            run_batch([a.folder], Path(tmp) / f"warm{sequential}", triangles=a.tris, size=a.size,
                      stop=StopConditions(iterations=20), engine=engine, progress=False, sequential=sequential)
        for rep in range(a.repeats):
            for sequential in (False, True):
                out = Path(tmp) / f"r{rep}-{sequential}"
                t0 = time.perf_counter()
                result = run_batch([a.folder], out, triangles=a.tris, size=a.size, engine=engine, progress=False,
                                   stop=StopConditions(iterations=a.iters), sequential=sequential)
                wall = time.perf_counter() - t0
                psnr = [r.psnr for r in result.results]
                row = {"path": "sequential" if sequential else "batched", "repeat": rep, "images": len(psnr),
                       "wall_s": wall, "images_per_s": len(psnr) / wall, "mean_psnr": float(np.mean(psnr)),
                       "psnr": psnr}
                rows.append(row)
                print(f"{row['path']:10s} repeat {rep}: {wall:6.2f} s, {row['images_per_s']:.2f} images/s, "
                      f"mean PSNR {row['mean_psnr']:.3f} dB", flush=True)
    for path in ("batched", "sequential"):
        v = [r for r in rows if r["path"] == path]
        ips = [r["images_per_s"] for r in v]
        print(f"# {path}: images/s median {np.median(ips):.2f} ({min(ips):.2f}-{max(ips):.2f}), "
              f"mean PSNR {np.mean([r['mean_psnr'] for r in v]):.3f} dB", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
