"""What the preview canvases (app/canvas.py, app/image_canvas.py) share and what needs no GPU:
view modes, where each pane goes, the error heat ramp, the frame clock, the view state, the
present method, the canvas's uniforms (declared once: render/gpu/layouts.py generates their WGSL
structs) and WGSL sources."""

from __future__ import annotations

import enum
import os
import time
from collections import deque
from functools import cache
from importlib.resources import files

import numpy as np
from PySide6 import QtGui

from trifit.gpu.layouts import Struct, declared_structs

PANE_GAP_PX = 8  # logical pixels between and around panes
SPLIT_LINE_PX = 2  # logical pixels
SNAPSHOT_FORMAT = "rgba8unorm"
RETRY_DRAW_MS = 25  # a draw that found the GPU busy with the fit tries again this much later


class ViewMode(enum.IntEnum):
    SIDE_BY_SIDE = 0
    OVERLAY = 1
    ERROR_HEATMAP = 2

    @property
    def label(self) -> str:
        return {0: "Side by side", 1: "Overlay (slider)", 2: "Error heatmap"}[int(self)]


Rect = tuple[float, float, float, float]  # x0, y0, x1, y1


def fit_rect(box: Rect, img_w: int, img_h: int) -> Rect:
    """The largest rectangle of the image's aspect ratio centred in ``box``."""
    x0, y0, x1, y1 = box
    bw, bh = max(x1 - x0, 1.0), max(y1 - y0, 1.0)
    scale = min(bw / img_w, bh / img_h)
    w, h = img_w * scale, img_h * scale
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    return (round(cx - w / 2), round(cy - h / 2), round(cx + w / 2), round(cy + h / 2))


def layout_panes(mode: ViewMode, canvas_w: float, canvas_h: float, img_w: int, img_h: int,
                 gap: float = PANE_GAP_PX) -> tuple[Rect, Rect]:
    """Pane rectangles (physical px) for a view mode; aspect kept, panes side by side or stacked,
    whichever shows the images larger (a tall window stacks them)."""
    if mode == ViewMode.OVERLAY:
        one = fit_rect((gap, gap, canvas_w - gap, canvas_h - gap), img_w, img_h)
        return one, (0, 0, 0, 0)
    half_w = (canvas_w - 3 * gap) / 2
    half_h = (canvas_h - 3 * gap) / 2
    scale_side = min(half_w / img_w, (canvas_h - 2 * gap) / img_h)
    scale_stack = min((canvas_w - 2 * gap) / img_w, half_h / img_h)
    if scale_side >= scale_stack:
        a = fit_rect((gap, gap, gap + half_w, canvas_h - gap), img_w, img_h)
        b = fit_rect((2 * gap + half_w, gap, canvas_w - gap, canvas_h - gap), img_w, img_h)
    else:
        a = fit_rect((gap, gap, canvas_w - gap, gap + half_h), img_w, img_h)
        b = fit_rect((gap, 2 * gap + half_h, canvas_w - gap, canvas_h - gap), img_w, img_h)
    return a, b


def image_point(mode: ViewMode, split: float, panes: tuple[Rect, Rect], x: float, y: float):
    """Where the canvas point (x, y) (the panes' units) falls on the image: (u, v) in normalised
    frame coordinates (a scene's vertex coordinates), or None between the panes."""
    for k, r in enumerate(panes):
        if k == 1 and mode == ViewMode.OVERLAY:
            break
        if r[2] - r[0] >= 1 and r[3] - r[1] >= 1 and r[0] <= x < r[2] and r[1] <= y < r[3]:
            return (x - r[0]) / (r[2] - r[0]), (y - r[1]) / (r[3] - r[1])
    return None


def clear_colour(fmt: str) -> tuple[float, float, float, float]:
    """display.wgsl's BACKGROUND (sRGB-encoded values), linearised for an sRGB output texture."""
    c = [0.13, 0.13, 0.14]
    if fmt.endswith("-srgb"):
        c = [v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4 for v in c]
    return (c[0], c[1], c[2], 1.0)


def preferred_present_method() -> str:
    """'screen' (zero copy) where rendercanvas can hand wgpu a native window; 'bitmap' elsewhere.

    rendercanvas describes every Linux window as X11, so a native Wayland or offscreen Qt platform
    must present through a bitmap. ``TRIFIT_PRESENT`` overrides (screen|bitmap).
    """
    forced = os.environ.get("TRIFIT_PRESENT", "").strip().lower()
    if forced in ("screen", "bitmap"):
        return forced
    platform = QtGui.QGuiApplication.platformName()
    return "screen" if platform in ("xcb", "windows", "cocoa") else "bitmap"


VIEW = Struct("View", [  # display.wgsl's uniform
    ("pane_a", "vec4f", "x0, y0, x1, y1 of the first pane (target / overlay / render)"),
    ("pane_b", "vec4f", "second pane (render / unused / error heatmap)"),
    ("image_size", "vec2f", "W, H of both images"),
    ("mode", "u32", "0 side by side, 1 overlay with split, 2 render beside error heatmap"),
    ("split", "f32", "overlay: fraction of the pane width showing the render"),
    ("flags", "u32", "bit 0: render valid, bit 1: target valid, bit 2: output texture is sRGB"),
    ("line_px", "f32", "overlay split line width in physical pixels"),
    ("band", "vec4f", "edit mode: the rubber band's x0, y0, x1, y1 in physical pixels"),
    ("outlines", "u32", "edit mode: selected triangles outlined (the outline buffer's first ones)"),
    ("edit_flags", "u32", "bit 0: focus mask overlay on, bit 1: rubber band on"),
    ("outline_px", "f32", "outline width in physical pixels"),
    ("handle_px", "f32", "vertex handle radius in physical pixels"),
    ("surface", "vec2f", "the output texture's width, height in physical pixels (the outlines' viewport)"),
], "uniform")
MAX_OUTLINES = 1024   # selected triangles the display outlines (two vec4f each in its storage buffer)
OUTLINE_PX = 1.5      # logical pixels
HANDLE_PX = 3.5       # logical pixels
# unpack.wgsl's uniform: the image's size, and where in the buffer it starts (floats: the fit's
# leading replica, render/replicas.py)
UNPACK_SIZE = Struct("Size", [("width", "u32"), ("height", "u32"), ("first", "u32")], "uniform")
_UNIFORMS = {"display.wgsl": VIEW, "unpack.wgsl": UNPACK_SIZE}


@cache
def shader_source(name: str) -> str:
    """WGSL shipped beside this module (app/display.wgsl, app/unpack.wgsl), after the generated
    struct of its uniform (which the file must not spell)."""
    uniform, text = _UNIFORMS[name], files(__package__).joinpath(name).read_text(encoding="utf-8")
    if uniform.name in declared_structs(text):
        raise ValueError(f"app/{name} spells struct {uniform.name}, which app/panes.py declares: delete it there")
    return uniform.wgsl() + "\n" + text


ERROR_GAIN = 4.0  # as in display.wgsl
_HEAT_STOPS = np.array([0.0, 0.33, 0.66, 1.0])
_HEAT_COLOURS = np.array([[0.0, 0.0, 0.02], [0.45, 0.07, 0.55], [0.95, 0.45, 0.1], [1.0, 1.0, 0.75]])


def heat_ramp(e: np.ndarray) -> np.ndarray:
    """The error colour ramp of display.wgsl's heat(), for the QPainter canvas."""
    t = np.clip(e, 0.0, 1.0)
    return np.stack([np.interp(t, _HEAT_STOPS, _HEAT_COLOURS[:, c]) for c in range(3)], axis=-1)


class FrameClock:
    """Timestamps of recent presented frames, for an fps readout and the measurement script."""

    def __init__(self, keep: int = 240):
        self.times: deque[float] = deque(maxlen=keep)
        self.count = 0
        self.cancelled = 0   # the surface had no texture to give (occluded, resizing)
        self.deferred = 0    # the fit held the GPU; drawn a little later

    def tick(self) -> None:
        self.times.append(time.perf_counter())
        self.count += 1

    def fps(self, window_s: float = 2.0) -> float:
        now = time.perf_counter()
        recent = [t for t in self.times if now - t <= window_s]
        if len(recent) < 2:
            return 0.0
        return (len(recent) - 1) / max(recent[-1] - recent[0], 1e-9)


class CanvasState:
    """What the canvas shows, shared by both canvas kinds (no GPU objects here)."""

    def __init__(self):
        self.mode = ViewMode.SIDE_BY_SIDE
        self.split = 0.5
        self.image_size: tuple[int, int] | None = None   # of the target; sets the panes' aspect
        self.render_size: tuple[int, int] | None = None  # of the fitter's image (half size while coarse)
        self.render_valid = False
        self.edit = False                    # edit mode: the display pipelines with the edit overlay
        self.outlines = 0                    # selected triangles outlined
        self.band: Rect | None = None        # the rubber band (logical px), while one is dragged
        self.focus_on = False                # the focus mask overlay is shown
