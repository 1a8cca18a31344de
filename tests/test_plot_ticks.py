"""Log-axis tick labels never overlap: the report's SVG plots (trifit.ticks through trifit.svgplot)
for ranges of a tenth of a decade to many decades at any plot height, and the GUI's pyqtgraph
plots (app/axes.py) at a small plot height; the GPU-time legend is readable and off the curves."""

from __future__ import annotations

import itertools
import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from trifit import svgfigure, svgplot
from trifit.svgfigure import TICK_SIZE, boxes_overlap, text_box
from trifit.ticks import Axis, fmt_log, pick_log_ticks

SVG_NS = "{http://www.w3.org/2000/svg}"
SPANS = {"1 decade": 1.0, "0.3 decade": 0.3, "8 decades": 8.0}
FLAT = 0.002  # decades: a loss that hardly moves
STARTS = (-9.3, -4.0, -2.6, -0.45, 1.2)   # log10 of the axis's low end: powers, decimals, integers
HEIGHTS = (30, 45, 60, 90, 140, 220, 400)  # pixels


def _label_boxes(ticks, axis: Axis, size: float = TICK_SIZE):
    """Boxes of a vertical axis's labels as svgplot draws them (right-aligned, centred on the tick)."""
    return [text_box(s, 0.0, float(axis(v)) + 0.35 * size, size, anchor="end") for v, s in ticks]


def _overlapping(boxes) -> list[tuple[int, int]]:
    return [(i, j) for (i, a), (j, b) in itertools.combinations(enumerate(boxes), 2) if boxes_overlap(a, b)]


# ---------------------------------------------------------------------- the report's SVG plots
@pytest.mark.parametrize("span", [*SPANS.values(), FLAT], ids=[*SPANS, "flat"])
def test_log_tick_labels_keep_apart_at_any_height(span):
    for lo, height in itertools.product(STARTS, HEIGHTS):
        axis = Axis(lo, lo + span, float(height), 0.0, log=True)
        ticks, minor = pick_log_ticks(axis)
        labels = [s for _, s in ticks]
        where = f"{span} decades from 10^{lo} over {height} px: {labels}"
        assert ticks, where
        assert not _overlapping(_label_boxes(ticks, axis)), where
        assert len(set(labels)) == len(labels), where  # never two alike (a narrow range gets more digits)
        values = [v for v, _ in ticks]
        assert values == sorted(values) and all(10 ** lo * 0.999 <= v <= 10 ** (lo + span) * 1.001 for v in values)
        assert not set(minor) & set(values)
        if height >= 90:
            assert len(ticks) >= 2, where  # a readable scale wherever two labels fit


def test_crowded_decades_are_thinned_and_roomy_ranges_get_1_2_5():
    eight = Axis(-9.0, -1.0, 60.0, 0.0, log=True)
    ticks, _ = pick_log_ticks(eight)
    assert 2 <= len(ticks) < 9 and all(s.startswith("10") for _, s in ticks)  # every other decade or so
    strides = np.diff([math.log10(v) for v, _ in ticks])
    assert np.allclose(strides, strides[0])  # a regular stride
    one = Axis(-3.0, -2.0, 300.0, 0.0, log=True)
    assert [s for _, s in pick_log_ticks(one)[0]] == ["0.001", "0.002", "0.005", "0.01"]
    assert [s for _, s in pick_log_ticks(Axis(-3.0, -2.0, 60.0, 0.0, log=True))[0]] == ["0.001", "0.01"]


def test_the_overlap_check_can_fail():
    # every 1..9 multiple of a decade labelled in 60 px: what the picker must avoid
    axis = Axis(-3.0, -2.0, 60.0, 0.0, log=True)
    naive = [(m * 1e-3, fmt_log(m, -3)) for m in range(1, 10)]
    assert _overlapping(_label_boxes(naive, axis))


@pytest.mark.parametrize("span", list(SPANS.values()), ids=list(SPANS))
@pytest.mark.parametrize("height", [150, 220, 300])
def test_report_plot_labels_keep_apart(span, height):
    its = np.arange(0, 2001)
    losses = 10.0 ** (-1.5 - span * (1 - np.exp(-its / 400.0)) / (1 - math.exp(-5)))
    fig = svgplot.line_plot([svgplot.Series("mse loss", its, losses)], title="loss", xlabel="iteration",
                            ylabel="mse", log_y=True, width=420, height=height)
    root = ET.fromstring(fig.svg())
    boxes = []
    for el in root.iter(f"{SVG_NS}text"):
        rot = el.get("transform", "")
        boxes.append(svgfigure.text_box(el.text or "", float(el.get("x")), float(el.get("y")),
                                        float(el.get("font-size")), el.get("text-anchor", "start"),
                                        -90.0 if rot.startswith("rotate(-90") else 0.0))
    assert not _overlapping(boxes)
    yticks = [lab for lab in fig.labels if lab.role == "ytick"]
    assert len(yticks) >= 2, [lab.text for lab in yticks]


# ---------------------------------------------------------------------- the GUI's pyqtgraph plots
@pytest.fixture
def panel(qapp):
    pytest.importorskip("pyqtgraph")
    import trifit.app  # noqa: F401  (installs the PySide6 refcount guard first)
    from trifit.app.plots import PlotsPanel

    p = PlotsPanel()
    yield p
    p.close()
    p.deleteLater()


def _level_spacing_px(values: list[float], lo: float, hi: float, size: float) -> float:
    pos = sorted((v - lo) / (hi - lo) * size for v in values)
    return min(np.diff(pos)) if len(pos) > 1 else math.inf


@pytest.mark.gui
@pytest.mark.parametrize("span", list(SPANS.values()), ids=list(SPANS))
def test_gui_log_axes_thin_their_labels_by_pixel_spacing(panel, span):
    import pyqtgraph as pg

    from trifit.app.axes import LogTickAxis

    for plot in (panel.loss_plot, panel.gpu_plot):
        axis = plot.getAxis("left")
        assert isinstance(axis, LogTickAxis) and axis.logMode
        height = axis.label_height()
        assert 6 <= height <= 40
        for lo, size in itertools.product((-3.2, -0.4, 1.3), (48.0, 70.0, 110.0)):
            hi = lo + span
            levels = axis.tickValues(lo, hi, size)
            labelled = levels[0][1]
            strings = axis.tickStrings(labelled, 1.0, levels[0][0])
            where = f"{span} decades from 10^{lo} in {size} px: {strings}"
            assert labelled and all(strings) and len(set(strings)) == len(strings), where
            assert _level_spacing_px(labelled, lo, hi, size) >= 1.6 * height - 1e-6, where  # a label and a gap
            for spacing, minor in levels[1:]:
                assert axis.tickStrings(minor, 1.0, spacing) == [], where  # minor ticks go unlabelled

    # pyqtgraph's own axis labels every multiple in a short range, however small the plot
    stock = pg.AxisItem("left")
    stock.setLogMode(False, True)
    levels = stock.tickValues(-3.2, -3.2 + 1.0, 48.0)
    crowded = max(len(values) for _, values in levels)
    assert crowded * 1.6 * height > 48.0  # the same check fails there


@pytest.mark.gui
def test_gui_log_axis_draws_labels_that_do_not_overlap(panel, qtbot):
    from PySide6 import QtGui

    panel.resize(320, 560)  # the stats take the rest: the plots are about 100 px tall
    panel.show()
    qtbot.waitExposed(panel)
    its = np.arange(1, 3001)
    for span in SPANS.values():
        panel.clear()
        panel.losses.extend(its, 10.0 ** (-1.2 - span * its / its[-1]))
        panel._dirty = True
        panel._redraw()
        panel.loss_plot.enableAutoRange()
        qtbot.wait(50)
        axis = panel.loss_plot.getAxis("left")
        assert 40 < axis.height() < 130  # a small plot
        image = QtGui.QImage(64, 64, QtGui.QImage.Format.Format_ARGB32)
        painter = QtGui.QPainter(image)
        try:
            _, _, texts = axis.generateDrawSpecs(painter)
        finally:
            painter.end()
        rects = [rect for rect, _, text in texts if text]
        assert len(rects) >= 1, span
        assert not [(a, b) for a, b in itertools.combinations(rects, 2) if a.intersects(b)], \
            (span, [text for _, _, text in texts])


@pytest.mark.gui
def test_gpu_time_legend_is_readable_and_off_the_curves(panel, qtbot):
    import pyqtgraph as pg
    from PySide6 import QtCore, QtGui

    from trifit.app.plots import short_name

    panel.resize(360, 520)
    panel.tabs.setCurrentIndex(1)
    panel.show()
    qtbot.waitExposed(panel)
    names = ["bin", "forward", "backward", "reduce+adam", "a pass with a long name"]
    for it in range(1, 40):
        panel.add_timings(it * 10, {"gpu_ms": {n: 0.05 * 3 ** k + 0.01 * it for k, n in enumerate(names)}})
    panel._redraw()
    qtbot.wait(50)

    legend = panel.gpu_legend
    assert isinstance(legend, pg.LegendItem)
    shown = [label.text for _, label in legend.items]
    assert shown == [short_name(n) for n in names]
    assert shown[:4] == names[:4] and len(shown[4]) <= 12 and shown[4].endswith("\u2026")
    # its own background, opaque enough to read, and text that stands out from it
    brush = legend.brush()
    assert brush.style() != QtCore.Qt.BrushStyle.NoBrush and brush.color().alpha() >= 200
    text = pg.mkColor(legend.labelTextColor())

    def luminance(c: QtGui.QColor) -> float:
        lin = [(v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4) for v in (c.redF(), c.greenF(), c.blueF())]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    hi, lo = sorted((luminance(text), luminance(brush.color())), reverse=True)
    assert (hi + 0.05) / (lo + 0.05) >= 7.0  # WCAG AAA contrast
    # the curves are drawn in the view box; the legend sits outside it
    view = panel.gpu_plot.getViewBox()
    assert legend.parentItem() is not view
    legend_rect, view_rect = legend.sceneBoundingRect(), view.sceneBoundingRect()
    assert legend_rect.height() > 0 and view_rect.height() > 40
    assert not legend_rect.intersects(view_rect)
    assert view_rect.top() >= legend_rect.bottom()
    # each curve's colour is its own
    colours = {panel.gpu_curves[n].opts["pen"].color().name() for n in names}
    assert len(colours) == len(names)
