"""Does a fitted scene's triangle order leave anything on the table? Gradient descent moves the
triangles' numbers, never their order, so this tries every swap of two neighbours in the list (all
of them at once, batched), keeps the best ones that do not overlap, and repeats until none lowers
the error. Prints the PSNR gained.

    python tools/zorder_swaps.py SCENE.json IMAGE [--sweeps 6]
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from trifit import Engine, Scene, load_image  # noqa: E402
from trifit.quality import score  # noqa: E402
from trifit.resources import sample_path  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("scene")
    p.add_argument("image", help="the target: a bundled sample's name or a path")
    p.add_argument("--sweeps", type=int, default=6)
    a = p.parse_args()
    eng = Engine("gpu")
    sc = Scene.load(a.scene)
    target = load_image(sample_path(a.image) if "/" not in a.image else a.image, max(sc.width, sc.height))
    tris = sc.triangles.copy()

    def mse(cands):
        B = len(cands)
        return eng.impl.mse_batch(np.stack(cands), np.repeat(sc.background[None], B, 0), np.full(B, sc.sigma),
                                  np.repeat(target[None], B, 0), transient=True)

    t0, cur = time.perf_counter(), mse([tris])[0]
    for sweep in range(a.sweeps):
        cands = []
        for i in range(len(tris) - 1):
            c = tris.copy()
            c[[i, i + 1]] = c[[i + 1, i]]
            cands.append(c)
        gain = cur - np.concatenate([mse(cands[k:k + 32]) for k in range(0, len(cands), 32)])
        used, n = set(), 0
        for i in np.argsort(-gain):
            if gain[i] <= 0:
                break
            if i in used or i + 1 in used:
                continue
            tris[[i, i + 1]] = tris[[i + 1, i]]
            used |= {i, i + 1}
            n += 1
        new = mse([tris])[0]
        print(f"sweep {sweep}: {n} swaps, {10 * np.log10(cur / new):+.4f} dB", flush=True)
        cur = new
        if n == 0:
            break
    swapped = sc.copy()
    swapped.triangles = tris
    print(f"{Path(a.scene).name}: PSNR {score(sc, target)['psnr']:.3f} -> {score(swapped, target)['psnr']:.3f} dB "
          f"({time.perf_counter() - t0:.1f} s on {eng.description})", flush=True)


if __name__ == "__main__":
    main()
