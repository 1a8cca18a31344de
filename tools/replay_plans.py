"""A time-limited fit's sequence of plans, replayed without the clock: the plans a real fit made
(as tools/time_plans.py prints them) applied at their iterations, or -- ``--final`` -- only the
last of them, from the start (the budgeted plan of the same length). Deterministic on any
adapter, so what the re-planning itself costs can be measured where the fit did not run.

    python tools/replay_plans.py --plans "[(0, 100, 292), (8, 1827, 292), ...]" --guessed-until 1050 \\
        --iterations 8105 [--final] [--image astronaut.png] [--tris 500] [--size 176] [--seed 0]

Plans made before ``--guessed-until`` (the half-size stage's end) are replayed as guessed ones.
Prints the PSNR as saved and the count's changes (at chunk ends).
"""

import argparse
import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trifit import Fitter, StopConditions, load_image  # noqa: E402
from trifit.quality import score_as_saved  # noqa: E402
from trifit.resources import sample_path  # noqa: E402
from trifit.run import FitRun  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--plans", required=True, help="[(iteration, planned, count), ...] as time_plans.py prints")
    p.add_argument("--guessed-until", type=int, default=0)
    p.add_argument("--iterations", type=int, required=True)
    p.add_argument("--final", action="store_true", help="only the last plan, from iteration 0")
    p.add_argument("--image", default="astronaut.png")
    p.add_argument("--tris", type=int, default=500)
    p.add_argument("--size", type=int, default=176)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    plans = ast.literal_eval(a.plans)
    path = sample_path(a.image) if "/" not in a.image else a.image
    target = load_image(path, a.size)
    f = Fitter(target, triangles=a.tris, size=a.size, seed=a.seed)
    if a.final:
        script = [[0, "time_plan", plans[-1][1]]]
    else:
        script = [[it, "guessed_plan" if it < a.guessed_until else "time_plan", n] for it, n, *_ in plans]
    counts = []
    step = f.step

    def counted(n=100):
        stats = step(n)
        if not counts or counts[-1][1] != f.n_triangles:
            counts.append((f.iteration, f.n_triangles))
        return stats

    f.step = counted
    FitRun(f, StopConditions(iterations=a.iterations), script=script).run()
    how = "the last plan from the start" if a.final else f"{len(script)} plans at their iterations"
    print(f"{a.image} {a.tris} tris at {a.size} px, seed {a.seed}, {how}: {f.iteration} iterations, "
          f"PSNR {score_as_saved(f.scene, target)['psnr']:.3f} dB")
    print("counts (iteration, count):", counts)


if __name__ == "__main__":
    main()
