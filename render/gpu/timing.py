"""Attribution: per-pass GPU time from timestamp queries, host phases, and counters.

GPU pass times use timestamps written *inside* a compute pass (between dispatches) where the
adapter offers ``timestamp-query-inside-passes``; the instance normalises them to nanoseconds.
Host phases are wall-clock ``perf_counter`` intervals. Both keep every sample so reports can
quote medians and spreads.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

import numpy as np
import wgpu

from .device import GpuContext
from .readback import read_ranges

#: what a readback brought to the host, for the report: a fit's losses (the ring and the sampled
#: iteration's timestamps), the state for an event, crash-recovery snapshots, images (placement
#: against the last forward), renders (one-off calls), per-triangle sums (removal costs, gradients),
#: events' small results computed on the device (error tiles, placed triangles, flags, probe
#: losses) and scene records (scenes, checkpoints)
READBACK_KINDS = ("losses", "state", "snapshot", "image", "render", "sums", "events", "records")


class Counters:
    def __init__(self):
        self.submissions = 0
        self.upload_bytes = 0
        self.readback_bytes = 0
        self.readback_by = dict.fromkeys(READBACK_KINDS, 0)

    def read(self, kind: str, nbytes: int) -> None:
        """Count ``nbytes`` read back for ``kind`` (one of READBACK_KINDS)."""
        self.readback_bytes += nbytes
        self.readback_by[kind] += nbytes

    def as_dict(self) -> dict[str, int]:
        return {"submissions": self.submissions, "upload_bytes": self.upload_bytes,
                "readback_bytes": self.readback_bytes,
                **{f"readback_{k}_bytes": v for k, v in self.readback_by.items()}}


class HostPhases:
    """Named wall-clock intervals (ms), every sample kept (bounded)."""

    def __init__(self, keep: int = 4096):
        self.samples: dict[str, list[float]] = defaultdict(list)
        self.keep = keep

    @contextmanager
    def phase(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, (time.perf_counter() - t0) * 1e3)

    def add(self, name: str, ms: float) -> None:
        s = self.samples[name]
        s.append(ms)
        if len(s) > self.keep:
            del s[: len(s) - self.keep]


class GpuTimer:
    """Timestamps around named dispatches inside a pass; resolved after the submission."""

    def __init__(self, ctx: GpuContext, pool, capacity: int = 32):
        self.enabled = ctx.has_pass_timestamps
        self.capacity = capacity
        self._names: list[str] = []
        self.samples: dict[str, list[float]] = defaultdict(list)
        if self.enabled:
            dev = ctx.device
            self.query_set = dev.create_query_set(type=wgpu.QueryType.timestamp, count=capacity)
            self.resolve_buf = dev.create_buffer(
                size=capacity * 8, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC
            )
            self.read_buf = pool.acquire(wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST,
                                         capacity * 8, label="timestamps")

    def reset(self) -> None:
        self._names = []

    @contextmanager
    def call(self):
        """The block of one call's encoding and submission: where it fails, the spans it left go.
        Left behind, the next call would resolve their queries, which no submission wrote (on an
        H100 the call after a failed one hung: tests/test_pool.py)."""
        try:
            yield
        except BaseException:
            self.reset()
            raise

    @property
    def pending(self) -> tuple[str, ...]:
        """The spans encoded since the last collect (or reset, or detach)."""
        return tuple(self._names)

    def detach(self) -> list[str]:
        """The spans encoded since the last collect, taken out: the next span starts a new set
        (a command buffer encoded ahead of its turn times its own passes; :meth:`attach` puts
        a set back before the ``collect`` of the submission that holds it)."""
        names, self._names = self._names, []
        return names

    def attach(self, names: list[str]) -> None:
        self._names = list(names)

    @contextmanager
    def span(self, cpass, name: str, active: bool = True):
        """Write a timestamp before and after the dispatches encoded in the block."""
        if not (self.enabled and active) or len(self._names) * 2 + 2 > self.capacity:
            yield
            return
        from wgpu.backends.wgpu_native.extras import write_timestamp

        i = len(self._names) * 2
        self._names.append(name)
        write_timestamp(cpass, self.query_set, i)
        yield
        write_timestamp(cpass, self.query_set, i + 1)

    def resolve(self, encoder, into=None, offset: int = 0) -> int:
        """Encode the query resolve + copy (into the timer's own readback buffer, or ``into`` at
        ``offset``, a multiple of 8, for a caller that maps one buffer for everything it reads);
        returns bytes that will be read back."""
        n = len(self._names) * 2
        if not self.enabled or n == 0:
            return 0
        encoder.resolve_query_set(self.query_set, 0, n, self.resolve_buf, 0)
        if into is None:
            into, offset = self.read_buf, 0
        encoder.copy_buffer_to_buffer(self.resolve_buf, 0, into, offset, n * 8)
        return n * 8

    def collect(self, data=None) -> dict[str, float]:
        """After the submission completed: read the timestamps (or take ``data``, the bytes
        ``resolve(..., into=...)`` copied), record and return ms per name."""
        n = len(self._names) * 2
        if not self.enabled or n == 0:
            return {}
        if data is not None:
            ts = np.frombuffer(data, dtype=np.uint64, count=n)
        else:
            ts = read_ranges(self.read_buf, [(0, n * 8)])[0].view(np.uint64)
        out: dict[str, float] = defaultdict(float)
        for k, name in enumerate(self._names):
            start, end = int(ts[2 * k]), int(ts[2 * k + 1])
            out[name] += max(0, end - start) / 1e6
        for name, ms in out.items():
            s = self.samples[name]
            s.append(ms)
            if len(s) > 4096:
                del s[:-4096]
        self._names = []
        return dict(out)


def median_ms(samples: dict[str, list[float]]) -> dict[str, float]:
    return {k: float(np.median(v)) for k, v in samples.items() if v}
