"""Elitist pruning cycles (measured, not built into the fit): at each later pruning cycle's start
(its regrowth event) the fit compares its last loss -- the scene at the count asked for, half a
cycle after its last pruning step -- with the lowest seen at earlier cycles' starts; where it is
higher, the fit goes back to that best state (parameters, Adam moments, probed final sigma)
before it grows (and, with ``--final 1``, before the polish after the last cycle), so a cycle
whose pruning lost the scene something is undone rather than built on. One image, one fit: no
extra GPU work, a readback of the state at each cycle's start.

    python tools/elitist_cycles.py --budget 12000 --seeds 0,1,2 [--images a.png,b.png] [--margin 0]

Each seed runs the default and the elitist fit, alternating; each scene is scored by the float64
reference as saved. ``--margin M``: go back only where the loss is over (1 + M) x the best.
It reaches into the fitter's private state (``_state``, ``_set``): a measuring tool, not an API.
"""

import argparse
import time

import cycle_runs
import numpy as np

from trifit import Engine, Fitter
from trifit.quality import score_as_saved
from trifit.strategy import DefaultStrategy


class Elitist(DefaultStrategy):
    """The default strategy, going back to the best cycle start's state where a cycle made it worse."""

    margin = 0.0

    def select(self, iteration: int) -> None:
        """Keep this state as the best, or go back to the best."""
        fit = self.fit
        loss = float(fit.last_losses()[0])
        best = getattr(self, "_best", None)
        if best is None or loss <= best[0]:
            raw, m, v = fit._state()
            self._best = (loss, raw, m, v, self.sigma_scales.copy())
            self.kept = getattr(self, "kept", 0) + 1
        elif loss > best[0] * (1.0 + self.margin):
            _, raw, m, v, scales = best
            self.sigma_scales[:] = scales
            fit._set(raw, m, v, fit.n_triangles, fit.iteration)
            fit.use_schedule(self.schedule(iteration))
            self.reverted = getattr(self, "reverted", 0) + 1

    def on_event(self, iteration: int) -> None:
        change, fit = self._count_change(iteration), self.fit
        if self.pruning and change is not None and change[0] == "grow" and fit.n_triangles == self.settings.triangles:
            self.select(iteration)
        super().on_event(iteration)


def main() -> None:
    p = argparse.ArgumentParser()
    cycle_runs.add_fit_options(p)
    p.add_argument("--margin", type=float, default=0.0)
    p.add_argument("--final", type=int, default=1, help="also at the last cycle's end, before the polish")
    a = p.parse_args()
    Elitist.margin = a.margin
    eng = Engine("gpu")
    print(f"# elitist pruning cycles, {a}, {eng.description}, {time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    for name, target in cycle_runs.targets(a, eng):
        for seed in cycle_runs.seeds(a):
            for variant in ("default", "elitist"):
                f = Fitter(target, triangles=a.tris, size=a.size, seed=seed, engine=eng)
                if variant == "elitist":
                    f.strategy.__class__ = Elitist
                t0 = time.perf_counter()
                f.plan(a.budget, time_budgeted=True)
                start, length, cycles = f.strategy.cycles()
                polish = min(a.budget, int(np.ceil(start + cycles * length - 1e-6)))  # the last cycle's end
                f.step(polish)  # (two calls, one fit: the same bytes as one call of a.budget)
                if variant == "elitist" and a.final:
                    f.strategy.select(f.iteration)
                f.step(a.budget - polish)
                f.finish()
                wall = time.perf_counter() - t0
                psnr = score_as_saved(f.scene, target)["psnr"]
                s = f.strategy
                print(f"{name} seed {seed} {variant}: {f.iteration} it {wall:.2f} s psnr {psnr:.3f} "
                      f"kept {getattr(s, 'kept', 0)} reverted {getattr(s, 'reverted', 0)}", flush=True)
                f.close()


if __name__ == "__main__":
    main()
