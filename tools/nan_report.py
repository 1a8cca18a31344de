"""Where a fit loop reports a NaN that its own Adam step made: N fresh loops each run 4 iterations,
get NaN first moments for three parameters, and run 4 more (chunks of 4). The host loop
(render/fitloop.py) reports it at iteration 6, the first whose forward renders it; the GPU loop
should too (tests/test_faults.py runs the same scenario small).

    python tools/nan_report.py [--runs 40] [--size 512] [--tris 1000]
"""

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from trifit import Engine  # noqa: E402
from trifit.errors import NumericalFault  # noqa: E402
from trifit.fitloop import FitSettings  # noqa: E402
from trifit.placement import initial_raw  # noqa: E402
from trifit.strategy import plan_schedule  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--tris", type=int, default=1000)
    a = p.parse_args()
    eng = Engine("gpu")
    target = np.random.default_rng(0).uniform(0, 1, (a.size, a.size, 3))
    s = FitSettings(triangles=a.tris, size=a.size, chunk=4, planned_iterations=400)
    sched = plan_schedule(s, a.size)
    raw0 = initial_raw(target, a.tris, np.random.default_rng(0), s, sched.sigma_start)
    seen = collections.Counter()
    for _ in range(a.runs):
        loop = eng.impl.fit_loop(target, raw0, a.tris, s, sched)
        loop.run(4)
        raw, m, v = loop.get_state()
        for j in (0, (a.tris - 1) * 10, (a.tris // 2) * 10 + 3):  # the first, last and a middle triangle
            m[j] = np.nan
        loop.set_state(raw, m, v)
        try:
            loop.run(4)
            seen["none"] += 1
        except NumericalFault as e:
            seen[e.iteration] += 1
        loop.release()
    print(f"size {a.size} tris {a.tris} on {eng.description}: reported at {dict(seen)} in {a.runs} runs", flush=True)


if __name__ == "__main__":
    main()
