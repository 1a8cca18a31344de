"""Issue #20's focus measurement: a mask weighting the left half (white left, black right) against
the unweighted fit at equal triangles and iterations; PSNR of each half of the fit's render
against the working-size target. Usage:
    python tools/focus_measure.py [--image astronaut.png] [--size 176] [--tris 150] [--iters 600] [--seed 0]
"""
from __future__ import annotations

import argparse
import json

import numpy as np

import trifit
from trifit.resources import sample_path


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    return float(10 * np.log10(1.0 / np.mean((a.astype(np.float64) - b) ** 2)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image", default="astronaut.png")
    ap.add_argument("--size", type=int, default=176)
    ap.add_argument("--tris", type=int, default=150)
    ap.add_argument("--iters", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    engine = trifit.Engine()
    rows = {}
    for name in ("unweighted", "left half"):
        f = trifit.Fitter(sample_path(a.image), engine=engine, triangles=a.tris, size=a.size, seed=a.seed)
        H, W = f.target.shape[:2]
        if name != "unweighted":
            mask = np.zeros((H, W), np.float32)
            mask[:, : W // 2] = 1.0
            f.set_weights(mask)
        f.step(a.iters)
        f.finish()
        img = np.asarray(engine.render(f.scene, W, H), dtype=np.float64)[..., :3]
        t = np.asarray(f.target, dtype=np.float64)
        rows[name] = {"left": psnr(img[:, : W // 2], t[:, : W // 2]), "right": psnr(img[:, W // 2:], t[:, W // 2:]),
                      "whole": psnr(img, t)}
        f.close()
    print(json.dumps({"adapter": engine.adapter,
                      "settings": vars(a), "psnr": rows}, indent=1, default=str))


if __name__ == "__main__":
    main()
