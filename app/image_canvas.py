"""The canvas where wgpu finds no adapter at all: QPainter, uploaded pixels only."""

from __future__ import annotations

import numpy as np
from PySide6 import QtCore, QtGui, QtWidgets

from .panes import ERROR_GAIN, CanvasState, FrameClock, ViewMode, heat_ramp, layout_panes


class ImageCanvas(QtWidgets.QWidget):
    """QPainter stand-in for machines where wgpu finds no adapter at all (reference backend).

    Same inputs as :class:`FitCanvas`, except that it can only show uploaded pixels.
    """

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setMinimumSize(200, 150)
        self.state = CanvasState()
        self.clock = FrameClock()
        self._target: QtGui.QImage | None = None
        self._render: QtGui.QImage | None = None

    @staticmethod
    def _to_qimage(pixels: np.ndarray) -> QtGui.QImage:
        rgb = np.ascontiguousarray(np.clip(pixels * 255.0 + 0.5, 0, 255).astype(np.uint8))
        h, w = rgb.shape[:2]
        return QtGui.QImage(rgb.data, w, h, 3 * w, QtGui.QImage.Format.Format_RGB888).copy()

    def set_target(self, pixels: np.ndarray, keep_render: bool = False) -> None:
        size = self.state.image_size
        self._target = self._to_qimage(pixels)
        self.state.image_size = (self._target.width(), self._target.height())
        if not (keep_render and size == self.state.image_size):
            self.state.render_valid = False
        self._target_pixels = np.asarray(pixels, np.float32)
        self.update()

    def set_render_buffer(self, buffer, width: int, height: int) -> None:
        raise RuntimeError("ImageCanvas cannot show device buffers")

    def set_render_pixels(self, pixels: np.ndarray) -> None:
        self._render_pixels = np.asarray(pixels, np.float32)
        self._render = self._to_qimage(pixels)
        self.state.render_size = (self._render.width(), self._render.height())
        self.state.render_valid = True
        self.update()

    def set_view_mode(self, mode: ViewMode) -> None:
        self.state.mode = ViewMode(mode)
        self.update()

    def set_split(self, fraction: float) -> None:
        self.state.split = min(max(float(fraction), 0.0), 1.0)
        self.update()

    def frames_per_second(self) -> float:
        return self.clock.fps()

    def _heatmap(self) -> QtGui.QImage:
        target, render = self._target_pixels, self._render_pixels
        th, tw = target.shape[:2]
        rh, rw = render.shape[:2]
        # nearest-neighbour upsampling of a coarse-stage (half size) render to the target's grid
        render = render[np.arange(th) * rh // th][:, np.arange(tw) * rw // tw]
        err = np.abs(render - target).mean(axis=2)
        return self._to_qimage(heat_ramp(ERROR_GAIN * err))

    def paintEvent(self, event):  # noqa: N802 - Qt override
        p = QtGui.QPainter(self)
        p.fillRect(self.rect(), QtGui.QColor(33, 33, 36))
        s = self.state
        if self._target is None:
            p.end()
            return
        w, h = s.image_size
        a, b = layout_panes(s.mode, self.width(), self.height(), w, h)
        to_rect = lambda r: QtCore.QRectF(r[0], r[1], r[2] - r[0], r[3] - r[1])  # noqa: E731
        render = self._render if s.render_valid else None
        p.setRenderHint(QtGui.QPainter.RenderHint.SmoothPixmapTransform, True)
        if s.mode == ViewMode.OVERLAY:
            p.drawImage(to_rect(a), self._target)
            if render is not None:
                cut = a[0] + s.split * (a[2] - a[0])
                p.save()
                p.setClipRect(QtCore.QRectF(a[0], a[1], cut - a[0], a[3] - a[1]))
                p.drawImage(to_rect(a), render)
                p.restore()
                p.fillRect(QtCore.QRectF(cut - 1, a[1], 2, a[3] - a[1]), QtGui.QColor(255, 217, 51))
        elif s.mode == ViewMode.ERROR_HEATMAP:
            if render is not None:
                p.drawImage(to_rect(a), render)
                p.drawImage(to_rect(b), self._heatmap())
        else:
            p.drawImage(to_rect(a), self._target)
            if render is not None:
                p.drawImage(to_rect(b), render)
        p.end()
        self.clock.tick()

    def request_draw(self, *_):
        self.update()

    def draw_now(self) -> bool:
        self.repaint()
        return True
