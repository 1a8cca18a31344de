"""The plans a time-limited fit makes (render/run.py TimePlanner) and where it ends: every plan
(iteration, planned iterations, the count then), the iterations run and the score as saved.

By default on a simulated clock, so that the planner and the strategy can be studied
deterministically on any adapter (a lavapipe run stands in for an H200's timing): each step of
the run advances the clock by its iterations times the cost at the count it ended with -- a + b *
count seconds at the working size, c + d * count at half size -- plus e seconds (the step's fixed
costs: its chunk end, its event). ``--real``: the machine's own clock (what a user's fit does).

    python tools/time_plans.py [--image astronaut.png] [--seconds 1] [--tris 500] [--size 128]
                               [--cost a,b,c,d,e] [--seed 0] [--real]
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trifit import Fitter, StopConditions, load_image  # noqa: E402
from trifit.quality import score_as_saved  # noqa: E402
from trifit.resources import sample_path  # noqa: E402
from trifit.run import FitRun  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--image", default="astronaut.png")
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--tris", type=int, default=500)
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--cost", default="40e-6,1.2e-7,150e-6,3.6e-7,1.2e-3",
                   help="a,b,c,d,e: seconds an iteration a + b * count (working size), c + d * count "
                   "(half size), and e a step")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--real", action="store_true", help="the real clock, not the cost model")
    a = p.parse_args()
    ca, cb, cc, cd, ce = (float(v) for v in a.cost.split(","))
    path = sample_path(a.image) if "/" not in a.image else a.image
    target = load_image(path, a.size)
    f = Fitter(target, triangles=a.tris, size=a.size, seed=a.seed)
    now = [0.0]
    step = f.step

    def timed_step(n=100):
        stats = step(n)
        now[0] += n * ((cc + cd * f.n_triangles) if f.coarse else (ca + cb * f.n_triangles)) + ce
        return stats

    if not a.real:
        f.step = timed_step
    plans = []
    plan = f.plan

    def recorded_plan(n, **kw):
        plans.append((f.iteration, int(n), f.n_triangles))
        return plan(n, **kw)

    f.plan = recorded_plan
    clock = {"clock": lambda: now[0]} if not a.real else {}
    FitRun(f, StopConditions(time_limit=a.seconds), **clock).run()
    score = score_as_saved(f.scene, target)["psnr"]
    timing = "the real clock" if a.real else f"simulated, cost {a.cost}"
    print(f"{a.image} {a.tris} tris at {a.size} px, {a.seconds:g} s, {timing}: "
          f"{f.iteration} iterations (plan {f.settings.planned_iterations}), PSNR {score:.3f} dB")
    print("plans (iteration, planned, count):", plans)


if __name__ == "__main__":
    main()
