"""The preview canvas: the live render beside the target, drawn by wgpu on the fitter's device.

The fitter leaves each forward's image in a device storage buffer (float32 rgb, W*H*3 floats).
The canvas binds that very buffer in a compute pass (app/unpack.wgsl) that writes an rgba8
texture, and a fragment pass (app/display.wgsl) samples it beside the target texture, so a
preview frame costs no readback into Python. Queue submissions are ordered, so a draw sees the
image of the last completed fit submission. The target is uploaded once per fit.

Only the reference backend (no device image) uploads rendered pixels, via ``set_render_pixels``.
Where no wgpu device exists at all, :class:`ImageCanvas` (QPainter) takes the canvas's place.

Every method here runs on the GUI thread; the worker reaches the canvas through queued signals.
"""

from __future__ import annotations

import logging

import numpy as np
import wgpu
from PySide6 import QtCore
from rendercanvas.qt import QRenderWidget

import trifit

from .gpu_gate import GpuGate
from .image_canvas import ImageCanvas
from .panes import (
    HANDLE_PX,
    MAX_OUTLINES,
    OUTLINE_PX,
    PANE_GAP_PX,
    RETRY_DRAW_MS,
    SNAPSHOT_FORMAT,
    SPLIT_LINE_PX,
    UNPACK_SIZE,
    VIEW,
    CanvasState,
    FrameClock,
    Rect,
    ViewMode,
    clear_colour,
    image_point,
    layout_panes,
    preferred_present_method,
    shader_source,
)

log = logging.getLogger("trifit.app")


class FitCanvas(QRenderWidget):
    """wgpu canvas on the shared device; see the module docstring.

    Per draw with a new frame: a compute pass unpacks the fitter's float32 rgb buffer into an
    rgba8 texture (tiny: one thread per working-size pixel), then a render pass samples it and
    the target texture with hardware bilinear filtering. Sampling textures instead of the raw
    buffers matters on CPU adapters: lavapipe shaded a 674x691 canvas in ~48 ms with manual
    bilinear loads from storage buffers, and in a few ms from textures.
    """

    def __init__(self, device, parent=None, present_method: str | None = None, gate: GpuGate | None = None):
        method = present_method or preferred_present_method()
        # vsync off: a preview frame should not wait for a display refresh on the GUI thread.
        super().__init__(parent, size=None, title=None, update_mode="ondemand", max_fps=60, vsync=False,
                         present_method=method)
        self.setMinimumSize(200, 150)
        self.present_method = method
        self.device = device
        self._gate = gate
        self._holding_gate = False
        self._retry_timer = QtCore.QTimer(self)
        self._retry_timer.setSingleShot(True)
        self._retry_timer.setInterval(RETRY_DRAW_MS)
        self._retry_timer.timeout.connect(lambda: self.request_draw())
        self.state = CanvasState()
        self.clock = FrameClock()
        self._context = self.get_wgpu_context()
        self.texture_format = self._context.get_preferred_format(device.adapter)
        self._context.configure(device=device, format=self.texture_format)

        fragment = wgpu.ShaderStage.FRAGMENT
        self._display_layout = device.create_bind_group_layout(label="display", entries=[
            {"binding": 0, "visibility": fragment | wgpu.ShaderStage.VERTEX,
             "buffer": {"type": wgpu.BufferBindingType.uniform}},
            {"binding": 1, "visibility": fragment, "texture": {"sample_type": wgpu.TextureSampleType.float}},
            {"binding": 2, "visibility": fragment, "texture": {"sample_type": wgpu.TextureSampleType.float}},
            {"binding": 3, "visibility": fragment, "sampler": {"type": wgpu.SamplerBindingType.filtering}},
            {"binding": 4, "visibility": fragment | wgpu.ShaderStage.VERTEX,
             "buffer": {"type": wgpu.BufferBindingType.read_only_storage}},
            {"binding": 5, "visibility": fragment, "texture": {"sample_type": wgpu.TextureSampleType.float}},
        ])
        self._pipelines: dict[tuple, object] = {}  # by (output format, view mode): the screen's, rgba8 for snapshots
        self._display_module = None
        self._pipeline_for(self.texture_format)
        unpack_module = device.create_shader_module(code=shader_source("unpack.wgsl"), label="unpack.wgsl")
        self._unpack_pipeline = device.create_compute_pipeline(
            label="display-unpack", layout="auto", compute={"module": unpack_module, "entry_point": "unpack"})
        self._sampler = device.create_sampler(mag_filter=wgpu.FilterMode.linear, min_filter=wgpu.FilterMode.linear)
        usage = wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST
        self._view_uniform = device.create_buffer(size=VIEW.size, usage=usage, label="display-view")
        self._unpack_uniform = device.create_buffer(size=UNPACK_SIZE.size, usage=usage, label="display-unpack-size")
        self._alive_probe = device.create_buffer(size=4, usage=wgpu.BufferUsage.COPY_DST, label="display-alive")
        # edit mode: the selected triangles' outlines and the focus mask (app/edit_tool.py)
        self._outline_buffer = device.create_buffer(size=MAX_OUTLINES * 32, label="display-outline",
                                                    usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST)
        self._focus_texture = self._make_focus_texture(1, 1)
        # uploads wait for the next draw, which holds the GPU gate: a queue write from the GUI
        # thread while the fit's chunk runs would wait for the chunk (~10 ms on lavapipe)
        self._outline_upload: bytes | None = None
        self._focus_upload: np.ndarray | None = None

        self._target_texture = None
        self._render_texture = None
        self._display_group = None
        self._source_buffer = None      # the fitter's image buffer (GPU backend)
        self._unpack_size = None        # (width, height, first float) the unpack uniform holds
        self._unpack_group = None
        self._unpack_pending = False    # a new frame is in the source buffer
        self.request_draw(self._draw)

    # ------------------------------------------------------------------ GPU objects
    def _pipeline_for(self, fmt: str, mode: int | None = None, pane: int = 1):
        """The display pipeline for an output format, view mode and pane (pipeline constants of
        display.wgsl: the mode, pane and sRGB branches are resolved when the pipeline is built)."""
        mode = int(self.state.mode if mode is None else mode)
        edit = 1 if self.state.edit or self.state.focus_on else 0
        key = (fmt, mode, pane, edit)
        pipeline = self._pipelines.get(key)
        if pipeline is None:
            if self._display_module is None:
                self._display_module = self.device.create_shader_module(code=shader_source("display.wgsl"),
                                                                        label="display.wgsl")
            module = self._display_module
            constants = {"MODE": mode, "PANE": pane, "SRGB_OUT": 1 if fmt.endswith("-srgb") else 0, "EDIT": edit}
            pipeline = self.device.create_render_pipeline(
                label=f"display-{fmt}-mode{mode}-pane{pane}-edit{edit}",
                layout=self.device.create_pipeline_layout(bind_group_layouts=[self._display_layout]),
                vertex={"module": module, "entry_point": "vs_main"},
                primitive={"topology": wgpu.PrimitiveTopology.triangle_list},
                fragment={"module": module, "entry_point": "fs_main", "targets": [{"format": fmt}],
                          "constants": constants},
            )
            self._pipelines[key] = pipeline
        return pipeline

    def _outline_pipeline_for(self, fmt: str, pane: int):
        """The selection outlines' pipeline (display.wgsl vs_outline / fs_outline) for a format and pane."""
        key = ("outline", fmt, pane)
        pipeline = self._pipelines.get(key)
        if pipeline is None:
            self._pipeline_for(fmt, pane=pane)  # (makes the module)
            module = self._display_module
            constants = {"PANE": pane, "SRGB_OUT": 1 if fmt.endswith("-srgb") else 0}
            pipeline = self.device.create_render_pipeline(
                label=f"display-outline-{fmt}-pane{pane}",
                layout=self.device.create_pipeline_layout(bind_group_layouts=[self._display_layout]),
                vertex={"module": module, "entry_point": "vs_outline", "constants": {"PANE": pane}},
                primitive={"topology": wgpu.PrimitiveTopology.triangle_list},
                fragment={"module": module, "entry_point": "fs_outline", "targets": [{"format": fmt}],
                          "constants": {"SRGB_OUT": constants["SRGB_OUT"]}},
            )
            self._pipelines[key] = pipeline
        return pipeline

    def _make_target_texture(self, width: int, height: int) -> None:
        tex = wgpu.TextureUsage
        self._target_texture = self.device.create_texture(
            label="display-target", size=(width, height, 1), format="rgba8unorm",
            usage=tex.TEXTURE_BINDING | tex.COPY_DST)
        self._rebind_display()

    def _make_render_texture(self, width: int, height: int) -> None:
        # Sized like the fitter's image, which may differ from the target (the fitter's coarse
        # stage runs at half size); sampling in uv space makes both fill the same pane.
        tex = wgpu.TextureUsage
        self._render_texture = self.device.create_texture(
            label="display-render", size=(width, height, 1), format="rgba8unorm",
            usage=tex.TEXTURE_BINDING | tex.STORAGE_BINDING | tex.COPY_DST)
        self._unpack_group = None
        self._rebind_display()

    def _rebind_display(self) -> None:
        if self._target_texture is None:
            return
        # Before the first frame the target texture stands in for the render (the shader ignores it).
        render = self._render_texture if self._render_texture is not None else self._target_texture
        self._display_group = self.device.create_bind_group(layout=self._display_layout, entries=[
            {"binding": 0, "resource": {"buffer": self._view_uniform}},
            {"binding": 1, "resource": render.create_view()},
            {"binding": 2, "resource": self._target_texture.create_view()},
            {"binding": 3, "resource": self._sampler},
            {"binding": 4, "resource": {"buffer": self._outline_buffer}},
            {"binding": 5, "resource": self._focus_texture.create_view()},
        ])

    def _make_focus_texture(self, width: int, height: int):
        tex = wgpu.TextureUsage
        return self.device.create_texture(label="display-focus", size=(width, height, 1), format="r8unorm",
                                          usage=tex.TEXTURE_BINDING | tex.COPY_DST)

    def _bind_source(self, buffer) -> None:
        self._source_buffer = buffer
        self._unpack_group = self.device.create_bind_group(
            layout=self._unpack_pipeline.get_bind_group_layout(0), entries=[
                {"binding": 0, "resource": {"buffer": self._unpack_uniform}},
                {"binding": 1, "resource": {"buffer": buffer}},
                {"binding": 2, "resource": self._render_texture.create_view()},
            ])

    def _ensure_render_texture(self, width: int, height: int) -> None:
        if self._render_texture is None or tuple(self._render_texture.size[:2]) != (width, height):
            self._make_render_texture(width, height)
        self.state.render_size = (width, height)

    def _upload(self, texture, pixels: np.ndarray) -> None:
        h, w = pixels.shape[:2]
        rgba = np.empty((h, w, 4), np.uint8)
        rgba[..., :3] = np.clip(pixels * 255.0 + 0.5, 0, 255)
        rgba[..., 3] = 255
        self.device.queue.write_texture({"texture": texture, "origin": (0, 0, 0), "mip_level": 0}, rgba,
                                        {"offset": 0, "bytes_per_row": w * 4, "rows_per_image": h}, (w, h, 1))

    # ------------------------------------------------------------------ inputs (GUI thread)
    def set_target(self, pixels: np.ndarray, keep_render: bool = False) -> None:
        """A new fit's target (float32 H x W x 3); the render pane stays empty until its first frame.
        ``keep_render``: a clip's next frame, of the same size -- the render stays until the next one."""
        h, w = pixels.shape[:2]
        if self._target_texture is None or tuple(self._target_texture.size[:2]) != (w, h):
            self._make_target_texture(w, h)
            keep_render = False
        self._upload(self._target_texture, pixels)
        self.state.image_size = (w, h)
        if not keep_render:
            self.state.render_valid = False
            self._unpack_pending = False
        self.request_draw()

    def set_render_buffer(self, buffer, width: int, height: int, first: int = 0) -> None:
        """Show the fitter's device image buffer -- the image starting ``first`` floats in --
        unpacked on the device at the next draw.

        Requests no draw: the caller draws with :meth:`draw_now` while the fit leaves the GPU
        idle (a scheduled draw would mostly find the next chunk running).
        """
        if self._target_texture is None:
            return
        self._ensure_render_texture(int(width), int(height))
        size = (int(width), int(height), int(first))
        if size != self._unpack_size:
            self._unpack_size = size
            self.device.queue.write_buffer(self._unpack_uniform, 0, UNPACK_SIZE.pack(
                width=size[0], height=size[1], first=size[2]))
        if buffer is not self._source_buffer or self._unpack_group is None:
            self._bind_source(buffer)
        self._unpack_pending = True
        self.state.render_valid = True

    def set_render_pixels(self, pixels: np.ndarray) -> None:
        """Reference-backend fallback: upload a rendered float32 H x W x 3 image."""
        if self._target_texture is None:
            return
        h, w = pixels.shape[:2]
        self._ensure_render_texture(w, h)
        self._upload(self._render_texture, pixels)
        self._source_buffer = None
        self._unpack_pending = False
        self.state.render_valid = True
        self.request_draw()

    def set_view_mode(self, mode: ViewMode) -> None:
        self.state.mode = ViewMode(mode)
        self.request_draw()

    def set_split(self, fraction: float) -> None:
        self.state.split = min(max(float(fraction), 0.0), 1.0)
        self.request_draw()

    def frames_per_second(self) -> float:
        return self.clock.fps()

    # ------------------------------------------------------------------ edit mode (app/edit_tool.py)
    def set_edit_mode(self, on: bool) -> None:
        """Draw with the edit overlay (outlines, rubber band) or without it (no cost at all)."""
        self.state.edit = bool(on)
        self.request_draw()

    def set_outline(self, tris: np.ndarray, locked, band=None, draw: bool = True) -> None:
        """Outline these triangles ((k, 10) or (k, 6) frame coordinates; ``locked`` (k,) bools)
        and, while one is dragged, the rubber band (x0, y0, x1, y1 in widget pixels). ``draw``:
        draw now (else the next frame shows it: a running fit's comes within a chunk)."""
        tris = np.asarray(tris, dtype=np.float32)
        tris = tris.reshape(-1, tris.shape[-1])[:MAX_OUTLINES] if tris.size else np.zeros((0, 10), np.float32)
        k = len(tris)
        if k:
            rows = np.zeros((k, 8), np.float32)
            rows[:, :6] = tris[:, :6]
            rows[:, 6] = np.asarray(locked, dtype=bool)[:k]
            self._outline_upload = rows.tobytes()
        self.state.outlines = k
        self.state.band = None if band is None else tuple(float(v) for v in band)
        if draw:
            self.request_draw()

    def set_focus_overlay(self, mask: np.ndarray | None, draw: bool = True) -> None:
        """Tint the target where the focus mask (H, W) in [0, 1] is painted; None: no overlay.
        ``draw``: as for :meth:`set_outline`."""
        if mask is None:
            self.state.focus_on = False
            if draw:
                self.request_draw()
            return
        self._focus_upload = np.ascontiguousarray(np.clip(np.asarray(mask, np.float32) * 255.0 + 0.5, 0, 255)
                                                  .astype(np.uint8))
        self.state.focus_on = True
        if draw:
            self.request_draw()

    def image_point(self, x: float, y: float):
        """The image point (u, v) (normalised frame coordinates) under widget pixel (x, y), or None."""
        ratio = self.get_pixel_ratio()
        w, h = self.get_physical_size()
        return image_point(self.state.mode, self.state.split, self._pane_rects(w, h), x * ratio, y * ratio)

    def image_scale(self) -> float:
        """Widget pixels per frame unit across (the panes' width): how far a vertex is on screen."""
        w, h = self.get_physical_size()
        r = self._pane_rects(w, h)[0]
        return (r[2] - r[0]) / self.get_pixel_ratio()

    # ------------------------------------------------------------------ drawing
    def _pane_rects(self, width: int, height: int) -> tuple[Rect, Rect]:
        img_w, img_h = self.state.image_size or (1, 1)
        return layout_panes(self.state.mode, width, height, img_w, img_h, gap=PANE_GAP_PX * self.get_pixel_ratio())

    def _view_bytes(self, width: int, height: int, srgb_output: bool) -> bytes:
        s = self.state
        img_w, img_h = s.image_size or (1, 1)
        a, b = self._pane_rects(width, height)
        ratio = self.get_pixel_ratio()
        flags = (1 if s.render_valid else 0) | (2 if s.image_size else 0) | (4 if srgb_output else 0)
        band = tuple(v * ratio for v in s.band) if s.band is not None else (0.0, 0.0, 0.0, 0.0)
        edit_flags = (1 if s.focus_on else 0) | (2 if s.band is not None else 0)
        return VIEW.pack(pane_a=a, pane_b=b, image_size=(img_w, img_h), mode=int(s.mode), split=s.split,
                         flags=flags, line_px=SPLIT_LINE_PX * ratio, band=band,
                         outlines=s.outlines if s.edit else 0, edit_flags=edit_flags,
                         outline_px=OUTLINE_PX * ratio, handle_px=HANDLE_PX * ratio, surface=(width, height))

    def _upload_edit(self) -> None:
        """Edit mode's pending uploads: the outlines, the focus mask (in the draw's GPU turn)."""
        if self._outline_upload is not None:
            data, self._outline_upload = self._outline_upload, None
            self.device.queue.write_buffer(self._outline_buffer, 0, data)
        if self._focus_upload is not None:
            m, self._focus_upload = self._focus_upload, None
            h, w = m.shape
            if tuple(self._focus_texture.size[:2]) != (w, h):
                self._focus_texture = self._make_focus_texture(w, h)
                self._rebind_display()
            self.device.queue.write_texture({"texture": self._focus_texture, "origin": (0, 0, 0), "mip_level": 0},
                                            m, {"offset": 0, "bytes_per_row": w, "rows_per_image": h}, (w, h, 1))

    def _encode(self, encoder, view, fmt: str, width: int, height: int) -> None:
        """Unpack a pending frame, then draw the panes into ``view``."""
        self._upload_edit()
        if self._unpack_pending and self._unpack_group is not None:
            w, h = self.state.render_size
            cpass = encoder.begin_compute_pass(label="display-unpack")
            cpass.set_pipeline(self._unpack_pipeline)
            cpass.set_bind_group(0, self._unpack_group)
            cpass.dispatch_workgroups((w + 7) // 8, (h + 7) // 8, 1)
            cpass.end()
            self._unpack_pending = False
        self.device.queue.write_buffer(self._view_uniform, 0,
                                       self._view_bytes(width, height, fmt.endswith("-srgb")))
        rpass = encoder.begin_render_pass(color_attachments=[{
            "view": view,
            "clear_value": clear_colour(fmt),  # the gaps between and around the panes
            "load_op": wgpu.LoadOp.clear,
            "store_op": wgpu.StoreOp.store,
        }])
        if self._display_group is not None:
            rpass.set_bind_group(0, self._display_group)
            for pane, rect in enumerate(self._pane_rects(width, height), start=1):
                x0, y0 = max(0.0, rect[0]), max(0.0, rect[1])
                x1, y1 = min(float(width), rect[2]), min(float(height), rect[3])
                if x1 - x0 < 1.0 or y1 - y0 < 1.0:
                    continue  # an empty pane (the overlay's second) or one off the surface
                rpass.set_pipeline(self._pipeline_for(fmt, pane=pane))
                rpass.set_viewport(x0, y0, x1 - x0, y1 - y0, 0.0, 1.0)
                rpass.draw(3)
                if self.state.edit and self.state.outlines:  # the selection, over the pane
                    rpass.set_pipeline(self._outline_pipeline_for(fmt, pane))
                    rpass.set_viewport(0.0, 0.0, float(width), float(height), 0.0, 1.0)
                    sx, sy = int(x0), int(y0)
                    rpass.set_scissor_rect(sx, sy, max(1, min(int(x1), width) - sx), max(1, min(int(y1), height) - sy))
                    rpass.draw(6, 6 * self.state.outlines)
                    rpass.set_scissor_rect(0, 0, width, height)
        rpass.end()

    def _take_gpu_turn(self) -> bool:
        """Take the GPU gate for this draw and its present without ever waiting for the fit."""
        if self._gate is None or self._holding_gate:
            return True
        if not self._gate.try_gui_turn():
            return False
        self._holding_gate = True
        # rendercanvas presents right after the draw function returns, within the same event;
        # the gate goes back once that event is done.
        QtCore.QTimer.singleShot(0, self.release_gpu_turn)
        return True

    def release_gpu_turn(self) -> None:
        """Give the GPU gate back (normally right after the present; call it before the GUI
        thread blocks on the worker, e.g. when joining it at shutdown)."""
        if self._holding_gate:
            self._holding_gate = False
            self._gate.end_gui_turn()

    def _draw(self) -> None:
        if not self._take_gpu_turn():
            # The fit is using the GPU: drawing now would block the GUI until its chunk ends.
            self.clock.deferred += 1
            self._retry_timer.start()
            raise wgpu.DrawCancelled("the fit is using the GPU; drawing a little later")
        if not self._device_answers():
            self.clock.cancelled += 1
            raise wgpu.DrawCancelled("the GPU device was lost; the window draws again on the fit's new one")
        try:
            texture = self._context.get_current_texture()
        except wgpu.DrawCancelled:
            # Occluded / outdated surface (e.g. mid-resize): skip this frame; rendercanvas
            # reschedules when it sees the exception, so re-raise after counting it.
            self.clock.cancelled += 1
            raise
        width, height = texture.size[:2]
        encoder = self.device.create_command_encoder(label="display")
        self._encode(encoder, texture.create_view(), self.texture_format, width, height)
        self.device.queue.submit([encoder.finish()])
        self.clock.tick()

    def _device_answers(self) -> bool:
        """Whether the device is still there. On a lost device the surface's next texture is a
        panic inside wgpu-native, which aborts the process; a queue write fails first, as an
        exception. (The fit's next chunk meets the loss too, recovers on a new device, and the
        window then builds a canvas there: MainWindow._follow_engine_device.)"""
        from trifit.gpu.device import as_device_lost

        try:
            self.device.queue.write_buffer(self._alive_probe, 0, b"\0\0\0\0")
        except wgpu.GPUError as exc:
            if as_device_lost(exc) is not None:
                return False
            raise
        return True

    def draw_now(self) -> bool:
        """Draw and present synchronously (a new fit frame while the GPU is idle); True if drawn."""
        before = self.clock.count
        try:
            self.force_draw()
        except RuntimeError:  # already inside a draw
            return False
        finally:
            self.release_gpu_turn()  # drawn and presented: the worker may go on at once
        return self.clock.count > before

    # ------------------------------------------------------------------ snapshots (tests, diagnostics)
    def snapshot(self, width: int | None = None, height: int | None = None) -> np.ndarray:
        """Draw the current view into an offscreen rgba8 texture and read it back (H x W x 4 uint8).

        For tests and diagnostics only: the on-screen path never reads back.
        """
        if width is None or height is None:
            width, height = self.get_physical_size()
        width, height = max(int(width), 1), max(int(height), 1)
        texture = self.device.create_texture(
            size=(width, height, 1), format=SNAPSHOT_FORMAT,
            usage=wgpu.TextureUsage.RENDER_ATTACHMENT | wgpu.TextureUsage.COPY_SRC)
        locked = self._gate is not None and not self._holding_gate and self._gate.gui_turn(10.0)
        try:
            encoder = self.device.create_command_encoder(label="display-snapshot")
            self._encode(encoder, texture.create_view(), SNAPSHOT_FORMAT, width, height)
            self.device.queue.submit([encoder.finish()])
            data = self.device.queue.read_texture(
                {"texture": texture, "origin": (0, 0, 0), "mip_level": 0},
                {"offset": 0, "bytes_per_row": width * 4, "rows_per_image": height},
                (width, height, 1))
        finally:
            if locked:
                self._gate.end_gui_turn()
        self.request_draw()  # the view uniform now holds the snapshot's layout; redraw the screen's
        return np.frombuffer(data, np.uint8).reshape(height, width, 4).copy()


def make_canvas(engine: trifit.Engine, present_method: str | None = None, gate: GpuGate | None = None):
    """A wgpu canvas on the engine's device (the fitter's image buffers live there); for the
    reference backend on the shared device, if any; the QPainter canvas only where wgpu has no
    adapter."""
    try:
        from trifit.gpu.device import get_context

        device = engine.device if engine.device is not None else get_context().device
    except trifit.AdapterError as exc:
        log.warning("no wgpu device for the canvas (%s); drawing with QPainter", exc)
        return ImageCanvas()
    try:
        return FitCanvas(device, present_method=present_method, gate=gate)
    except Exception as exc:  # e.g. no native surface: a bitmap present still works
        if present_method == "bitmap":
            raise
        log.warning("screen present failed (%s); presenting through a bitmap", exc)
        return FitCanvas(device, present_method="bitmap", gate=gate)
