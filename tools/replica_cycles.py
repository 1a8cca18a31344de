"""Replicas per pruning cycle (measured, not built into the fit): before each pruning cycle's
growth, the fit is checkpointed and resumed R times, replica r > 0 with a random stream of its own
(so its new triangles land elsewhere); each runs the cycle, and the one with the best
working-size PSNR at the cycle's end goes on. R = 1 is the plain fit (checkpoints resume
exactly). Deterministic: budgeted plans (as a time limit plans them), scored as saved.

    python tools/replica_cycles.py [--plan 7500] [--seeds 0,1,2,3] [--replicas 1,2,4] [--images a.png,b.png]
"""

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from trifit import Engine, Fitter, load_image  # noqa: E402
from trifit.quality import score_as_saved  # noqa: E402
from trifit.resources import sample_path  # noqa: E402


def replicated_fit(eng, target, seed: int, replicas: int, plan: int, tris: int, size: int, verbose: bool) -> Fitter:
    f = Fitter(target, triangles=tris, size=size, seed=seed, engine=eng)
    f.plan(plan, time_budgeted=True)
    start, length, cycles = f.strategy.cycles()
    # a cycle's growth fires as a step reaches its first iteration: fork one iteration before it
    f.step(math.ceil(start - 1e-6) - 1 - f.iteration)
    for j in range(cycles):
        end = math.ceil(start + (j + 1) * length - 1e-6) - 1
        ck = f.checkpoint()
        f.close()
        best = None
        for r in range(replicas):
            g = Fitter.resume(target, ck, eng)
            if r > 0:
                g.rngs[0] = np.random.default_rng([seed, j, r])
            st = g.step(end - g.iteration)
            if verbose:
                print(f"  cycle {j} replica {r}: iteration {g.iteration}, {g.n_triangles} triangles, "
                      f"PSNR {st.psnr:.4f}", flush=True)
            if best is None or st.psnr > best[0]:
                if best is not None:
                    best[1].close()
                best = (st.psnr, g)
            else:
                g.close()
        f = best[1]
    f.step(plan - f.iteration)
    return f


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--plan", type=int, default=7500)
    p.add_argument("--seeds", default="0,1,2,3")
    p.add_argument("--replicas", default="1,2,4")
    p.add_argument("--images", default="astronaut.png,chelsea.png")
    p.add_argument("--size", type=int, default=176)
    p.add_argument("--tris", type=int, default=150)
    p.add_argument("--verbose", action="store_true", help="each replica's PSNR at each cycle's end")
    a = p.parse_args()
    eng = Engine("gpu")
    print(f"# replicas per pruning cycle, budgeted plan {a.plan}, {eng.description}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    for image in a.images.split(","):
        path = sample_path(image) if "/" not in image else image
        target = load_image(path, a.size)
        for replicas in [int(r) for r in a.replicas.split(",")]:
            psnrs, t0 = [], time.perf_counter()
            for seed in [int(s) for s in a.seeds.split(",")]:
                f = replicated_fit(eng, target, seed, replicas, a.plan, a.tris, a.size, a.verbose)
                psnrs.append(score_as_saved(f.scene, target)["psnr"])
                f.close()
            print(f"R={replicas} {Path(path).name:14s} seeds {a.seeds}: PSNR mean {np.mean(psnrs):.3f} "
                  f"({min(psnrs):.2f}-{max(psnrs):.2f}) [{' '.join(f'{v:.3f}' for v in psnrs)}] "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
