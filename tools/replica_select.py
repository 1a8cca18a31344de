"""Replicas side by side with selection per pruning cycle (measured, not built into the fit):
R replicas of one image fitted as one batch (BatchFitter, seeds ``seed * 1000 + r``, so each
grows with its own random stream); at each later pruning cycle's start (its regrowth event)
every replica takes the state -- parameters, Adam moments, scene records, probed final sigma --
of the replica with the lowest loss at that iteration; the scene kept at the end is the replica
with the lowest last loss. ``--select 0``: no selection, the best of R at the end only.
``--device 1``: the state is copied on the device (three buffer copies per replica) rather than
read back and set again. Each scene is scored by the float64 reference as saved.

    python tools/replica_select.py --mode time --value 1.0 --replicas 1,2 --seeds 0,1,2 [--select 0] [--device 1]
    python tools/replica_select.py --mode budget --value 12000 --replicas 1,2,4 [--images a.png,b.png] [--set prune_hold=0.05]

It reaches into the fitter's and the fit loop's private state (``_state``, ``_set``, ``_loop``):
a measuring tool, not an API.
"""

import argparse
import time

import numpy as np
import wgpu

from trifit import BatchFitter, Engine, StopConditions, load_image
from trifit.quality import score_as_saved
from trifit.resources import sample_path
from trifit.strategy import DefaultStrategy


def copy_on_device(fit, b: int) -> None:
    """Every image of ``fit``'s current loop takes image ``b``'s parameters, moments and records."""
    loop = fit._loop
    n, stride = loop.n_tris * 10 + 3, loop.shape.scene_stride
    tmp = getattr(loop, "_replica_tmp", None)
    if tmp is None:  # (a buffer cannot be copied into itself: through a scratch buffer)
        tmp = loop._replica_tmp = loop.device.create_buffer(
            size=max(n * 8, stride * 4), usage=wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)
    enc = loop.device.create_command_encoder()
    for buf, size in ((loop.extra["params"], n * 4), (loop.extra["moments"], n * 8), (loop.ws.buffers["scene"], stride * 4)):
        enc.copy_buffer_to_buffer(buf, b * size, tmp, 0, size)
        for other in range(fit.batch):
            if other != b:
                enc.copy_buffer_to_buffer(tmp, 0, buf, other * size, size)
    loop.device.queue.submit([enc.finish()])
    loop._forget_reads()
    fit._cached = None


class Selecting(DefaultStrategy):
    """The default strategy, with every replica taking the best one's state at each later cycle's start."""

    on_device = False
    selections = 0

    def on_event(self, iteration: int) -> None:
        change, fit = self._count_change(iteration), self.fit
        if fit.batch > 1 and self.pruning and change is not None and change[0] == "grow":
            b = int(np.argmin(fit.last_losses()))
            self.sigma_scales[:] = self.sigma_scales[b]
            if self.on_device:
                copy_on_device(fit, b)
            else:
                raw, m, v = fit._state()
                rows = [b] * fit.batch
                fit._set(raw[rows], m[rows], v[rows], fit.n_triangles, fit.iteration)
            fit.use_schedule(self.schedule(iteration))
            Selecting.selections += 1
        super().on_event(iteration)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("budget", "time"), default="budget")
    p.add_argument("--value", type=float, default=12000, help="iterations (budget) or seconds (time)")
    p.add_argument("--replicas", default="1,2,4")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--images", default="astronaut.png,chelsea.png")
    p.add_argument("--size", type=int, default=176)
    p.add_argument("--tris", type=int, default=150)
    p.add_argument("--select", type=int, default=1)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a FitSettings field for every fit (a number), e.g. prune_hold=0.05")
    a = p.parse_args()
    settings = {k: int(v) if v.lstrip("-").isdigit() else float(v) for k, v in (item.split("=", 1) for item in a.set)}
    Selecting.on_device = bool(a.device)
    eng = Engine("gpu")
    print(f"# replica selection per cycle, {a}, {eng.description}, {time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    counts = [int(r) for r in a.replicas.split(",")]
    for name in a.images.split(","):
        target = load_image(sample_path(name) if "/" not in name else name, a.size)
        for R in counts:  # (pipelines built before any timed fit)
            BatchFitter([target] * R, triangles=a.tris, size=a.size, seeds=list(range(R)), engine=eng, **settings).close()
        for seed in [int(s) for s in a.seeds.split(",")]:
            for R in counts:
                f = BatchFitter([target] * R, triangles=a.tris, size=a.size, seeds=[seed * 1000 + r for r in range(R)],
                                engine=eng, **settings)
                if a.select:
                    f.strategy.__class__ = Selecting
                Selecting.selections = 0
                t0 = time.perf_counter()
                if a.mode == "budget":
                    n = int(a.value)
                    f.plan(n, time_budgeted=True)
                    f.step(n)
                    f.finish()
                else:
                    f.run(StopConditions(time_limit=a.value))
                wall = time.perf_counter() - t0
                pick = int(np.argmin(f.last_losses()))
                ps = [score_as_saved(s, target)["psnr"] for s in f.scenes]
                print(f"{name} seed {seed} R={R}: {f.iteration} it {wall:.2f} s sel {Selecting.selections}; "
                      f"picked {ps[pick]:.3f} best {max(ps):.3f} mean {np.mean(ps):.3f} "
                      f"[{' '.join(f'{v:.3f}' for v in ps)}]", flush=True)
                f.close()


if __name__ == "__main__":
    main()
