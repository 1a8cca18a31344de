"""Batched vs one-by-one fitting on this adapter (issue #6): B copies of a sample at one size.

    python tools/batch_speed.py [--batch 16] [--size 176] [--tris 150] [--iters 200]
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from render import Engine, Fitter, load_image  # noqa: E402
from render.fitter import BatchFitter  # noqa: E402
from resources import sample_path  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--size", type=int, default=176)
    p.add_argument("--tris", type=int, default=150)
    p.add_argument("--iters", type=int, default=200)
    a = p.parse_args()
    eng = Engine("gpu")
    target = load_image(sample_path("chelsea.png"), a.size)
    targets = [target] * a.batch
    seeds = list(range(a.batch))
    fixed = dict(growth_stages=1, respawn_every=0, coarse_fraction=0)
    BatchFitter(targets[:2], triangles=a.tris, size=a.size, seeds=seeds[:2], engine=eng).run(5)  # warm-up
    t0 = time.perf_counter()
    bf = BatchFitter(targets, triangles=a.tris, size=a.size, seeds=seeds, engine=eng)
    bf.run(a.iters)
    batched = time.perf_counter() - t0
    t0 = time.perf_counter()
    for s in seeds:
        f = Fitter(target, triangles=a.tris, size=a.size, seed=s, engine=eng, **fixed)
        f.plan(a.iters)
        f.step(a.iters)
        f.close()
    sequential = time.perf_counter() - t0
    print(f"{eng.description}: {a.batch} images {a.size}px {a.tris} tris {a.iters} iterations: "
          f"batched {batched:.2f} s ({1e3 * batched / a.iters / a.batch:.3f} ms per image-iteration), "
          f"one by one {sequential:.2f} s ({1e3 * sequential / a.iters / a.batch:.3f} ms), "
          f"speed-up x{sequential / batched:.1f}")


if __name__ == "__main__":
    main()
