"""Host time of a fit's events (growth stages, pruning, respawns: the numpy work between
submissions) over a fixed plan, per variant of tools/sweep_quality.py. The GPU work is not in
these figures; on a fast GPU the host work is what a short time limit pays for.

    python tools/host_events.py [--iters 5000] [--variants "default,cycles 6 until 0.85"] [--image astronaut.png]
"""

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from render import Engine, Fitter, load_image  # noqa: E402
from resources import sample_path  # noqa: E402
from sweep_quality import VARIANTS  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=5000)
    p.add_argument("--variants", default="default,cycles 6 until 0.85")
    p.add_argument("--image", default="astronaut.png")
    p.add_argument("--tris", type=int, default=150)
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="also print the N costliest functions inside the events (cProfile, cumulative)")
    a = p.parse_args()
    eng = Engine("gpu")
    target = load_image(sample_path(a.image) if "/" not in a.image else a.image, 176)
    print(f"# host events over a {a.iters}-iteration plan, {a.tris} triangles, {eng.description}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    for name in a.variants.split(","):
        f = Fitter(target, triangles=a.tris, size=176, seed=0, engine=eng, **VARIANTS[name])
        spent, calls = [0.0], [0]
        handle = f._handle_events

        prof = cProfile.Profile() if a.profile else None

        def timed(handle=handle, spent=spent, calls=calls, prof=prof):
            t0 = time.perf_counter()
            if prof is not None:
                prof.runcall(handle)
            else:
                handle()
            spent[0] += time.perf_counter() - t0
            calls[0] += 1

        f._handle_events = timed
        f.plan(a.iters)
        t0 = time.perf_counter()
        f.step(a.iters)
        print(f"{name:28s} host events {spent[0]:.2f} s in {calls[0]} calls; whole fit {time.perf_counter() - t0:.1f} s",
              flush=True)
        if prof is not None:
            pstats.Stats(prof).sort_stats("cumulative").print_stats(a.profile)
        f.close()


if __name__ == "__main__":
    main()
