"""1 s time-limited fits of R replicas (the same image, seeds 0..R-1) in one batched fit
(BatchFitter): the iterations it runs, each replica's PSNR (float64 reference, as saved), the best
and the mean -- what keeping the best of R seeds fitted side by side would give (issue #19).

    python tools/replicas_1s.py [ROUNDS]
"""

import sys
import time

import numpy as np

from trifit import BatchFitter, Engine, Fitter, StopConditions, load_image
from trifit.quality import score_as_saved
from trifit.resources import sample_path

eng = Engine("gpu")
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 1
for name in ("astronaut.png", "chelsea.png"):
    target = load_image(sample_path(name), 176)
    Fitter(target, triangles=150, size=176, engine=eng).close()
    for R in (2, 4, 8):
        BatchFitter([target] * R, triangles=150, size=176, seeds=list(range(R)), engine=eng).close()  # pipelines
    for rnd in range(rounds):
        for R in (1, 2, 4, 8):
            f = BatchFitter([target] * R, triangles=150, size=176, seeds=list(range(R)), engine=eng)
            t0 = time.perf_counter()
            f.run(StopConditions(time_limit=1.0))
            wall = time.perf_counter() - t0
            ps = [score_as_saved(s, target)["psnr"] for s in f.scenes]
            print(f"{name} round {rnd} R={R}: {f.iteration} iterations in {wall:.2f} s; PSNR per replica "
                  f"{' '.join(f'{p:.2f}' for p in ps)}; best {max(ps):.2f} mean {np.mean(ps):.2f}", flush=True)
            f.close()
