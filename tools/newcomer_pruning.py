"""Pruning that weighs the newcomers (the fit's ``prune_newcomers`` setting, render/strategy.py):
at each pruning step of a cycle after the first, the triangles that cycle grew back -- which have
had part of a cycle to find their place, starting faint and small -- rank by F times their removal
cost (a negative cost is divided by F, so F moves a newcomer's rank the same way either sign). This
runs the fit at each F and counts how many newcomers the pruning steps keep.

    python tools/newcomer_pruning.py --budget 12000 --seeds 0,1,2 --factors 1,2 [--images a.png,b.png]
    python tools/newcomer_pruning.py --seconds 1 --seeds 0,1,2 --factors 1,2   # time-limited, in process

Each seed runs every factor in turn (2 is the default fit; 1 ranks newcomers as the rest); each
scene is scored by the float64 reference as saved.
"""

import argparse
import time

import cycle_runs
import numpy as np

from trifit import Engine, Fitter, StopConditions
from trifit.quality import score_as_saved
from trifit.strategy import DefaultStrategy


class Counted(DefaultStrategy):
    """The default strategy, counting the newcomers its pruning steps rank and keep."""

    newcomers_seen = 0  # newcomers ranked at pruning steps (each step counts its own)
    newcomers_kept = 0  # ... and kept there

    def on_event(self, iteration: int) -> None:
        change, fit = self._count_change(iteration), self.fit
        if change is None or change[0] != "prune" or self.newcomers_from is None:
            return super().on_event(iteration)
        new, keep = fit.placed_since(self.newcomers_from), fit.keep

        def counted(idx):
            self.newcomers_seen += int(new.sum())
            self.newcomers_kept += int(np.take_along_axis(new, np.asarray(idx), axis=1).sum())
            keep(idx)

        fit.keep = counted
        try:
            super().on_event(iteration)
        finally:
            del fit.keep


def main() -> None:
    p = argparse.ArgumentParser()
    cycle_runs.add_fit_options(p)
    p.add_argument("--factors", default="1,2")
    p.add_argument("--seconds", type=float, help="time-limited fits of this many seconds instead of --budget")
    a = p.parse_args()
    factors = [float(f) for f in a.factors.split(",")]
    eng = Engine("gpu")
    print(f"# newcomers' pruning costs scaled, {a}, {eng.description}, {time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    for name, target in cycle_runs.targets(a, eng):
        for seed in cycle_runs.seeds(a):
            for factor in factors:
                f = Fitter(target, triangles=a.tris, size=a.size, seed=seed, engine=eng, prune_newcomers=factor)
                f.strategy.__class__ = Counted
                t0 = time.perf_counter()
                if a.seconds:
                    f.run(StopConditions(time_limit=a.seconds))
                else:
                    f.plan(a.budget, time_budgeted=True)
                    f.step(a.budget)
                    f.finish()
                wall = time.perf_counter() - t0
                psnr = score_as_saved(f.scene, target)["psnr"]
                s = f.strategy
                print(f"{name.rsplit('/', 1)[-1]} seed {seed} factor {factor:g}: {f.iteration} it {wall:.2f} s "
                      f"psnr {psnr:.3f} newcomers kept {s.newcomers_kept} of {s.newcomers_seen}", flush=True)
                f.close()


if __name__ == "__main__":
    main()
