"""The canvas where wgpu finds no adapter at all: QPainter, uploaded pixels only."""

from __future__ import annotations

import numpy as np
from PySide6 import QtCore, QtGui, QtWidgets

from .panes import ERROR_GAIN, CanvasState, FrameClock, ViewMode, heat_ramp, image_point, layout_panes


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
        self._outline = (np.zeros((0, 10)), np.zeros(0, bool))  # edit mode: selected triangles, locked
        self._focus: QtGui.QImage | None = None

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

    def set_render_buffer(self, buffer, width: int, height: int, first: int = 0) -> None:
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

    # edit mode (app/edit_tool.py): as FitCanvas's
    def set_edit_mode(self, on: bool) -> None:
        self.state.edit = bool(on)
        self.update()

    def set_outline(self, tris, locked, band=None, draw: bool = True) -> None:
        self._outline = (np.asarray(tris, np.float64).reshape(-1, np.shape(tris)[-1] if np.size(tris) else 10),
                         np.asarray(locked, bool))
        self.state.outlines = len(self._outline[0])
        self.state.band = None if band is None else tuple(float(v) for v in band)
        if draw:
            self.update()

    def set_focus_overlay(self, mask, draw: bool = True) -> None:
        self.state.focus_on = mask is not None
        if mask is not None:
            m = np.asarray(mask, np.float32)
            rgba = np.zeros(m.shape + (4,), np.uint8)
            rgba[..., 0], rgba[..., 1], rgba[..., 2] = 255, 89, 26
            rgba[..., 3] = np.clip(m * 127.5 + 0.5, 0, 255).astype(np.uint8)
            h, w = m.shape
            self._focus = QtGui.QImage(rgba.data, w, h, 4 * w, QtGui.QImage.Format.Format_RGBA8888).copy()
        self.update()

    def _panes(self):
        w, h = self.state.image_size or (1, 1)
        return layout_panes(self.state.mode, self.width(), self.height(), w, h)

    def image_point(self, x: float, y: float):
        return image_point(self.state.mode, self.state.split, self._panes(), x, y)

    def image_scale(self) -> float:
        r = self._panes()[0]
        return r[2] - r[0]

    def _paint_edit(self, p: QtGui.QPainter, panes) -> None:
        s = self.state
        to_rect = lambda r: QtCore.QRectF(r[0], r[1], r[2] - r[0], r[3] - r[1])  # noqa: E731
        shown = panes[:1] if s.mode == ViewMode.OVERLAY else panes
        if s.focus_on and self._focus is not None:
            target = panes[0] if s.mode != ViewMode.ERROR_HEATMAP else panes[1]
            p.drawImage(to_rect(target), self._focus)
        if s.edit:
            tris, locked = self._outline
            for r in shown:
                for tri, is_locked in zip(tris, locked):
                    pts = [QtCore.QPointF(r[0] + tri[2 * k] * (r[2] - r[0]), r[1] + tri[2 * k + 1] * (r[3] - r[1]))
                           for k in range(3)]
                    p.setPen(QtGui.QPen(QtGui.QColor(90, 217, 255) if is_locked else QtGui.QColor(255, 217, 51), 1.5))
                    p.drawPolygon(QtGui.QPolygonF(pts))
            if s.band is not None:
                p.setPen(QtGui.QPen(QtGui.QColor(255, 255, 255), 1))
                p.setBrush(QtCore.Qt.BrushStyle.NoBrush)
                x0, y0, x1, y1 = s.band
                p.drawRect(QtCore.QRectF(x0, y0, x1 - x0, y1 - y0))

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
        self._paint_edit(p, (a, b))
        p.end()
        self.clock.tick()

    def request_draw(self, *_):
        self.update()

    def draw_now(self) -> bool:
        self.repaint()
        return True
