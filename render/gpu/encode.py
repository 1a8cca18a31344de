"""Encoding the fit loop's iterations: how a chunk is split into submissions, and untimed
iterations encoded from a pre-resolved dispatch list (render/gpu/fitloop.py uses these)."""

from __future__ import annotations

import numpy as np


def submission_sizes(k: int, first: int, growth: float = 2.0) -> list[int]:
    """Iterations per submission of a k-iteration chunk: ``first``, then ``growth`` (at least 2)
    times as many each time (the last part takes the rest), or all k at once when ``first`` is 0
    or the chunk is short.

    Why: the GPU idles until a submission arrives, and encoding an iteration costs the host a
    share of what running it costs the GPU at small sizes; so the next part is ready before the
    GPU runs out of work (one submission a chunk left the GPU waiting for all of it, two parts
    for the rest). A part can be ``growth`` times the one the GPU is running where the GPU takes
    ``growth`` times as long as the host for an iteration (the fit loop measures both): a big
    problem's chunk then goes in fewer submissions, each of which costs the host as much as
    encoding a few iterations."""
    if first <= 0 or 2 * first >= k:
        return [k]
    growth = max(2.0, growth)
    sizes, left = [first], k - first
    while left > 0:
        size = int(sizes[-1] * growth)
        take = size if left > 1.5 * size else left  # (no short tail part)
        sizes.append(take)
        left -= take
    return sizes


#: encode untimed iterations through wgpu-native's C entry points where available (:class:`Repeats`)
NATIVE = True


class Repeats:
    """Untimed iterations encoded from one iteration's pre-resolved dispatch list.

    Through wgpu-py's public methods each dispatch is three calls that each capture and release
    wgpu-py's error slot and (set_bind_group) allocate an offsets array -- in a long fit most of
    the encoding's host CPU (docs/PERFORMANCE.md). The same three C entry points of wgpu-native are
    called directly when this wgpu-py exposes them (the version is pinned in pyproject.toml):
    compute-pass commands report their errors at the pass's ``end`` and the encoder's ``finish``,
    which still go through wgpu-py, so no error goes unseen. The two ways encode the same commands
    (tests/test_fitter.py checks the bytes of a fit both ways); ``native=False`` is the public API's."""

    def __init__(self, dispatches: list[tuple], native: bool | None = None):
        self.dispatches = dispatches
        self._c = _native_entry_points() if (NATIVE if native is None else native) else None
        if self._c is not None:
            try:
                self._calls = [(pl._internal, bg._internal, *(tuple(groups) + (1, 1))[:3])
                               for pl, bg, groups in dispatches]
            except AttributeError:
                self._c = None

    @property
    def native(self) -> bool:
        return self._c is not None

    def encode(self, cpass, n: int) -> None:
        """``n`` iterations into the compute pass ``cpass``."""
        handle = getattr(cpass, "_internal", None) if self._c is not None else None
        if handle is None:
            for _ in range(n):
                for pl, bg, groups in self.dispatches:
                    cpass.set_pipeline(pl)
                    cpass.set_bind_group(0, bg)
                    cpass.dispatch_workgroups(*groups)
            return
        set_pipeline, set_bind_group, dispatch, null = self._c
        calls = self._calls
        for _ in range(n):
            for pl, bg, x, y, z in calls:
                set_pipeline(handle, pl)
                set_bind_group(handle, 0, bg, 0, null)
                dispatch(handle, x, y, z)


def _native_entry_points():
    """wgpu-native's SetPipeline, SetBindGroup and DispatchWorkgroups for compute passes (and cffi's
    NULL), or None where this wgpu-py has another layout."""
    try:
        from wgpu.backends.wgpu_native._ffi import ffi, lib

        return (lib.wgpuComputePassEncoderSetPipeline, lib.wgpuComputePassEncoderSetBindGroup,
                lib.wgpuComputePassEncoderDispatchWorkgroups, ffi.NULL)
    except (ImportError, AttributeError):
        return None


def per_image(a, B: int, n: int) -> np.ndarray:
    """``a`` as (B, n): one image's (n,) vector (B = 1) or a stack."""
    a = np.asarray(a)
    if a.size != B * n:
        raise ValueError(f"expected {B} x {n} parameters, got shape {a.shape}")
    return a.reshape(B, n)


class Recorder:
    """Stands in for a compute pass to capture what one iteration dispatches."""

    def __init__(self):
        self.calls: list[tuple] = []
        self._pl = self._bg = None

    def set_pipeline(self, pl):
        self._pl = pl

    def set_bind_group(self, index, bg):
        self._bg = bg

    def dispatch_workgroups(self, *groups):
        self.calls.append((self._pl, self._bg, groups))
