"""Live plots (pyqtgraph): loss and PSNR per iteration, GPU ms per pass, iterations/s, and a
small stats panel (submissions, buffer-pool hits/misses, bytes moved).

Progress arrives ~15 times a second; curves are redrawn at most ``REDRAW_HZ`` times a second
from growable numpy arrays, with downsampling and clip-to-view so a 100k-iteration history
stays cheap to draw. Quality (loss, PSNR) and speed (GPU ms per pass, iterations/s) sit in two
tabs, so only the two plots on show are painted. The GPU-time axis and (unless unticked) the loss
axis are logarithmic, their labels thinned to the plot's height (app/axes.py); the GPU passes'
legend sits above its plot.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from .axes import LogTickAxis

MAX_MARKS = 200  # growth / pruning markers kept on the plots (a long fit has ~100)
REDRAW_HZ = 4  # the plots are painted in software, and a repaint is slow on a small CPU-only machine
MIN_GPU_MS = 1e-4  # the GPU-time plot's floor (its axis is logarithmic)
LEGEND_COLUMNS = 2  # the GPU passes' legend: two rows for the usual four passes (fits a narrow dock)
#: the GPU passes' curve colours (Okabe-Ito: told apart with the common colour-vision deficiencies)
PASS_COLOURS = ("#e69f00", "#56b4e9", "#009e73", "#f0e442", "#cc79a7", "#d55e00", "#0072b2", "#bbbbbb")
LEGEND_NAME_CHARS = 12  # longer pass names are cut (with an ellipsis): the legend's columns stay narrow


def short_name(name: str) -> str:
    """A pass's name as the legend shows it."""
    return name if len(name) <= LEGEND_NAME_CHARS else name[: LEGEND_NAME_CHARS - 1] + "\u2026"


class Series:
    """An append-only (x, y) series backed by arrays that double when full."""

    def __init__(self, capacity: int = 1024):
        self._x = np.empty(capacity, dtype=np.float64)
        self._y = np.empty(capacity, dtype=np.float64)
        self.n = 0

    def extend(self, xs, ys) -> None:
        xs, ys = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
        k = len(xs)
        if self.n + k > len(self._x):
            cap = max(2 * len(self._x), self.n + k)
            self._x = np.resize(self._x, cap)
            self._y = np.resize(self._y, cap)
        self._x[self.n:self.n + k] = xs
        self._y[self.n:self.n + k] = ys
        self.n += k

    def append(self, x: float, y: float) -> None:
        self.extend([x], [y])

    @property
    def x(self) -> np.ndarray:
        return self._x[: self.n]

    @property
    def y(self) -> np.ndarray:
        return self._y[: self.n]

    def clear(self) -> None:
        self.n = 0


def psnr_db(losses: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return 10.0 * np.log10(1.0 / np.maximum(losses, 1e-12))


def _format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


class StatsPanel(QtWidgets.QWidget):
    """Counters from fitter.timings(): submissions, pool, bytes; plus chunk size and preview fps."""

    FIELDS = (("submissions", "Submissions"), ("pool", "Pool hits / misses"), ("in_use", "Pool in use"),
              ("upload", "Uploaded"), ("readback", "Read back"), ("chunk", "Iterations per chunk"),
              ("latency", "Last change applied after"), ("fps", "Preview fps"))

    def __init__(self, parent=None):
        super().__init__(parent)
        form = QtWidgets.QFormLayout(self)
        form.setContentsMargins(6, 2, 6, 2)
        self.labels: dict[str, QtWidgets.QLabel] = {}
        for key, title in self.FIELDS:
            label = QtWidgets.QLabel("–")
            label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
            self.labels[key] = label
            form.addRow(title, label)

    def set_timings(self, timings: dict) -> None:
        counters, pool = timings.get("counters", {}), timings.get("pool", {})
        self.labels["submissions"].setText(str(counters.get("submissions", "–")))
        self.labels["pool"].setText(f"{pool.get('hits', 0)} / {pool.get('misses', 0)}")
        self.labels["in_use"].setText(_format_bytes(pool.get("in_use_bytes", 0)))
        self.labels["upload"].setText(_format_bytes(counters.get("upload_bytes", 0)))
        self.labels["readback"].setText(_format_bytes(counters.get("readback_bytes", 0)))

    def set_chunk(self, chunk: int) -> None:
        self.labels["chunk"].setText(str(chunk))

    def set_change_latency(self, kind: str, seconds: float) -> None:
        self.labels["latency"].setText(f"{seconds * 1000:.0f} ms ({kind})")

    def set_fps(self, fps: float) -> None:
        self.labels["fps"].setText(f"{fps:.1f}")


class PlotsPanel(QtWidgets.QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.quality_view = pg.GraphicsLayoutWidget()
        self.speed_view = pg.GraphicsLayoutWidget()
        self.loss_plot = self._plot(self.quality_view, 0, "loss (MSE)", log_ticks=True)
        self.psnr_plot = self._plot(self.quality_view, 1, "PSNR (dB)")
        self.gpu_legend = self._legend(self.speed_view, 0)
        self.gpu_plot = self._plot(self.speed_view, 1, "GPU ms / iteration, per pass (median)", log_ticks=True)
        self.rate_plot = self._plot(self.speed_view, 2, "iterations / s")
        # the passes differ by an order of magnitude or more: a log axis shows each one's changes
        self.gpu_plot.setLogMode(x=False, y=True)
        # (no setXLink: both plots auto-range to the same iterations, and a link repaints twice)
        self.loss_curve = self.loss_plot.plot(pen=pg.mkPen("#e8a33d", width=1))
        self.psnr_curve = self.psnr_plot.plot(pen=pg.mkPen("#4fb3d9", width=1))
        self.rate_curve = self.rate_plot.plot(pen=pg.mkPen("#8fd14f", width=1))
        self.gpu_curves: dict[str, pg.PlotDataItem] = {}
        self.tabs = QtWidgets.QTabWidget()
        self.tabs.addTab(self.quality_view, "Loss / PSNR")
        self.tabs.addTab(self.speed_view, "GPU time / speed")

        self.log_loss = QtWidgets.QCheckBox("Log loss axis")
        self.log_loss.setChecked(True)
        self.log_loss.toggled.connect(self.set_log_loss)
        self.stats = StatsPanel()

        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.tabs, 1)
        layout.addWidget(self.log_loss)
        layout.addWidget(self.stats)

        self.losses = Series(4096)
        self.rates = Series()
        self.count_marks: list[tuple[pg.InfiniteLine, pg.InfiniteLine]] = []  # growth / pruning events
        self._last_count: int | None = None
        self.gpu_ms: dict[str, Series] = {}
        self._dirty = False
        self._redraw_timer = QtCore.QTimer(self)
        self._redraw_timer.setInterval(int(1000 / REDRAW_HZ))
        self._redraw_timer.timeout.connect(self._redraw)
        self._redraw_timer.start()
        self.set_log_loss(True)

    @staticmethod
    def _plot(view: pg.GraphicsLayoutWidget, row: int, title: str, log_ticks: bool = False) -> pg.PlotItem:
        axes = {"left": LogTickAxis("left")} if log_ticks else None
        plot = view.addPlot(row=row, col=0, axisItems=axes)
        plot.setTitle(title, size="8pt")
        plot.showGrid(x=True, y=True, alpha=0.2)
        plot.setDownsampling(auto=True, mode="peak")
        plot.setClipToView(True)
        plot.setMenuEnabled(False)
        plot.getAxis("left").setWidth(44)  # fixed: no re-layout (and jitter) as tick labels change
        return plot

    @staticmethod
    def _legend(view: pg.GraphicsLayoutWidget, row: int) -> pg.LegendItem:
        """The GPU-time legend, in a row of its own above the plot: it never covers a curve, and
        its dark background keeps the names readable (pyqtgraph's default legend is transparent
        and sits on the curves)."""
        legend = pg.LegendItem(colCount=LEGEND_COLUMNS, labelTextSize="8pt", labelTextColor="#e8e8e8",
                               brush=pg.mkBrush(28, 28, 32, 235), pen=pg.mkPen("#606068"), horSpacing=12)
        view.addItem(legend, row=row, col=0)
        return legend

    def set_log_loss(self, on: bool) -> None:
        self.loss_plot.setLogMode(x=False, y=bool(on))

    # ------------------------------------------------------------------ data in
    def _mark_count_change(self, iteration: int, count: int) -> None:
        """A dashed line where the working count changed (green: growth, red: pruning), on the
        loss and PSNR plots: the fit's sawtooth reads as designed. The newest MAX_MARKS stay."""
        last, self._last_count = self._last_count, count
        if last is None or count == last:
            return
        pen = pg.mkPen("#5cb85c" if count > last else "#d9534f", width=1, style=QtCore.Qt.PenStyle.DashLine)
        pair = tuple(pg.InfiniteLine(pos=iteration, angle=90, pen=pen, movable=False) for _ in range(2))
        for plot, line in zip((self.loss_plot, self.psnr_plot), pair):
            line.setToolTip(f"iteration {iteration}: {last} -> {count} triangles")
            plot.addItem(line, ignoreBounds=True)
        self.count_marks.append(pair)
        while len(self.count_marks) > MAX_MARKS:
            for plot, line in zip((self.loss_plot, self.psnr_plot), self.count_marks.pop(0)):
                plot.removeItem(line)

    def clear(self) -> None:
        for pair in self.count_marks:
            for plot, line in zip((self.loss_plot, self.psnr_plot), pair):
                plot.removeItem(line)
        self.count_marks.clear()
        self._last_count = None
        self.losses.clear()
        self.rates.clear()
        for series in self.gpu_ms.values():
            series.clear()
        self._dirty = True

    def add_progress(self, progress) -> None:
        if len(progress.losses):
            self.losses.extend(progress.iterations, progress.losses)
        if progress.stats is not None:
            self._mark_count_change(progress.stats.iteration, progress.stats.n_triangles)
        if progress.stats is not None and progress.chunk:
            self.rates.append(progress.stats.iteration, progress.stats.it_per_s)
            self.stats.set_chunk(progress.chunk)
        if progress.timings is not None and progress.stats is not None:
            self.add_timings(progress.stats.iteration, progress.timings)
        self._dirty = True

    def add_timings(self, iteration: int, timings: dict) -> None:
        for name, ms in timings.get("gpu_ms", {}).items():
            series = self.gpu_ms.get(name)
            if series is None:
                series = self.gpu_ms[name] = Series(256)
                pen = pg.mkPen(PASS_COLOURS[len(self.gpu_curves) % len(PASS_COLOURS)], width=1.5)
                curve = self.gpu_curves[name] = self.gpu_plot.plot(pen=pen, name=name)
                self.gpu_legend.addItem(curve, short_name(name))
            series.append(iteration, ms)
        self.stats.set_timings(timings)

    # ------------------------------------------------------------------ drawing
    def _redraw(self) -> None:
        if not self._dirty or not self.isVisible():
            return
        self._dirty = False
        x, y = self.losses.x, self.losses.y
        self.loss_curve.setData(x, y, skipFiniteCheck=True)
        self.psnr_curve.setData(x, psnr_db(y), skipFiniteCheck=True)
        self.rate_curve.setData(self.rates.x, self.rates.y, skipFiniteCheck=True)
        for name, series in self.gpu_ms.items():
            # (a log axis: a pass shorter than the timestamps resolve reads 0 ms, drawn at the floor)
            self.gpu_curves[name].setData(series.x, np.maximum(series.y, MIN_GPU_MS), skipFiniteCheck=True)
