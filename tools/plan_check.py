"""Does a time-limited fit lose quality to its re-planning? (docs/QUALITY.md, seventh session)

A ``--time-limit`` fit starts from a guessed plan and re-plans from its measured speed after every
chunk; until the full-size stage has run, a full-size iteration is guessed to cost
1 / COARSE_COST_GUESS half-size ones. For each seed this runs the time-limited fit with each
guess, then a budgeted plan (the plan known from the start, deterministic) of the iterations the
last of them reached, and prints each fit's plan trajectory (iteration:planned).

    python3 tools/plan_check.py [--time-limit 1] [--seeds 0,1,2,3,4,5] [--guesses 0.4,1.0]
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import render.fitter as fitter_mod  # noqa: E402
from render import Engine, Fitter, StopConditions, load_image  # noqa: E402
from render.quality import score_as_saved  # noqa: E402
from resources import sample_path  # noqa: E402


def psnr_of(f: Fitter, target: np.ndarray) -> float:
    return score_as_saved(f.scene, target)["psnr"]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--time-limit", type=float, default=1.0)
    p.add_argument("--seeds", default="0,1,2,3,4,5")
    p.add_argument("--guesses", default="0.4,1.0")
    p.add_argument("--images", default="astronaut.png,chelsea.png")
    a = p.parse_args()
    engine = Engine("gpu")
    print(f"# {engine.description} {time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    warm = Fitter(load_image(str(sample_path("chelsea.png")), 176), 150, 176, 9, engine=engine)
    warm.run(StopConditions(time_limit=0.3))
    warm.close()
    default_guess = fitter_mod.COARSE_COST_GUESS
    rows: dict = {}
    for image in a.images.split(","):
        target = load_image(str(sample_path(image)), 176)
        for seed in (int(s) for s in a.seeds.split(",")):
            its = 0
            for guess in (float(g) for g in a.guesses.split(",")):
                fitter_mod.COARSE_COST_GUESS = guess
                try:
                    f = Fitter(target, 150, 176, seed, engine=engine)
                    plans = []
                    plain_plan = f.plan

                    def plan(n, _plain=plain_plan, _f=f, _plans=plans):
                        _plans.append((_f.iteration, int(n)))
                        _plain(n)

                    f.plan = plan
                    f.run(StopConditions(time_limit=a.time_limit))
                finally:
                    fitter_mod.COARSE_COST_GUESS = default_guess
                psnr, its = psnr_of(f, target), f.iteration
                rows.setdefault((image, f"guess {guess}"), []).append((psnr, its))
                trajectory = " ".join(f"{i}:{n}" for i, n in plans)
                print(f"{image} s{seed} guess {guess}: {psnr:.2f} dB, {its} iterations, "
                      f"{len(plans)} plans [{trajectory}]", flush=True)
                f.close()
            f = Fitter(target, 150, 176, seed, engine=engine)
            f._time_budgeted = True  # what replan_for_time sets: the short-budget coarse share
            f.plan(its)
            f.step(its)
            psnr = psnr_of(f, target)
            rows.setdefault((image, "budgeted"), []).append((psnr, its))
            print(f"{image} s{seed} budgeted plan of {its}: {psnr:.2f} dB", flush=True)
            f.close()
    for (image, name), values in rows.items():
        ps, its = [v[0] for v in values], [v[1] for v in values]
        print(f"{image:14s} {name:10s} PSNR mean {np.mean(ps):.2f} ({min(ps):.2f}-{max(ps):.2f}), "
              f"iterations {min(its)}-{max(its)} (mean {np.mean(its):.0f})")


if __name__ == "__main__":
    main()
