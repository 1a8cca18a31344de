"""Small, dependency-free SVG plots for the run report: line plots (linear or log y) and
horizontal bar charts, as self-contained ``<svg>`` text that can sit inline in an HTML page; and
the viridis colour map the report's error image uses.

Every plot is first laid out as a :class:`Figure` (shapes plus :class:`Label` records that know
their own bounding boxes, estimated from the font size) and then serialised. Tick labels are
chosen so that their boxes do not overlap (render/ticks.py, which the GUI's plots share): linear
axes take the densest "nice" step whose labels fit, log axes decades (thinned when crowded) or,
where there is room, 1-2-5 or 1..9 multiples, and linear ticks inside a short range. All text is
XML-escaped.

No Qt, no matplotlib: numpy and the standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .svgfigure import (
    AXIS_COLOUR,
    GRID_COLOUR,
    LABEL_SIZE,
    PAD,
    TICK_SIZE,
    TITLE_SIZE,
    Figure,
    fit_text,
    num,
    text_width,
    xml_text,
)
from .ticks import (  # noqa: F401  (fmt_*, linear_ticks, nice_step: this module's tick API, as before)
    Axis,
    fmt_linear,
    fmt_log,
    fmt_sig,
    linear_ticks,
    nice_step,
    pick_linear_ticks,
    pick_log_ticks,
)


# ---------------------------------------------------------------------- shapes
def _decimate(px: np.ndarray, py: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Points to draw for a polyline sampled more densely than one per pixel column: per column,
    the first, lowest, highest and last point (keeps the envelope, drops the bulk)."""
    if len(px) <= 2 * max(1.0, float(px.max() - px.min())):
        return px, py
    col = np.floor(px).astype(np.int64)
    starts = np.flatnonzero(np.r_[True, col[1:] != col[:-1]])
    ends = np.r_[starts[1:], len(px)] - 1
    lo = np.minimum.reduceat(py, starts)
    hi = np.maximum.reduceat(py, starts)
    xs = np.repeat(col.astype(np.float64)[starts] + 0.5, 4)
    ys = np.stack([py[starts], lo, hi, py[ends]], axis=1).ravel()
    return xs, ys


def _polyline(px, py, colour: str, width: float = 1.8, dash: str = "") -> str:
    pts = " ".join(f"{num(x)},{num(y)}" for x, y in zip(px, py, strict=True))
    extra = f' stroke-dasharray="{xml_text(dash)}"' if dash else ""
    return (f'<polyline points="{pts}" fill="none" stroke="{xml_text(colour)}" stroke-width="{num(width)}" '
            f'stroke-linejoin="round" stroke-linecap="round"{extra}/>')


def _hline(x0, x1, y, colour, width=1.0) -> str:
    y = math.floor(y) + 0.5
    return (f'<line x1="{num(x0)}" y1="{num(y)}" x2="{num(x1)}" y2="{num(y)}" '
            f'stroke="{xml_text(colour)}" stroke-width="{num(width)}"/>')


def _vline(x, y0, y1, colour, width=1.0, dash="") -> str:
    x = math.floor(x) + 0.5
    extra = f' stroke-dasharray="{xml_text(dash)}"' if dash else ""
    return (f'<line x1="{num(x)}" y1="{num(y0)}" x2="{num(x)}" y2="{num(y1)}" stroke="{xml_text(colour)}" '
            f'stroke-width="{num(width)}"{extra}/>')


# ---------------------------------------------------------------------- plots
@dataclass
class Series:
    label: str
    x: np.ndarray
    y: np.ndarray
    colour: str = "#1f77b4"
    dash: str = ""


@dataclass
class Marker:
    """A vertical line at ``x`` (e.g. where a fit's coarse stage ends), listed in the legend."""

    x: float
    label: str
    colour: str = "#888"
    dash: str = "5 4"


def _legend_layout(fig: Figure, entries: list[tuple[str, str, str]], x0: float, x1: float, y: float) -> float:
    """Lay the legend out in rows from ``(x0, y)`` to at most ``x1``; returns the y below it."""
    swatch, row_h, size = 22.0, LABEL_SIZE * 1.5, LABEL_SIZE
    x = x0
    rows = 1 if entries else 0
    placed = []
    for text, colour, dash in entries:
        text = fit_text(text, size, x1 - x0 - swatch - 6)
        w = swatch + 6 + text_width(text, size)
        if x > x0 and x + w > x1:
            x, rows = x0, rows + 1
        placed.append((x, y + (rows - 1) * row_h, text, colour, dash))
        x += w + 18
    for lx, ly, text, colour, dash in placed:
        mid = ly + row_h / 2
        extra = f' stroke-dasharray="{xml_text(dash)}"' if dash else ""
        fig.add(f'<line x1="{num(lx)}" y1="{num(mid)}" x2="{num(lx + swatch)}" y2="{num(mid)}" '
                f'stroke="{xml_text(colour)}" stroke-width="2.5"{extra}/>')
        fig.label(text, lx + swatch + 6, mid + 0.35 * size, size=size, role="legend")
    return y + rows * row_h


def _frame(fig: Figure, title: str, legend: list[tuple[str, str, str]], width: int) -> float:
    """Title and legend at the top; returns the y where the plot area may start."""
    y = PAD + TITLE_SIZE
    fig.label(fit_text(title, TITLE_SIZE, width - 2 * PAD), PAD, y, size=TITLE_SIZE, role="title", bold=True)
    y += 0.25 * TITLE_SIZE + 4
    return _legend_layout(fig, legend, PAD, width - PAD, y) + 6


def _x_axis(lo: float, hi: float, left: float, width: int,
            integer: bool = False) -> tuple[Axis, list[tuple[float, str]]]:
    """The x axis from pixel ``left`` to as far right as its tick labels stay on the canvas."""
    right = width - PAD - 4.0
    for _ in range(4):
        axis = Axis(lo, hi, left, right)
        ticks = pick_linear_ticks(axis, horizontal=True, integer=integer)
        over = max((float(axis(v)) + text_width(s, TICK_SIZE) / 2 for v, s in ticks), default=0.0) - (width - 2)
        if over <= 0:
            break
        right = math.floor(right - over)
    return axis, ticks


def line_plot(series: list[Series], *, title: str, xlabel: str, ylabel: str, log_y: bool = False,
              markers: tuple[Marker, ...] = (), width: int = 760, height: int = 300,
              integer_x: bool = True) -> Figure:
    """A line plot of ``series`` (finite points only; positive ones on a log axis)."""
    fig = Figure(width, height, title)
    clean = []
    for s in series:
        x, y = np.asarray(s.x, np.float64), np.asarray(s.y, np.float64)
        ok = np.isfinite(x) & np.isfinite(y) & ((y > 0) if log_y else True)
        if ok.any():
            clean.append((s, x[ok], y[ok]))
    markers = tuple(m for m in markers if math.isfinite(m.x))
    legend = [(s.label, s.colour, s.dash) for s, _, _ in clean] + [(m.label, m.colour, m.dash) for m in markers]
    top = _frame(fig, title, legend, width)
    bottom = height - (PAD + LABEL_SIZE + 6 + TICK_SIZE + 10)
    if not clean or bottom - top < 30:
        fig.label("no data", width / 2, (top + height) / 2, size=LABEL_SIZE, anchor="middle", role="note")
        return fig

    xs = np.concatenate([x for _, x, _ in clean])
    ys = np.concatenate([np.log10(y) if log_y else y for _, _, y in clean])
    xlo, xhi = float(xs.min()), float(xs.max())
    if xhi <= xlo:
        xlo, xhi = xlo - 1, xhi + 1
    ylo, yhi = float(ys.min()), float(ys.max())
    pad = (yhi - ylo) * 0.05 or (0.05 if log_y else max(abs(ylo) * 0.05, 0.5))
    ylo, yhi = ylo - pad, yhi + pad

    yaxis = Axis(ylo, yhi, bottom, top, log=log_y)
    if log_y:
        yticks, minor = pick_log_ticks(yaxis)
    else:
        yticks, minor = pick_linear_ticks(yaxis, horizontal=False), []
    tick_w = max([text_width(s, TICK_SIZE) for _, s in yticks] or [0.0])
    left = math.ceil(PAD + LABEL_SIZE * 1.1 + 8 + tick_w + 7)
    xaxis, xticks = _x_axis(xlo, xhi, left, width, integer_x)
    right = xaxis.p1
    # grid, frame, ticks
    for v, _ in yticks:
        fig.add(_hline(left, right, float(yaxis(v)), GRID_COLOUR))
    for v, _ in xticks:
        fig.add(_vline(float(xaxis(v)), top, bottom, GRID_COLOUR))
    fig.add(f'<rect x="{num(left + 0.5)}" y="{num(top + 0.5)}" width="{num(right - left - 1)}" '
            f'height="{num(bottom - top - 1)}" fill="none" stroke="{AXIS_COLOUR}" shape-rendering="crispEdges"/>')
    for v in minor:
        fig.add(_hline(left - 3, left, float(yaxis(v)), AXIS_COLOUR))
    for v, s in yticks:
        py = float(yaxis(v))
        fig.add(_hline(left - 5, left, py, AXIS_COLOUR))
        fig.label(s, left - 7, py + 0.35 * TICK_SIZE, anchor="end", role="ytick")
    for v, s in xticks:
        px = float(xaxis(v))
        fig.add(_vline(px, bottom, bottom + 5, AXIS_COLOUR))
        fig.label(s, px, bottom + 8 + 0.8 * TICK_SIZE, anchor="middle", role="xtick")
    fig.label(fit_text(xlabel, LABEL_SIZE, right - left), (left + right) / 2, height - PAD - 0.25 * LABEL_SIZE,
              size=LABEL_SIZE, anchor="middle", role="xlabel")
    fig.label(fit_text(ylabel, LABEL_SIZE, bottom - top), PAD + 0.8 * LABEL_SIZE, (top + bottom) / 2,
              size=LABEL_SIZE, anchor="middle", rotate=-90, role="ylabel")

    for m in markers:
        if xlo <= m.x <= xhi:
            fig.add(_vline(float(xaxis(m.x)), top + 1, bottom - 1, m.colour, 1.2, m.dash))
    for s, x, y in clean:
        px, py = _decimate(xaxis(x), yaxis(y))
        if len(px) == 1:  # a lone point: a dot
            fig.add(f'<circle cx="{num(px[0])}" cy="{num(py[0])}" r="3" fill="{xml_text(s.colour)}"/>')
        else:
            fig.add(_polyline(px, py, s.colour, dash=s.dash))
    return fig


def bar_plot(items: list[tuple[str, float]], *, title: str, xlabel: str, colour: str = "#2ca02c",
             width: int = 760, row: int = 26, max_name: int = 34) -> Figure:
    """Horizontal bars, one row per ``(name, value)`` (values >= 0), with the value at each bar."""
    items = [(str(k), float(v)) for k, v in items if v is not None and math.isfinite(float(v))]
    names = [k if len(k) <= max_name else k[: max_name - 1] + "\u2026" for k, _ in items]
    fig = Figure(width, 0, title)
    top = _frame(fig, title, [], width)
    bottom = top + row * max(len(items), 1)
    fig.height = int(math.ceil(bottom + 8 + TICK_SIZE + 6 + LABEL_SIZE + PAD))
    if not items:
        fig.label("no data", width / 2, (top + bottom) / 2, size=LABEL_SIZE, anchor="middle", role="note")
        return fig
    vals = [max(0.0, v) for _, v in items]
    value_labels = [fmt_sig(v) for v in vals]
    left = math.ceil(PAD + max(text_width(s, TICK_SIZE) for s in names) + 10)
    vmax = max(max(vals), 1e-9)
    # leave room after the longest bar for its value label
    room = max(text_width(s, TICK_SIZE) for s in value_labels) + 8
    xaxis, xticks = _x_axis(0.0, vmax, left, width)
    right = xaxis.p1
    xhi = vmax * (right - left) / max(right - left - room, 1.0)
    xaxis, xticks = _x_axis(0.0, xhi, left, width)
    right = xaxis.p1
    for v, _ in xticks:
        fig.add(_vline(float(xaxis(v)), top, bottom, GRID_COLOUR))
    for i, ((name, _), short, v, vs) in enumerate(zip(items, names, vals, value_labels, strict=True)):
        y0 = top + i * row + row * 0.18
        h = row * 0.64
        x1 = float(xaxis(v))
        fig.add(f'<rect x="{num(left)}" y="{num(y0)}" width="{num(max(x1 - left, 0.0))}" height="{num(h)}" '
                f'fill="{xml_text(colour)}" stroke="#333" stroke-width="0.6"><title>{xml_text(name, quote=False)}: '
                f'{xml_text(vs, quote=False)} {xml_text(xlabel, quote=False)}</title></rect>')
        mid = y0 + h / 2 + 0.35 * TICK_SIZE
        fig.label(short, left - 6, mid, anchor="end", role="ytick")
        if x1 + 4 + text_width(vs, TICK_SIZE) <= width - 2:
            fig.label(vs, x1 + 4, mid, role="value")
        else:  # no room after the bar: inside its end
            fig.label(vs, x1 - 4, mid, anchor="end", role="value", fill="#fff")
    fig.add(_vline(left, top, bottom, AXIS_COLOUR))
    fig.add(_hline(left, right, bottom, AXIS_COLOUR))
    for v, s in xticks:
        px = float(xaxis(v))
        fig.add(_vline(px, bottom, bottom + 5, AXIS_COLOUR))
        fig.label(s, px, bottom + 8 + 0.8 * TICK_SIZE, anchor="middle", role="xtick")
    fig.label(fit_text(xlabel, LABEL_SIZE, right - left), (left + right) / 2,
              bottom + 8 + TICK_SIZE + 6 + LABEL_SIZE, size=LABEL_SIZE, anchor="middle", role="xlabel")
    return fig
