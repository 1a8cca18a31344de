"""The GPU backend: batched render and loss-and-gradient through the WGSL kernels.

One call = one submission: upload scenes (and targets), then in a single compute pass
bin -> forward [-> loss -> backward -> reduce], then copy results to pooled staging buffers and
read them back. Workspaces (buffers + bind groups) are cached per problem shape, so repeating a
call allocates nothing.
"""

from __future__ import annotations

import time
from collections import OrderedDict

import numpy as np

from .. import focus
from ..errors import BatchError
from . import shaders
from .device import GpuContext, get_context
from .layouts import SCENE, STATE
from .pool import BufferPool
from .timing import Counters, GpuTimer, HostPhases
from .workspace import COPY_DST, COPY_SRC, STORAGE, Shape, Workspace

_MAX_CACHED_WORKSPACES = 4
#: pixels per thread of the forward and backward on CPU adapters (docs/PERFORMANCE.md, "Eight pixels
#: per thread on CPU adapters")
CPU_PIXELS_PER_THREAD = 8
_ZERO_STATE = STATE.pack(iter=0, sigma=0.0, lr_scale=0.0)


class GpuBackend:
    name = "gpu"

    def __init__(self, ctx: GpuContext | None = None, subgroups: bool | None = None,
                 segmented: bool | None = None, pixels_per_thread: int | None = None):
        self.ctx = ctx or get_context()
        self.device = self.ctx.device
        cap = min(self.ctx.limits.get("max-storage-buffer-binding-size", 1 << 27),
                  self.ctx.limits.get("max-buffer-size", 1 << 28))
        self.pool = BufferPool(self.device, max_buffer_bytes=cap)
        self.subgroups = subgroups
        # CPU adapters (lavapipe) have parallelism to spare: segmenting the backward only adds work there
        cpu = self.ctx.info.get("type") == "CPU"
        self.segmented = not cpu if segmented is None else segmented
        # ... and workgroup sums, barriers and each entry's set-up cost more than arithmetic there: one of
        # each per 8 pixels
        self.pixels_per_thread = (CPU_PIXELS_PER_THREAD if cpu else 1) if pixels_per_thread is None \
            else shaders.check_pixels_per_thread(pixels_per_thread)
        self.counters = Counters()
        self.host = HostPhases()
        self.timer = GpuTimer(self.ctx, self.pool)
        self._workspaces: OrderedDict[tuple, Workspace] = OrderedDict()

    # ------------------------------------------------------------------ info
    @property
    def adapter(self) -> dict[str, str]:
        return dict(self.ctx.info)

    def pool_stats(self) -> dict[str, int]:
        return self.pool.stats()

    # ------------------------------------------------------------------ workspaces
    def workspace(self, shape: Shape) -> Workspace:
        key = (shape, self.subgroups)  # shape includes segmentation
        ws = self._workspaces.get(key)
        if ws is not None:
            self._workspaces.move_to_end(key)
            return ws
        ws = Workspace(self.ctx, self.pool, shape, subgroups=self.subgroups)
        self._workspaces[key] = ws
        while len(self._workspaces) > _MAX_CACHED_WORKSPACES:
            _, old = self._workspaces.popitem(last=False)
            old.release()
        # state.iter = 0 so the loss lands in ring slot 0
        ws.write("state", _ZERO_STATE)
        return ws

    def fit_loop(self, *args, **kwargs):
        """A device-resident fit loop (render/gpu/fitloop.py) on this backend's device and pool."""
        from .fitloop import GpuFitLoop

        return GpuFitLoop(self, *args, **kwargs)

    # ------------------------------------------------------------------ calls
    def render_batch(self, tris, bg, sigma, width: int, height: int, naive: bool = False,
                     transient: bool = False) -> np.ndarray:
        """(B, H, W, 3) renders; ``naive=True`` uses the baseline kernel (no binning) instead;
        ``transient=True`` gives the workspace's buffers back to the pool at once instead of
        caching it (one-off renders of ever-changing shapes, e.g. the fitter's growth events)."""
        tris, bg, sigma = _check_batch(tris, bg, sigma)
        B, T = tris.shape[:2]
        shape = Shape(B, width, height, T, self.segmented, self.pixels_per_thread)
        with self.host.phase("alloc"):
            ws, transient = self._workspace_for(shape, transient)
        try:
            with self.timer.call():
                with self.host.phase("pack"):
                    packed = SCENE.pack(tris, bg, sigma)
                with self.host.phase("upload"):
                    self.counters.upload_bytes += ws.set_frame(None) + ws.write("scene", packed)
                enc = self.device.create_command_encoder()
                cpass = enc.begin_compute_pass()
                if naive:
                    with self.timer.span(cpass, "naive_forward"):
                        ws.encode_naive_forward(cpass)
                else:
                    with self.timer.span(cpass, "render"):
                        ws.encode_render(cpass)
                cpass.end()
                size = B * height * width * 3 * 4
                staging, _ = ws.copy_out(enc, "image", size)
                self.timer.resolve(enc)
                img = self._submit_and_read(enc, [(staging, size)], "render")[0]
                return img.reshape(B, height, width, 3)
        finally:
            if transient:
                ws.release()

    def render_records_on_device(self, scene, batch: int, n_tris: int, width: int, height: int):
        """Render the B scene records in the device buffer ``scene`` (a fit loop's) into a cached
        workspace's image buffer and leave them there: the buffer ((B, H, W, 3) float32), valid
        until the next call of that shape."""
        enc = self.device.create_command_encoder()
        image = self.encode_render_records(enc, scene, batch, n_tris, width, height)
        self.device.queue.submit([enc.finish()])
        self.counters.submissions += 1
        return image

    def encode_render_records(self, enc, scene, batch: int, n_tris: int, width: int, height: int):
        """:meth:`render_records_on_device`'s copy and pass into the command encoder ``enc`` (a fit
        loop's chunk); returns the image buffer they fill."""
        ws = self.workspace(Shape(batch, width, height, n_tris, self.segmented, self.pixels_per_thread))
        self.counters.upload_bytes += ws.set_frame(None)
        enc.copy_buffer_to_buffer(scene, 0, ws.buffers["scene"], 0, batch * SCENE.stride(n_tris) * 4)
        cpass = enc.begin_compute_pass()
        ws.encode_render(cpass)
        cpass.end()
        return ws.buffers["image"]

    def placement(self, targets, weights):
        """Placement on the device for these full-size targets (render/gpu/events.py)."""
        from .events import DevicePlacement

        return DevicePlacement(self, targets, weights)

    def loss_and_grad_batch(self, tris, bg, sigma, targets, loss: str = "mse", weights=None):
        """Per-image losses (B,) and gradients (B, T + 1, 10); row T holds the background's.
        ``weights`` (B, H, W): focus maps, the loss their weighted mean (render/focus.py)."""
        scaled = None if weights is None else focus.scaled(weights)
        return self._loss_pass(tris, bg, sigma, targets, loss, removal_costs=False, weights=scaled)

    def removal_costs_batch(self, tris, bg, sigma, targets, transient: bool = False, weights=None) -> np.ndarray:
        """(B, T): how much each image's summed squared error would grow if each triangle alone were
        removed (render/placement.py's removal_costs, float32, from the backward's walk);
        ``transient`` as in render_batch; ``weights`` (B, H, W): each pixel's term times its weight."""
        _, costs = self._loss_pass(tris, bg, sigma, targets, "mse", removal_costs=True, transient=transient,
                                   weights=weights)
        return costs

    def removal_costs_records(self, records, n_tris: int, sigma, targets, transient: bool = False,
                              weights=None) -> np.ndarray:
        """:meth:`removal_costs_batch` of the B scene records in the device buffer ``records`` (a
        fit loop's: the values it renders), with these sigmas (B,) in place of the records' own;
        nothing but the costs leaves the device."""
        sigma = np.asarray(sigma, dtype=np.float64).reshape(-1)
        _, costs = self._loss_pass(None, None, sigma, targets, "mse", removal_costs=True, transient=transient,
                                   weights=weights, records=(records, n_tris, None))
        return costs

    def mse_records(self, records, n_tris: int, which, sigma, targets, transient: bool = False,
                    weights=None) -> np.ndarray:
        """:meth:`mse_batch` of scenes made of the scene records in the device buffer ``records`` (a
        fit loop's): scene i is record ``which[i]`` with sigma ``sigma[i]``, against ``targets[i]``
        (the sigma probes: each record under a few sigmas). One float a scene comes back."""
        sigma = np.asarray(sigma, dtype=np.float64).reshape(-1)
        scaled = None if weights is None else focus.scaled(weights)
        losses, _ = self._loss_pass(None, None, sigma, targets, "mse", removal_costs=False, transient=transient,
                                    weights=scaled, backward=False, records=(records, n_tris, list(which)))
        return losses

    def mse_batch(self, tris, bg, sigma, targets, transient: bool = False, weights=None) -> np.ndarray:
        """(B,) each scene's mean squared error against its target, the focus-weighted mean with
        ``weights`` (B, H, W) -- the fit's "mse" loss, summed on the device in a fixed order:
        B floats come back, where a render would bring back B images (sigma probes)."""
        scaled = None if weights is None else focus.scaled(weights)
        losses, _ = self._loss_pass(tris, bg, sigma, targets, "mse", removal_costs=False, transient=transient,
                                    weights=scaled, backward=False)
        return losses

    def _workspace_for(self, shape: Shape, transient: bool):
        """(workspace, transient): the cached one for this shape, or with ``transient`` (and none
        cached) a new one the caller releases after its call."""
        if transient and (shape, self.subgroups) not in self._workspaces:
            ws = Workspace(self.ctx, self.pool, shape, subgroups=self.subgroups)
            ws.write("state", _ZERO_STATE)
            return ws, True
        return self.workspace(shape), False

    def _loss_pass(self, tris, bg, sigma, targets, loss: str, removal_costs: bool, transient: bool = False,
                   weights=None, backward: bool = True, records=None):
        """bin -> forward (+ loss) -> backward -> reduce in one submission: losses (B,) and the
        per-slot sums (B, T + 1, 10) -- gradients -- or with ``removal_costs`` the costs alone
        (B, T) (``backward`` False: the losses alone, and None). ``weights`` (B, H, W): what the focus variant
        multiplies each pixel's loss term by. ``records``: (device buffer, T, which) scene records to
        copy in on the device instead of ``tris`` and ``bg`` (None) -- scene i is record which[i], or
        record i where ``which`` is None -- with ``sigma`` (one per scene) written over theirs."""
        enc = self.device.create_command_encoder()
        ws, transient, held, B, T = self._prepare_loss_pass(enc, tris, bg, sigma, targets, loss, removal_costs,
                                                            transient, weights, records)
        try:
            with self.timer.call():
                self._encode_loss_passes(enc, ws, backward, removal_costs)
                if not backward:
                    l_staging, _ = ws.copy_out(enc, "ring", B * 4)
                    self.timer.resolve(enc)
                    losses = self._submit_and_read(enc, [(l_staging, B * 4)], "events")[0]
                    return losses.astype(np.float64), None
                gsize = B * T * 4 if removal_costs else B * (T + 1) * 10 * 4
                g_staging, _ = ws.copy_out(enc, "costs" if removal_costs else "grad", gsize)
                l_staging, _ = ws.copy_out(enc, "ring", B * 4)
                self.timer.resolve(enc)
                grads, losses = self._submit_and_read(enc, [(g_staging, gsize), (l_staging, B * 4)], "sums")
                if removal_costs:
                    return losses.astype(np.float64), grads.reshape(B, T).astype(np.float64)
                return losses.astype(np.float64), grads.reshape(B, T + 1, 10).astype(np.float64)
        finally:
            for buf in held:
                self.pool.release(buf)
            if transient:
                ws.release()

    def encode_removal_costs_records(self, enc, records, n_tris: int, sigma, targets, weights=None):
        """:meth:`removal_costs_records`' uploads and passes into the command encoder ``enc`` (a fit
        loop's chunk, untimed): returns (the device buffer holding the (B, T) float32 costs, a
        function to call once ``enc``'s submission has run -- it gives back what the passes held)."""
        sigma = np.asarray(sigma, dtype=np.float64).reshape(-1)
        ws, _, held, _, _ = self._prepare_loss_pass(enc, None, None, sigma, targets, "mse", True, False, weights,
                                                    (records, n_tris, None))
        self._encode_loss_passes(enc, ws, True, True, timed=False)

        def done():
            for buf in held:
                self.pool.release(buf)

        return ws.buffers["costs"], done

    def _prepare_loss_pass(self, enc, tris, bg, sigma, targets, loss: str, removal_costs: bool, transient: bool,
                           weights, records):
        """A loss pass's workspace, its uploads, and (``records``) the copies of the records into
        it encoded into ``enc``: (workspace, transient, pooled buffers held until the submission
        has run, B, T)."""
        if records is None:
            tris, bg, sigma = _check_batch(tris, bg, sigma)
            B, T = tris.shape[:2]
        else:
            B, T = len(sigma), records[1]
        targets = np.asarray(targets, dtype=np.float32)
        if targets.ndim != 4 or targets.shape[0] != B or targets.shape[3] != 3:
            raise BatchError(f"targets must be (B={B}, H, W, 3), got {targets.shape}")
        H, W = targets.shape[1:3]
        shape = Shape(B, W, H, T, self.segmented, self.pixels_per_thread, weights is not None)
        with self.host.phase("alloc"):
            ws, transient = self._workspace_for(shape, transient)
        held = []  # pooled buffers the call holds, given back however it ends (with a transient workspace)
        try:
            with self.host.phase("pack"):
                packed = SCENE.pack(tris, bg, sigma) if records is None else None
                tgt = np.ascontiguousarray(targets)
            with self.host.phase("upload"):
                self.counters.upload_bytes += ws.set_frame(loss, removal_costs) + ws.write_target(tgt)
                if records is None:
                    self.counters.upload_bytes += ws.write("scene", packed)
                else:  # the records, then each image's sigma over theirs -- copied from a staging buffer
                    # in the same command stream (a write_buffer to the scene would land before the copy)
                    stride, slot = SCENE.stride(T), SCENE.at("sigma", T)
                    sigmas = self.pool.acquire(STORAGE | COPY_DST | COPY_SRC, max(16, B * 4), "record-sigmas")
                    held.append(sigmas)
                    self.device.queue.write_buffer(sigmas, 0, np.asarray(sigma, np.float32))
                    self.counters.upload_bytes += B * 4
                    source, _, which = records
                    if which is None:
                        enc.copy_buffer_to_buffer(source, 0, ws.buffers["scene"], 0, B * stride * 4)
                    else:
                        for b, r in enumerate(which):
                            enc.copy_buffer_to_buffer(source, r * stride * 4, ws.buffers["scene"], b * stride * 4, stride * 4)
                    for b in range(B):
                        enc.copy_buffer_to_buffer(sigmas, b * 4, ws.buffers["scene"], (b * stride + slot) * 4, 4)
                if weights is not None:
                    self.counters.upload_bytes += ws.write("weights", np.ascontiguousarray(weights, dtype=np.float32))
        except BaseException:
            for buf in held:
                self.pool.release(buf)
            if transient:
                ws.release()
            raise
        return ws, transient, held, B, T

    def _encode_loss_passes(self, enc, ws, backward: bool, removal_costs: bool, timed: bool = True) -> None:
        """:meth:`_encode_loss_dispatches` as one compute pass of its own."""
        cpass = enc.begin_compute_pass()
        self._encode_loss_dispatches(cpass, ws, backward, removal_costs, timed)
        cpass.end()

    def _encode_loss_dispatches(self, cpass, ws, backward: bool, removal_costs: bool, timed: bool) -> None:
        """[bin ->] forward (+ binning, loss) -> the loss's sum, or the backward and the reduction (the
        loss's sum in its first workgroup) [-> the removal costs], into the compute pass ``cpass``
        (binning's passes: the shape's path, workspace.BIN_PATHS; the forward and the backward one
        dispatch where Shape.fuses_loss_pass, as a fit's iteration)."""
        if not backward:
            ws.encode_binned_forward(cpass, self.timer.span, timed)
            with self.timer.span(cpass, "loss", timed):
                ws.encode_loss(cpass)
        else:
            if ws.shape.fuses_loss_pass:
                ws.encode_fused_forward_backward(cpass, self.timer.span, timed, costs=removal_costs)
            else:
                ws.encode_binned_forward(cpass, self.timer.span, timed)
                with self.timer.span(cpass, "backward", timed):
                    ws.encode_backward(cpass, removal_costs)
            with self.timer.span(cpass, "reduce", timed):
                ws.encode_reduce(cpass)
            if removal_costs:
                ws.encode_costs(cpass)

    def _submit_and_read(self, encoder, reads, kind: str):
        with self.host.phase("submit"):
            self.device.queue.submit([encoder.finish()])
            self.counters.submissions += 1
        with self.host.phase("readback"):
            out = [Workspace.read(buf, size) for buf, size in reads]
            self.counters.read(kind, sum(size for _, size in reads))
            self.timer.collect()
        return out

    def forward_backward_timed(self, tris, bg, sigma, targets, repeats: int, loss: str = "mse",
                               backward: bool = True, naive: bool = False) -> list[float]:
        """For benchmarks: encode ``repeats`` evaluations in one submission; wall ms per call
        (``naive``: the baseline forward kernel, forward only)."""
        tris, bg, sigma = _check_batch(tris, bg, sigma)
        B, T = tris.shape[:2]
        H, W = np.asarray(targets).shape[1:3]
        ws = self.workspace(Shape(B, W, H, T, self.segmented, self.pixels_per_thread))
        ws.set_frame(loss if backward else None)
        ws.write("scene", SCENE.pack(tris, bg, sigma))
        ws.write("target", np.ascontiguousarray(targets, dtype=np.float32))
        enc = self.device.create_command_encoder()
        cpass = enc.begin_compute_pass()
        for _ in range(repeats):
            if naive:
                ws.encode_naive_forward(cpass)
                continue
            if not backward:
                ws.encode_render(cpass)
                continue
            self._encode_loss_dispatches(cpass, ws, True, False, timed=False)
        cpass.end()
        staging, _ = ws.copy_out(enc, "ring", B * 4)
        t0 = time.perf_counter()
        self.device.queue.submit([enc.finish()])
        Workspace.read(staging, B * 4)
        return (time.perf_counter() - t0) * 1e3 / repeats


def _check_batch(tris, bg, sigma):
    tris = np.asarray(tris, dtype=np.float32)
    if tris.ndim != 3 or tris.shape[2] != 10:
        raise BatchError(f"triangles must be (B, T, 10), got {tris.shape}")
    B = tris.shape[0]
    bg = np.asarray(bg, dtype=np.float32).reshape(B, 3)
    sigma = np.asarray(sigma, dtype=np.float32).reshape(B)
    return tris, bg, sigma

