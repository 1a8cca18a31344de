"""Pruning that weighs the newcomers (measured, not built into the fit): at each pruning step the
triangles placed since the last growth event -- which have had at most half a cycle to find their
place, starting faint and small -- have their removal costs scaled by F before the ranking (F > 1
protects them, F < 1 prefers to remove them; ``inf`` removes only older triangles). Positive costs
are multiplied by F, negative ones divided, so F moves a newcomer's rank the same way either sign.

    python tools/newcomer_pruning.py --budget 12000 --seeds 0,1,2 --factors 1,2,inf [--images a.png,b.png]
    python tools/newcomer_pruning.py --seconds 1 --seeds 0,1,2 --factors 1,2   # time-limited, in process

Each seed runs every factor in turn (1 is the default fit, to the byte); each scene is scored by
the float64 reference as saved. It reaches into the fitter's private id counter (``_next_id``):
a measuring tool, not an API.
"""

import argparse
import time

import cycle_runs
import numpy as np

from trifit import Engine, Fitter, StopConditions
from trifit.quality import score_as_saved
from trifit.strategy import DefaultStrategy


class Newcomers(DefaultStrategy):
    """The default strategy, its pruning steps ranking newcomers' costs scaled by ``factor``."""

    factor = 1.0
    born_from = None   # the first id of the triangles placed since the last growth event
    newcomers_seen = 0  # newcomers ranked at pruning steps (each step counts its own)
    newcomers_kept = 0  # ... and kept there

    def on_event(self, iteration: int) -> None:
        fit, change = self.fit, self._count_change(iteration)
        if change is not None and change[0] == "grow":
            fit.triangle_ids_all()  # (numbered, so the counter is where new ids start)
            self.born_from = getattr(fit, "_next_id", 0)
        if change is None or change[0] != "prune":
            return super().on_event(iteration)
        factor, born = self.factor, self.born_from

        def biased(n, transient=False):
            costs = fit.pruning_costs(transient).astype(np.float64)
            if born is not None:
                new = np.stack(fit.triangle_ids_all()) >= born
                if np.isinf(factor):
                    scaled = costs + np.where(np.isfinite(costs), 1e30, 0.0)
                else:
                    scaled = np.where(costs > 0, costs * factor, costs / factor)
                costs = np.where(new, scaled, costs)
            order = np.sort(np.argsort(-costs, kind="stable", axis=1)[:, :n], axis=1)
            if born is not None:
                self.newcomers_kept += int(np.sum(np.take_along_axis(new, order, axis=1)))
                self.newcomers_seen += int(np.sum(new))
            return order

        fit.most_costly = biased
        try:
            super().on_event(iteration)
        finally:
            del fit.most_costly


def main() -> None:
    p = argparse.ArgumentParser()
    cycle_runs.add_fit_options(p)
    p.add_argument("--factors", default="1,2,inf")
    p.add_argument("--seconds", type=float, help="time-limited fits of this many seconds instead of --budget")
    a = p.parse_args()
    factors = [float(f) for f in a.factors.split(",")]
    eng = Engine("gpu")
    print(f"# newcomers' pruning costs scaled, {a}, {eng.description}, {time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    for name, target in cycle_runs.targets(a, eng):
        for seed in cycle_runs.seeds(a):
            for factor in factors:
                f = Fitter(target, triangles=a.tris, size=a.size, seed=seed, engine=eng)
                f.strategy.__class__ = Newcomers
                f.strategy.factor = factor
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
