"""Big fits (issue #19): variants of the method at 512 px and 1000 triangles under a time limit,
one line per run. Time-limited on purpose: a variant that is cheaper per iteration gets more.

    python tools/sweep_big.py [--size 512] [--tris 1000] [--time-limit 5] [--images a.png,b.png] [--variants a,b]
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from trifit import Engine, Fitter, StopConditions, load_image  # noqa: E402
from trifit.resources import sample_path  # noqa: E402


def fit_and_score(eng, path, tris, seed, size, stop, **settings) -> dict:
    """PSNR of the fit's scene rendered by the GPU engine at the working size (float32; the float64
    reference takes tens of seconds a scene at this size and agrees to ~1e-4 dB)."""
    target = load_image(path, size)
    f = Fitter(target, triangles=tris, size=size, seed=seed, engine=eng, **settings)
    f.run(stop)
    mse = float(np.mean((eng.render(f.scene).astype(np.float64) - target) ** 2))
    row = {"image": Path(path).name, "psnr": 10 * np.log10(1 / mse), "iterations": f.iteration}
    f.close()
    return row

# lr_vertex is set for a 176 px working size and scaled to the working size (render/fitstate.py);
# "frame units" undoes the scaling: the same step in frame units at every size, as before
VARIANTS = {
    "default": {},
    "frame units": "frame",
    "lr_vertex x0.7": {"lr_vertex": 0.006 * 0.7},
    "lr_vertex x1.4": {"lr_vertex": 0.006 * 1.4},
    "no overgrow": {"overgrow": 1.0},
    "sigma_end 0.35": {"sigma_end_px": 0.35},
    "sigma_end 0.75": {"sigma_end_px": 0.75},
    "no respawn": {"respawn_every": 0},
    "cycles of 100": {"overgrow_cycles": 0},  # as many pruning cycles as fit, prune_cycle_min iterations each (no cap)
    "cycles of 200": {"prune_cycle_min": 200},  # fewer, longer cycles (does a big count want longer ones?)
    "cycles of 400": {"prune_cycle_min": 400},
    "prune until 0.85": {"prune_until": 0.85},  # the pruning cycles' window before the default became 0.9
    "prune until 0.9": {"prune_until": 0.9},
    "prune until 0.9 hold 0.05": {"prune_until": 0.9, "prune_hold": 0.05},  # later cycles regrown to the full peak
    "respawn checks 40": {"respawn_checks": 40},  # fewer chunk ends before the pruning cycles
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--tris", type=int, default=1000)
    p.add_argument("--time-limit", type=float, default=5.0)
    p.add_argument("--images", default="astronaut.png,chelsea.png")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--json")
    a = p.parse_args()
    eng = Engine("gpu")
    rows = []
    for name in a.variants.split(","):
        v = VARIANTS[name]
        settings = {"lr_vertex": 0.006 * a.size / 176} if v == "frame" else v
        for image in a.images.split(","):
            path = image if "/" in image else sample_path(image)
            r = fit_and_score(eng, path, a.tris, 0, a.size, StopConditions(time_limit=a.time_limit), **settings)
            r["variant"] = name
            rows.append(r)
            print(f"{name:28s} {r['image']:14s} {r['psnr']:7.3f} dB  {r['iterations']:6d} it", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1, default=float))


if __name__ == "__main__":
    main()
