"""Encoding the fit loop's iterations: how a chunk is split into submissions, and untimed
iterations encoded from a pre-resolved dispatch list (render/gpu/fitloop.py uses these)."""

from __future__ import annotations

import numpy as np


def submission_sizes(k: int, first: int) -> list[int]:
    """Iterations per submission of a k-iteration chunk: ``first``, then twice as many each time
    (the last part takes the rest), or all k at once when ``first`` is 0 or the chunk is short.

    Why: the GPU idles until a submission arrives. Encoding an iteration costs the host about a
    third of what running it costs an H200 (30 vs 80-100 us at 176 px, 150 triangles), so the
    next part, twice as long as the one running, is ready before the GPU runs out of work. A
    chunk in two parts (8 iterations, then the rest) left the GPU waiting ~2 ms for the rest."""
    if first <= 0 or 2 * first >= k:
        return [k]
    sizes, left, size = [first], k - first, 2 * first
    while left > 0:
        take = size if left > 1.5 * size else left  # (no short tail part)
        sizes.append(take)
        left -= take
        size *= 2
    return sizes


def encode_repeats(cpass, dispatches: list[tuple], n: int) -> None:
    """``n`` untimed iterations from the pre-resolved dispatch list: three wgpu calls a dispatch."""
    for _ in range(n):
        for pl, bg, groups in dispatches:
            cpass.set_pipeline(pl)
            cpass.set_bind_group(0, bg)
            cpass.dispatch_workgroups(*groups)


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
