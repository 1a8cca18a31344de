"""``trifit bench --quality``: how good the fits are, measured honestly.

For each bundled sample, triangle count and seed: fit at the working size (longer side 176 px,
Pillow LANCZOS, as primitive's figures in docs/QUALITY.md were made) under the given stop
condition, save the scene, render the *saved scene* with the float64 reference engine and score
it against the target: PSNR on the render clipped to [0, 1], and SSIM (scikit-image,
``channel_axis=2``, ``data_range=1``) where scikit-image is installed. Wall time is the fit's
(GPU included), not the scoring. Results: mean and min-max over seeds.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from . import __version__, reference
from .engine import Engine
from .fitter import Fitter
from .imageio import load_image
from .run import StopConditions
from .scene import Scene

SAMPLES = ("astronaut.png", "chelsea.png")


def ssim(a: np.ndarray, b: np.ndarray) -> float | None:
    try:
        from skimage.metrics import structural_similarity
    except ImportError:
        return None
    return float(structural_similarity(a, b, channel_axis=2, data_range=1.0))


def score(scene: Scene, target: np.ndarray) -> dict[str, float | None]:
    img = np.clip(reference.render(scene, target.shape[1], target.shape[0]), 0, 1)
    mse = float(np.mean((img - target) ** 2))
    return {"psnr": 10 * np.log10(1 / mse) if mse > 0 else float("inf"), "ssim": ssim(img, target.astype(np.float64))}


def score_as_saved(scene: Scene, target: np.ndarray) -> dict[str, float | None]:
    """:func:`score` of exactly what a saved scene file holds (the JSON round trip)."""
    return score(Scene.from_json(scene.to_json()), np.asarray(target, dtype=np.float64))


def fit_and_score(engine: Engine, image_path: str, tris: int, seed: int, size: int,
                  stop: StopConditions, out_dir: Path | None = None, **settings) -> dict:
    target = load_image(image_path, size)
    t0 = time.perf_counter()
    f = Fitter(target, triangles=tris, size=size, seed=seed, engine=engine, source=image_path, **settings)
    f.run(stop)
    wall = time.perf_counter() - t0
    scene = f.scene
    if out_dir is not None:
        scene.save(out_dir / f"{Path(image_path).stem}-{tris}-s{seed}.json")
    row = {"image": Path(image_path).name, "triangles": tris, "seed": seed, "replicas": f.replicas,
           "iterations": f.iteration, "wall_s": wall, "respawned": f.respawned, **score_as_saved(scene, target)}
    f.close()
    return row


def _stat(rows: list[dict], key: str) -> dict | None:
    vals = [r[key] for r in rows if r[key] is not None]
    if not vals:
        return None
    return {"mean": float(np.mean(vals)), "min": float(np.min(vals)), "max": float(np.max(vals))}


def summarise(rows: list[dict]) -> list[dict]:
    """Mean and min-max over seeds, per (image, triangle count)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["image"], r["triangles"]), []).append(r)
    return [{"image": image, "triangles": tris, "seeds": len(rs),
             "replicas": sorted({r["replicas"] for r in rs}),
             **{key: _stat(rs, key) for key in ("psnr", "ssim", "wall_s", "iterations")}}
            for (image, tris), rs in groups.items()]


def run_quality(args) -> int:
    from .resources import sample_path

    engine = Engine(args.backend)
    tris_list = list(args.tris) if getattr(args, "tris", None) else [50, 150, 500]  # (the CLI's _count_list)
    seeds = list(range(args.seeds))
    replicas = getattr(args, "replicas", None)
    settings = {} if replicas is None else {"replicas": replicas}
    stop = StopConditions(iterations=args.iters, time_limit=args.time_limit)
    if not stop.any():
        stop.time_limit = 12.0
    images = [sample_path(s) for s in SAMPLES] if not args.images else list(args.images)
    out_dir = Path(args.out) if args.out else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
    print(f"trifit bench --quality on {engine.description} [{engine.backend}]; size {args.size}; "
          f"stop: iters={stop.iterations} time_limit={stop.time_limit}; seeds {seeds}")
    rows = []
    for image in images:
        for tris in tris_list:
            for seed in seeds:
                r = fit_and_score(engine, image, tris, seed, args.size, stop, out_dir, **settings)
                rows.append(r)
                ss = f"{r['ssim']:.4f}" if r["ssim"] is not None else "n/a"
                print(f"  {r['image']:14s} {tris:4d} tris seed {seed}: PSNR {r['psnr']:.2f} dB  SSIM {ss}  "
                      f"{r['iterations']} it  {r['wall_s']:.2f} s  replicas {r['replicas']}", flush=True)
    summary = summarise(rows)
    print("\nimage           tris  PSNR mean (min-max)      SSIM mean   wall s mean  replicas")
    for s in summary:
        ss = f"{s['ssim']['mean']:.4f}" if s["ssim"] else "   n/a"
        print(f"{s['image']:14s} {s['triangles']:5d}  {s['psnr']['mean']:6.2f} ({s['psnr']['min']:.2f}-{s['psnr']['max']:.2f})"
              f"      {ss}    {s['wall_s']['mean']:.2f}         {','.join(map(str, s['replicas']))}")
    if args.json:
        from .fileutil import atomic_write_bytes

        doc = {"software": f"trifit {__version__}", "adapter": engine.adapter, "backend": engine.backend,
               "date": time.strftime("%Y-%m-%d"), "size": args.size,
               "stop": {"iterations": stop.iterations, "time_limit": stop.time_limit},
               "rows": rows, "summary": summary}
        atomic_write_bytes(Path(args.json), json.dumps(doc, indent=1).encode())
    return 0
