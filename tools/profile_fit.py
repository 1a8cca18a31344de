"""Where a time-limited fit's wall clock goes: cProfile of Fitter.run (default settings), by
cumulative time, plus the iteration count. For finding what a 1 s H200 fit spends besides
iterations.

    python tools/profile_fit.py [--time-limit 1] [--image astronaut.png] [--size 176] [--tris 150] [--top 40]
        [--sort cumulative,tottime]
"""

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trifit import Engine, Fitter, StopConditions, load_image  # noqa: E402
from trifit.resources import sample_path  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--time-limit", type=float, default=1.0)
    p.add_argument("--image", default="astronaut.png")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--size", type=int, default=176)
    p.add_argument("--tris", type=int, default=150)
    p.add_argument("--sort", default="cumulative", help="pstats order(s), comma-separated: cumulative, tottime, ...")
    a = p.parse_args()
    eng = Engine("gpu")
    target = load_image(sample_path(a.image), a.size)
    Fitter(target, triangles=a.tris, size=a.size, engine=eng).close()  # pipelines compiled first, as in a bench
    f = Fitter(target, triangles=a.tris, size=a.size, seed=0, engine=eng)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.runcall(f.run, StopConditions(time_limit=a.time_limit))
    print(f"# {eng.description}: {f.iteration} iterations in {time.perf_counter() - t0:.3f} s "
          f"(planned {f.settings.planned_iterations})", flush=True)
    for order in a.sort.split(","):
        pstats.Stats(prof).sort_stats(order).print_stats(a.top)


if __name__ == "__main__":
    main()
