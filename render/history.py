"""What a fit reports as it runs: per-iteration losses, per-step statistics, timings."""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field

import numpy as np


@dataclass
class StepStats:
    iteration: int
    iterations: int
    loss: float
    psnr: float
    wall_s: float
    it_per_s: float
    n_triangles: int
    sigma_px: float


@dataclass
class History:
    """Every iteration's number and loss, in typed arrays: 16 bytes an iteration (Python lists of
    ints and floats take ~85, which a long fit sees as steady memory growth)."""

    iterations: array = field(default_factory=lambda: array("q"))
    losses: array = field(default_factory=lambda: array("d"))

    def add(self, first_iter: int, losses: np.ndarray) -> None:
        self.iterations.extend(range(first_iter, first_iter + len(losses)))
        self.losses.frombytes(np.ascontiguousarray(losses, dtype=np.float64).tobytes())

    def truncate(self, last_iter: int) -> None:
        """Forget iterations after ``last_iter`` (a rollback went back to it)."""
        while self.iterations and self.iterations[-1] > last_iter:
            self.iterations.pop()
            self.losses.pop()

    def forget_before(self, first_iter: int) -> None:
        """Forget iterations before ``first_iter`` (a record that would otherwise grow for ever)."""
        keep = next((k for k, it in enumerate(self.iterations) if it >= first_iter), len(self.iterations))
        del self.iterations[:keep]
        del self.losses[:keep]

    def copy(self) -> History:
        return History(array("q", self.iterations), array("d", self.losses))

    def __len__(self) -> int:
        return len(self.losses)


def psnr_from_mse(mse: float) -> float:
    return float("inf") if mse <= 0 else 10.0 * math.log10(1.0 / mse)


def loop_timings(loop, engine, recent: int | None = None) -> dict:
    """Timings of a fit loop and its engine: median GPU ms per pass, host phases, counters, pool."""
    tail = slice(-recent, None) if recent else slice(None)
    gpu = {k: float(np.median(s[tail])) for k, s in loop.gpu_phase_samples().items() if s}
    host = {k: float(np.median(s[tail])) for k, s in engine.impl.host.samples.items() if s}
    return {"gpu_ms": gpu, "host_ms": host, "counters": engine.counters(), "pool": engine.pool_stats()}


def release_loop(loop) -> None:
    """Give a fit loop's device buffers back to the pool (the reference loop holds none)."""
    release = getattr(loop, "release", None)
    if release is not None:
        release()
