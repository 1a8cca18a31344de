"""A pyqtgraph axis whose log-scale tick labels never overlap.

pyqtgraph labels a short log range at every 1..9 multiple and a long one at every decade, however
few pixels the plot has, so a small plot's loss axis showed labels printed over each other. In log
mode this axis asks trifit.ticks -- the picker the report's SVG plots use -- for labels that keep
apart at the axis's pixel length and font height (decades thinned when crowded, 1-2-5 multiples
where there is room); the other candidates become unlabelled minor ticks. Linear mode is
pyqtgraph's own.
"""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6 import QtGui

from trifit.ticks import Axis, pick_log_ticks


class LogTickAxis(pg.AxisItem):
    """A left or right axis; see the module docstring. ``labels`` maps each labelled tick (log10
    of the value, rounded) to its text, from the latest :meth:`tickValues`."""

    def __init__(self, orientation: str = "left", **kw):
        super().__init__(orientation, **kw)
        self.labels: dict[float, str] = {}

    def label_height(self) -> float:
        """The tick labels' text height in pixels (the font pyqtgraph draws them with)."""
        font = self.style.get("tickFont") or self.font()
        return QtGui.QFontMetricsF(font).height()

    def tickValues(self, minVal, maxVal, size):  # noqa: N802 - pyqtgraph override
        if not self.logMode or not (math.isfinite(minVal) and math.isfinite(maxVal)) or minVal == maxVal:
            return super().tickValues(minVal, maxVal, size)
        lo, hi = sorted((float(minVal), float(maxVal)))
        labelled, minor = pick_log_ticks(Axis(lo, hi, float(size), 0.0, log=True), size=self.label_height())
        self.labels = {_key(math.log10(v)): text for v, text in labelled}
        return [(None, [math.log10(v) for v, _ in labelled]), (None, [math.log10(v) for v in minor])]

    def tickStrings(self, values, scale, spacing):  # noqa: N802 - pyqtgraph override
        if not self.logMode:
            return super().tickStrings(values, scale, spacing)
        strings = [self.labels.get(_key(v)) for v in values]
        if all(s is None for s in strings):
            return []  # the minor ticks: no labels
        return [s or "" for s in strings]


def _key(log_value: float) -> float:
    return round(float(log_value), 9)
