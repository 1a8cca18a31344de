"""Axis ticks whose labels keep apart: nice linear steps, and log axes labelled by decades (thinned
when crowded) or by 2/5 and 1..9 multiples when the range is short. Shared by the report's SVG plots
(render/svgplot.py) and the GUI's live plots (app/axes.py), so both label an axis alike.

An axis is a data interval mapped onto a pixel interval (:class:`Axis`); a picker is given the
label's font size in pixels and returns the densest ticks whose labels do not touch: a label is
``size`` tall on a vertical axis and as wide as its text (estimated from the font size) on a
horizontal one. Pure Python and numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .svgfigure import SUPERSCRIPT, TICK_SIZE, text_width


# ---------------------------------------------------------------------- numbers
def _decimals(step: float) -> int:
    for d in range(0, 10):
        if abs(round(step, d) - step) <= abs(step) * 1e-6:
            return d
    return 10


def fmt_linear(v: float, step: float, big: float | None = None) -> str:
    """Tick label for ``v`` on a linear axis with tick spacing ``step``; ``big`` (the largest
    magnitude on the axis, default ``v``'s) picks one style for the whole axis."""
    if abs(v) < abs(step) * 1e-9:
        v = 0.0
    big = max(abs(v) if big is None else big, abs(step))
    d = _decimals(step)
    if v == 0:
        return "0"
    if d == 0 and big >= 1e5 and step % 1000 == 0:
        if big >= 1e6 and step % 100000 == 0:
            return f"{v / 1e6:g}M"
        return f"{v / 1e3:g}k"
    if big < 1e7 and d <= 4:
        return f"{v:,.{d}f}"
    return fmt_sig(v)


def fmt_sig(v: float, digits: int = 3) -> str:
    """``v`` with ``digits`` significant digits; scientific as ``m×10ᵏ`` when very large/small."""
    if v == 0 or not math.isfinite(v):
        return "0" if v == 0 else str(v)
    k = math.floor(math.log10(abs(v)))
    if -4 <= k < 6:
        return f"{v:.{max(0, digits - 1 - k)}f}".rstrip("0").rstrip(".") if k < digits - 1 else f"{v:,.0f}"
    m = f"{v / 10 ** k:.{digits - 1}f}".rstrip("0").rstrip(".")
    return f"{m}\u00d7" + "10" + str(k).translate(SUPERSCRIPT)


def fmt_log(mantissa: int, k: int, powers: bool = False) -> str:
    """Label for ``mantissa × 10**k`` on a log axis: plain decimals near 1 (unless ``powers``),
    powers of ten otherwise."""
    if not powers and -3 <= k <= 3:
        v = mantissa * 10.0 ** k
        return f"{v:.{max(0, -k)}f}" if k < 0 else f"{int(round(v)):,}"
    return ("" if mantissa == 1 else f"{mantissa}\u00d7") + "10" + str(k).translate(SUPERSCRIPT)


def _linear_labels(ticks: list[float], step: float) -> list[str]:
    """Labels for evenly spaced ticks, one style for the axis, never two alike (a range far
    narrower than its values, e.g. a flat loss on a log axis, needs more significant digits)."""
    big = max(abs(t) for t in ticks) if ticks else None
    labels = [fmt_linear(t, step, big) for t in ticks]
    digits = 4
    while len(set(labels)) < len(labels) and digits <= 15:
        labels = [fmt_sig(t, digits) for t in ticks]
        digits += 1
    return labels


# ---------------------------------------------------------------------- steps
def nice_step(span: float, count: int, integer: bool = False) -> float:
    """A 1/2/2.5/5 × 10ᵏ step (2.5 left out below 10 for ``integer``) giving about ``count``
    intervals over ``span``."""
    raw = span / max(count, 1)
    if integer:
        raw = max(raw, 1.0)
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    mag = 10.0 ** math.floor(math.log10(raw))
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        if integer and m == 2.5 and mag < 10:
            continue
        if m * mag >= raw * (1 - 1e-9):
            return m * mag
    return 10.0 * mag


def linear_ticks(lo: float, hi: float, count: int, integer: bool = False) -> tuple[list[float], float]:
    step = nice_step(hi - lo, count, integer)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    v = first
    while v <= hi + step * 1e-9 and len(ticks) < 1000:
        ticks.append(0.0 if abs(v) < step * 1e-9 else v)
        v = first + len(ticks) * step
    return ticks, step


@dataclass
class Axis:
    """A data interval mapped onto a pixel interval (``log``: the data are log10-transformed)."""

    lo: float
    hi: float
    p0: float
    p1: float
    log: bool = False

    def __call__(self, v):
        v = np.log10(v) if self.log else np.asarray(v, dtype=np.float64)
        return self.p0 + (v - self.lo) * (self.p1 - self.p0) / (self.hi - self.lo)


def _fits(positions: list[float], sizes: list[float], gap: float) -> bool:
    """Whether labels centred at ``positions`` with extents ``sizes`` keep ``gap`` apart."""
    order = sorted(range(len(positions)), key=positions.__getitem__)
    for a, b in zip(order, order[1:]):
        if abs(positions[b] - positions[a]) < (sizes[a] + sizes[b]) / 2 + gap:
            return False
    return True


def label_gap(horizontal: bool, size: float) -> float:
    """The least space between two tick labels (pixels)."""
    return 10.0 if horizontal else 0.6 * size


# ---------------------------------------------------------------------- pickers
def pick_linear_ticks(axis: Axis, horizontal: bool, integer: bool = False,
                      size: float = TICK_SIZE) -> list[tuple[float, str]]:
    """The densest nice ticks of an axis whose labels keep apart, at the usual density or, when
    that leaves a single label, denser (evenly spaced values; on a log axis they are placed
    logarithmically)."""
    length = abs(axis.p1 - axis.p0)
    lo, hi = (10.0 ** axis.lo, 10.0 ** axis.hi) if axis.log else (axis.lo, axis.hi)
    gap = label_gap(horizontal, size)
    usual = max(2, int(length // (55 if horizontal else 35)))
    densest = max(usual, int(length // (size + gap)) + 1)  # no more labels than that can fit
    lone: list[tuple[float, str]] = []
    first: list[tuple[float, str]] = []
    for count in [*range(usual, 0, -1), *range(usual + 1, densest + 1)]:
        ticks, step = linear_ticks(lo, hi, count, integer)
        if axis.log:
            ticks = [t for t in ticks if t > 0]  # a step wider than the range may round down to 0
        labels = _linear_labels(ticks, step)
        pos = [float(axis(t)) for t in ticks]
        ext = [text_width(s, size) if horizontal else size for s in labels]
        candidate = list(zip(ticks, labels, strict=True))
        first = first or candidate
        if _fits(pos, ext, gap):
            if len(candidate) >= 2:
                return candidate
            lone = lone or candidate
    return lone or first[:1]


def pick_log_ticks(axis: Axis, size: float = TICK_SIZE) -> tuple[list[tuple[float, str]], list[float]]:
    """Labelled ticks and unlabelled minor ticks of a vertical log axis (``size``: the label
    height in pixels).

    The candidates are decades, then 1-2-5 multiples, then every multiple: the densest of them
    that fits at the usual label density (about one per 35 px) is taken, so a tall axis over a
    short range reads 0.01, 0.02, 0.05, ... Where even decades crowd, their labels are thinned
    (keeping a regular stride), so the axis shows every second or third decade; with less than
    one 1..9 spacing inside, or where that leaves a lone label, linear ticks.
    """
    lo, hi = axis.lo, axis.hi
    length = abs(axis.p1 - axis.p0)
    k0, k1 = math.floor(lo) - 1, math.ceil(hi) + 1
    cands: list[tuple[float, tuple[int, int], int]] = []  # value, (m, k), 0 decade / 1 2 or 5 / 2 other
    for k in range(k0, k1 + 1):
        for m in range(1, 10):
            v = m * 10.0 ** k
            if lo - 1e-9 <= math.log10(v) <= hi + 1e-9:
                cands.append((v, (m, k), 0 if m == 1 else 1 if m in (2, 5) else 2))
    levels = []  # (level, labelled ticks) of each level with two ticks or more, sparsest first
    for level in (0, 1, 2):
        picked = [(v, mk) for v, mk, p in cands if p <= level]
        if len(picked) >= 2:
            powers = any(abs(k) > 3 for _, (_, k) in picked)  # one style for the whole axis
            levels.append((level, [(v, fmt_log(m, k, powers)) for v, (m, k) in picked]))
    if not levels:  # less than one 1..9 spacing inside: evenly spaced values
        return pick_linear_ticks(axis, horizontal=False, size=size), []
    gap = label_gap(False, size)
    room = length / 4  # at most one minor tick per 4 px

    def fits(ticks) -> bool:
        return _fits([float(axis(v)) for v, _ in ticks], [size] * len(ticks), gap)

    def minor_of(ticks, decades_only: bool) -> list[float]:
        labelled = {v for v, _ in ticks}
        minor = [(v, p) for v, _, p in cands if v not in labelled and (not decades_only or p == 0)]
        if len(minor) > room:
            minor = [(v, p) for v, p in minor if p == 0]
        return [v for v, _ in minor] if len(minor) <= room else []

    usual = max(2, int(length // 35)) + 1
    for _, chosen in reversed(levels[1:]):  # denser than decades where they fit at the usual density
        if len(chosen) <= usual and fits(chosen):
            return chosen, minor_of(chosen, False)
    chosen = levels[0][1]
    for stride in range(1, len(chosen) + 1):
        for offset in range(stride):
            thinned = chosen[offset::stride]
            if fits(thinned):
                if len(thinned) < 2:  # two multiples too close together: evenly spaced values may give two
                    linear = pick_linear_ticks(axis, horizontal=False, size=size)
                    if len(linear) >= 2:
                        return linear, []
                return thinned, minor_of(thinned, stride > 1)
    return chosen[:1], []
