"""Focus painting (issue 20): a brush and an eraser paint an importance mask over the target, and
the mask becomes the fit's per-pixel loss weights (trifit.focus, ``Fitter.set_weights``).

The mask is what the user painted, in [0, 1] at the fit's working size (0: not painted). The
weights are the policy: painted pixels count up to ``1``, unpainted ones ``FOCUS_FLOOR`` -- so
painting a face makes the fit spend its triangles there without giving up the rest -- and an
empty mask is no focus map at all (every pixel alike, the unweighted kernels).
"""

from __future__ import annotations

import numpy as np

#: the weight of a pixel nobody painted, once anything is painted
FOCUS_FLOOR = 0.2
#: a stroke's dabs are this fraction of the brush radius apart (no gaps on a fast drag)
DAB_SPACING = 0.35


def weights_from_mask(mask: np.ndarray | None) -> np.ndarray | None:
    """The loss weights for a painted mask: ``FOCUS_FLOOR + (1 - FOCUS_FLOOR) * mask``, or None
    when nothing is painted."""
    if mask is None or not np.any(mask > 0):
        return None
    return FOCUS_FLOOR + (1.0 - FOCUS_FLOOR) * np.clip(np.asarray(mask, dtype=np.float64), 0.0, 1.0)


class FocusMask:
    """The painted mask of a ``width`` x ``height`` frame and the brush that paints it."""

    def __init__(self, width: int, height: int, mask: np.ndarray | None = None):
        self.width, self.height = int(width), int(height)
        self.mask = np.zeros((self.height, self.width), np.float32)
        if mask is not None:
            m = np.asarray(mask, np.float32)
            if m.shape != self.mask.shape:
                raise ValueError(f"a focus mask of shape {m.shape} for a {self.width}x{self.height} frame")
            self.mask[:] = np.clip(m, 0.0, 1.0)
        jj, ii = np.mgrid[0:self.height, 0:self.width]
        self._centres = (ii + 0.5, jj + 0.5)
        self._last: tuple[float, float] | None = None

    @property
    def empty(self) -> bool:
        return not np.any(self.mask > 0)

    def clear(self) -> None:
        self.mask[:] = 0.0

    def dab(self, u: float, v: float, radius_px: float, strength: float, erase: bool = False) -> None:
        """One dab at frame point (u, v): within ``radius_px`` working pixels, full strength in the
        inner half and falling off linearly to the edge. The brush raises the mask to ``strength``
        there (painting over a stroke again does not pile up), the eraser lowers it to ``1 -
        strength`` (strength 1 clears it)."""
        r = max(float(radius_px), 0.5)
        cx, cy = u * self.width, v * self.height
        x0, x1 = max(int(cx - r - 1), 0), min(int(cx + r + 2), self.width)
        y0, y1 = max(int(cy - r - 1), 0), min(int(cy + r + 2), self.height)
        if x0 >= x1 or y0 >= y1:
            return
        px, py = self._centres[0][y0:y1, x0:x1], self._centres[1][y0:y1, x0:x1]
        dist = np.hypot(px - cx, py - cy)
        amount = float(np.clip(strength, 0.0, 1.0)) * np.clip((r - dist) / (0.5 * r), 0.0, 1.0)
        block = self.mask[y0:y1, x0:x1]
        block[:] = np.minimum(block, 1.0 - amount) if erase else np.maximum(block, amount)

    def begin_stroke(self, u: float, v: float, radius_px: float, strength: float, erase: bool = False) -> None:
        self._last = (u, v)
        self.dab(u, v, radius_px, strength, erase)

    def stroke_to(self, u: float, v: float, radius_px: float, strength: float, erase: bool = False) -> None:
        """Dabs from the stroke's last point to (u, v), ``DAB_SPACING`` radii apart."""
        if self._last is None:
            self.begin_stroke(u, v, radius_px, strength, erase)
            return
        lu, lv = self._last
        span = np.hypot((u - lu) * self.width, (v - lv) * self.height)
        steps = max(1, int(np.ceil(span / max(DAB_SPACING * radius_px, 0.5))))
        for k in range(1, steps + 1):
            t = k / steps
            self.dab(lu + t * (u - lu), lv + t * (v - lv), radius_px, strength, erase)
        self._last = (u, v)
