"""The device-resident fit loop: forward -> loss -> backward -> reduce + Adam, all GPU passes.

Each chunk of up to ``chunk`` iterations is encoded as compute passes of 3 dispatches an iteration:
    forward (+ binning its tile, the iteration counter and learning-rate scale, per-pixel loss)
    -> backward -> adam (the loss into the ring, fused fixed-order gradient reduction + Adam +
    materialised scene, the next iteration's sigma),
or 4-5 where binning has passes of its own before the forward (workspace.BIN_PATHS),
in one submission, or several for a long chunk (``first_submission`` iterations, then at least
twice as many each time, more where the GPU takes longer for an iteration than the host: the GPU
runs each part while the next is encoded; ``submission_sizes``).
Per-iteration losses land in a device ring buffer that is read back once per chunk, in one mapped
buffer with whatever else the chunk brings back; no image or gradient leaves the device during a
fit unless an event asks for them. The first iteration of each chunk is timed per pass with
timestamp queries (where the adapter has them).

Batches: ``target`` may be one image (H, W, 3) or a stack (B, H, W, 3) of equal-size images with
``raw`` (B, T*10 + 3) -- every kernel already indexes per image (scene records, parameters and
Adam moments at ``b * n_params``, loss ring at ``b * ring_len``), so B images step in lockstep in
the same dispatches, sharing the iteration counter, schedules and learning rates. With a stack,
``run`` returns losses (n, B), ``get_state`` arrays (B, n_params) and ``current_values``
triangles (B, T, 10) and backgrounds (B, 3); a single image keeps the 1-D shapes. A non-finite
loss in any image rolls the whole batch back (the buffers are snapshotted whole).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
import wgpu

from .. import focus
from ..errors import NumericalFault
from ..fitloop import FRESH_ROW, FitSettings, Schedule, values_from_raw
from .backend import GpuBackend
from .device import as_device_lost
from .encode import Recorder, Repeats, per_image, submission_sizes
from .events import DeviceRows
from .layouts import OPTIM, SCENE, SCHEDULE, STATE
from .readback import read_ranges
from .workspace import COPY_DST, COPY_SRC, MAP_READ, STORAGE, UNIFORM, Shape, Workspace, path_entries, reduce_groups

#: encode the next chunk's first part while the GPU runs a chunk's last (:meth:`GpuFitLoop._encode_ahead`)
ENCODE_AHEAD = True
#: a chunk's next part is at most this share of (the GPU's time for an iteration / the host's) times
#: the part the GPU runs meanwhile: at the ratio itself the host finishes encoding just as the GPU
#: runs dry, and any jitter (a loop's first chunks, a busy host) idles it (docs/PERFORMANCE.md,
#: "Where a 1 s fit's GPU idles")
PART_SLACK = 0.5

RING = 256  # loss ring entries; a submission never encodes more iterations than this


#: the fit loop's buffers that only the host writes (uniforms and read-only storage): an upload of
#: the bytes one already holds is skipped
HOST_WRITTEN = frozenset(("sched", "opt", "sigma_end", "locked"))


#: the kernels a fit loop uses whatever its shape: the render (growth, respawn, sigma probes), the
#: loss-and-gradient call's (pruning's removal costs: the loss sum, the gradient reduction; its
#: backward: fit_kernels), the events on the device's (placement, respawn flags, the reordering)
FIT_KERNELS = (("adam.wgsl", "main"), ("render.wgsl", "main"),
               ("loss_reduce.wgsl", "main"), ("reduce.wgsl", "reduce_grad"), ("costs.wgsl", "main"),
               ("events.wgsl", "error_tiles"), ("events.wgsl", "place_new"), ("events.wgsl", "placed_rows"),
               ("respawn_flags.wgsl", "main"), ("permute.wgsl", "main"))


def fit_kernels(shape: Shape) -> tuple[tuple[str, str, bool], ...]:
    """Every (kernel, entry, costs) a fit loop of ``shape`` or a pass of its shape uses (``shape.fit``
    False: the passes' -- a removal-cost, render or probe call of another batch or size; ``costs``:
    the removal-cost pass's variant, shaders.costs_by_variant)."""
    own = tuple((kernel, entry, False) for kernel, entry in path_entries(shape))
    if not shape.fit:
        return own
    kernels = FIT_KERNELS if not shape.renders_in_forward else \
        tuple(k for k in FIT_KERNELS if k != ("render.wgsl", "main"))  # (its renders walk the forward: own)
    # pruning's removal costs: a loss pass of the loop's size, outside the fit (its own Shape)
    costs = ("forward_backward.wgsl", "main") if replace(shape, fit=False).fuses_loss_pass else ("backward.wgsl", "main")
    # the iteration's backward: fused with its forward, or a dispatch of its own
    backward = ("forward_backward.wgsl", "fit_main", False) if shape.fuses_backward else ("backward.wgsl", "main", False)
    return own + (backward, (*costs, True)) + tuple((kernel, entry, False) for kernel, entry in kernels)


@dataclass(frozen=True)
class ReadyPart:
    """A chunk's first part encoded ahead (:meth:`GpuFitLoop._encode_ahead`): ``iterations`` of them
    from snapshot ``slot``, copying its timestamps into the readback buffer ``out``. Its encoder is
    finished only when a chunk takes it: a finished command buffer released unsubmitted leaks its
    recorded commands in wgpu-native 29 (~1.5 KiB a dispatch on lavapipe, ~3.9 on NVIDIA's driver),
    an open encoder does not (tests/test_gpu_leaks.py), and parts are dropped at every rollback,
    count change and loop release."""
    encoder: object      # its command encoder, every pass ended, not finished
    iterations: int
    slot: int
    out: object          # the readback buffer it copies into
    ts_bytes: int        # the bytes of timestamps it brings back
    spans: object        # its timer spans (GpuTimer.detach), attached when a chunk takes it

    def fits(self, iterations: int, slot: int, out) -> bool:
        return (self.iterations, self.slot) == (iterations, slot) and self.out is out


class GpuFitLoop:
    def __init__(self, backend: GpuBackend, target: np.ndarray, raw: np.ndarray, n_tris: int,
                 settings: FitSettings, schedule: Schedule, iteration: int = 0, weights: np.ndarray | None = None,
                 ahead=()):
        """``weights``: focus maps, (H, W) or (B, H, W) like ``target``: the loss is their
        weighted mean (render/focus.py; the kernels' focus variant). ``ahead``: the other shapes
        the fit will use, (batch, height, width, triangles, fit) each -- later loops of other
        counts or sizes, its passes' batches -- whose pipelines are built with this loop's."""
        self.backend = backend
        self.device = backend.device
        self.settings = settings
        self.n_tris = n_tris
        target = np.asarray(target)
        self.batched = target.ndim == 4
        targets = target if self.batched else target[None]
        B, H, W = targets.shape[:3]
        self.batch = B
        self.target_shape = target.shape
        self.shape = Shape(B, W, H, n_tris, backend.segmented, backend.pixels_per_thread, weights is not None, fit=True)
        pool = backend.pool
        # the iterations cull at the fit's budget (FitSettings.cull_tolerance), looser than a render's,
        # and divide in the backward down to its own 1 - alpha (recompute_below)
        self.ws = Workspace(backend.ctx, pool, self.shape, ring_len=RING, subgroups=backend.subgroups,
                            cull_tolerance=settings.cull_tolerance, loss_stop=settings.stop_transmittance,
                            recompute_below=settings.recompute_below)
        n_params = n_tris * 10 + 3
        self.extra = {
            "params": pool.acquire(STORAGE | COPY_DST | COPY_SRC, B * n_params * 4, "params"),
            "moments": pool.acquire(STORAGE | COPY_DST | COPY_SRC, B * n_params * 8, "moments"),
            "sched": pool.acquire(UNIFORM | COPY_DST, SCHEDULE.size, "sched"),
            "opt": pool.acquire(UNIFORM | COPY_DST, OPTIM.size, "opt"),
            "sigma_end": pool.acquire(STORAGE | COPY_DST, max(16, B * 4), "sigma_end"),
            "locked": pool.acquire(STORAGE | COPY_DST, max(16, B * n_tris * 4), "locked"),
            "anchor": pool.acquire(STORAGE | COPY_DST, max(16, B * n_tris * 80), "anchor"),  # set_anchor
        }
        self._anchored = None  # the anchor buffer holds an anchor (None: a pooled buffer's old bytes)
        self._written: dict[str, bytes] = {}  # what the HOST_WRITTEN buffers hold
        self._packed: dict[str, tuple] = {}  # (the values, their bytes) last packed for sched and opt
        self.snaps = [{k: pool.acquire(STORAGE | COPY_DST | COPY_SRC, n * 4, f"snap-{k}")
                       for k, n in (("params", B * n_params), ("moments", 2 * B * n_params))} for _ in range(2)]
        # what a chunk brings back, in one buffer mapped once: the loss ring, the first iteration's
        # timestamps and, when an event follows, the parameters, moments and last image (each map
        # is a round trip through the driver, while the GPU waits for the next chunk)
        self._out_size = {"ring": B * RING * 4, "timestamps": backend.timer.capacity * 8,
                          "params": B * n_params * 4, "moments": B * n_params * 8,
                          "image": B * H * W * 12, "flags": B * n_tris * 4,
                          "sums": 0,  # (sized at the first run that brings sums: the placement's frame)
                          "costs": B * n_tris * 4, "records": B * self.shape.scene_stride * 4}
        self._out = None
        self._ready = None  # the next chunk's first part, encoded ahead: _encode_ahead
        self._lay_out()
        self._dispatches = None
        self._gpu_ms_per_it = self._host_ms_per_it = 0.0  # (measured by each chunk: _part_growth)
        self._image_iter = None  # the iteration whose forward the image buffer holds (None: stale)
        self._read_flags = None   # (iteration, (alpha, width, height), flags) from the last run's end
        self._read_sums = None    # (iteration, placement, sums (B, tiles), image) from the last run's end
        self._read_costs = None   # (iteration, targets, weights, removal costs (B, T)) from the last run's end
        self._read_records = None  # (iteration, scene records (B, stride)) from the last run's end
        self._flags_pass = None   # the respawn rule's (args, flags, bind group, args written), made once
        self._gather_bufs = None  # a gather's (source, fresh rows, old count) buffers and permute's copies, made once
        self._gather_groups: dict = {}  # the gather's bind group for each set of old buffers
        backend.counters.upload_bytes += self.ws.set_frame(settings.loss) + self.ws.write(
            "target", np.ascontiguousarray(targets, dtype=np.float32))
        if weights is not None:
            backend.counters.upload_bytes += self.ws.write("weights", focus.scaled(np.reshape(weights, (B, H, W))))
        self._locks: list[tuple[np.ndarray, np.ndarray]] = []
        self.set_locked([np.zeros(0, int)] * B, [np.zeros((0, 10))] * B, records=False)
        zeros = np.zeros((B, n_params))
        self.reset(None if raw is None else per_image(raw, B, n_params), zeros, zeros, iteration, schedule, settings)
        # Build every pipeline a fit uses now, not inside its steps: this loop's (fit_kernels), and
        # those of the shapes ``ahead`` -- the working size after a half-size stage, an over-grown
        # count on another binning path, the probes' batch. A driver compiling shaders into a cold
        # cache would spend a time-limited fit's time there (a process's first fit overran 1 s by
        # ~0.2 s when the iteration's pipelines were built inside it; a 512 px fit's working-size
        # pipelines took 0.5 s at the half-size stage's end). Compiled several at once.
        kernels = [(kernel, entry, None, costs) for kernel, entry, costs in fit_kernels(self.shape)]
        for b, h, w, t, fit in ahead:
            shape = Shape(b, w, h, t, backend.segmented, backend.pixels_per_thread, weights is not None, fit=fit)
            kernels += [(kernel, entry, shape.scene_uniform, costs) for kernel, entry, costs in fit_kernels(shape)]
        self.ws.build_pipelines(kernels)
        self._iteration_dispatches()

    # ------------------------------------------------------------------ state
    def _write_extra(self, name, data) -> int:
        """Upload ``data`` to the extra buffer ``name``; returns the bytes uploaded -- none where
        the buffer is one only the host writes (HOST_WRITTEN) and holds these bytes already (a
        count change resets a kept loop with the schedule and rates it had)."""
        raw = data if isinstance(data, bytes) else memoryview(np.ascontiguousarray(data)).cast("B")
        if name in HOST_WRITTEN:
            if self._written.get(name) == raw:
                return 0
            self._written[name] = bytes(raw)
        self.device.queue.write_buffer(self.extra[name], 0, raw)
        return len(raw)

    def reset(self, raw, m, v, iteration: int, schedule: Schedule, settings: FitSettings) -> None:
        """Start over from this state at ``iteration``: what a new loop of the same shape would be
        (the fitter keeps loops per triangle count, so a count it returns to costs no new buffers,
        bind groups or pipelines). ``raw`` None: no state yet -- :meth:`take` gathers it."""
        self.iter = iteration
        self.schedule = schedule
        self.set_optim(settings)
        self.sigmas = schedule.current_sigmas(iteration, self.batch)
        lr0 = schedule.at(max(iteration, 1))[1]
        up = self.ws.write("state", STATE.pack(iter=iteration, sigma=self.sigmas[0], lr_scale=lr0))
        self.backend.counters.upload_bytes += up + self._write_schedule(schedule)
        if raw is not None:
            self.set_state(raw, m, v)  # (with the next iteration's sigma in the scene records)
        else:  # the state comes from take(), on the device; the records need this iteration's sigma
            self._write_next_sigma()
            self._forget_reads()
        # Two device-side snapshots of (params, moments), taken alternately at the start of each
        # submission, so a NaN can be rolled back without any per-iteration readback: the newest
        # one whose chunk began with a finite loss is good. Slot 1 starts as this state.
        self.snap_iter = [iteration, iteration]
        self.snap_turn = 0  # (a first part encoded ahead from slot 0 stays good: encode_ahead)
        if raw is None and self._anchored is not None:
            return  # (take() snapshots the state it gathers: no submission here)
        enc = self.device.create_command_encoder()
        if raw is not None:
            self._encode_snapshot(enc, 1)
        if self._anchored is None:  # a new loop: no anchor (a device-side clear, no upload)
            enc.clear_buffer(self.extra["anchor"], 0, self.extra["anchor"].size)
            self._anchored = False
        self.device.queue.submit([enc.finish()])

    @property
    def sigma(self) -> float:
        """The first image's sigma at the current iteration."""
        return float(self.sigmas[0])

    def set_schedule(self, schedule: Schedule) -> None:
        self.schedule = schedule
        # the current sigma under the new schedule, as reset() and a resumed loop have it (a sigma
        # probe's new end moves it: a scene, or an over-grown scene's removal costs, taken before
        # the next run must not use the old one)
        self.sigmas = schedule.current_sigmas(self.iter, self.batch)
        self.backend.counters.upload_bytes += self._write_schedule(schedule)
        self._write_next_sigma()

    def _packed_once(self, name: str, key: tuple, pack) -> bytes:
        """``pack()``'s bytes for the host-written buffer ``name``, packed again only when ``key``
        (the values they are made of) changed: a pruning cycle's count changes reset kept loops
        with the schedule and rates they had, hundreds of times in a long fit."""
        got = self._packed.get(name)
        if got is None or got[0] != key:
            got = self._packed[name] = (key, pack())
        return got[1]

    def _write_schedule(self, schedule: Schedule) -> int:
        """The schedule's uniform and each image's final sigma; returns the bytes uploaded."""
        key = (schedule.sigma_start, schedule.sigma_end, schedule.sigma_iters, schedule.lr_decay_iters,
               schedule.lr_final, schedule.iter_offset, schedule.lr_offset, schedule.lr_start,
               None if schedule.sigma_ends is None else tuple(map(float, schedule.sigma_ends)))
        sched = self._packed_once("sched", key, lambda: SCHEDULE.pack(schedule.pack()))
        ends = self._packed_once("sigma_end", key, lambda: schedule.ends(self.batch).astype(np.float32).tobytes())
        return self._write_extra("sched", sched) + self._write_extra("sigma_end", ends)

    def _next_sigma(self) -> np.ndarray:
        return self.schedule.sigmas(self.iter + 1, self.batch)

    def _write_next_sigma(self) -> None:
        """The next iteration's sigma into every scene record: binning, the forward and the
        backward read it there; each iteration's Adam dispatch writes the one after (adam.wgsl),
        so the host does this only where it starts the loop or changes the schedule."""
        sigma = self._next_sigma().astype(np.float32)
        stride, slot = self.shape.scene_stride, SCENE.at("sigma", self.n_tris)
        for b in range(self.batch):
            self.backend.counters.upload_bytes += self.ws.write("scene", sigma[b:b + 1], offset=(b * stride + slot) * 4)

    def set_optim(self, settings: FitSettings) -> None:
        """New learning rates / Adam constants from the next iteration on."""
        self.settings = settings
        rates = dict(lr_vertex=settings.lr_vertex, lr_colour=settings.lr_colour, lr_alpha=settings.lr_alpha,
                     lr_background=settings.lr_background, beta1=settings.beta1, beta2=settings.beta2,
                     eps=settings.adam_eps, small_px=settings.small_triangle_px)
        packed = self._packed_once("opt", tuple(rates.values()), lambda: OPTIM.pack(rates))
        self.backend.counters.upload_bytes += self._write_extra("opt", packed)

    def _encode_snapshot(self, enc, slot: int, restore: bool = False) -> None:
        for name in ("params", "moments"):
            live, snap = self.extra[name], self.snaps[slot][name]
            src, dst = (snap, live) if restore else (live, snap)
            enc.copy_buffer_to_buffer(src, 0, dst, 0, live.size)

    def _rollback(self, losses: np.ndarray, slot: int) -> int:
        """Restore the newest verified snapshot; returns its iteration."""
        good = slot if np.all(np.isfinite(losses[0])) else slot ^ 1
        enc = self.device.create_command_encoder()
        self._encode_snapshot(enc, good, restore=True)
        self.device.queue.submit([enc.finish()])
        self.iter = self.snap_iter[good]
        raw, m, v = self.get_state()
        at, data = STATE.pack_at(iter=self.iter)  # (the next iteration's first dispatch recomputes the rest)
        self.ws.write("state", data, offset=at)
        self.set_state(raw, m, v)  # re-materialises the scene the next forward reads
        self.snap_turn = good ^ 1  # keep the good snapshot, overwrite the other
        self._ready = None
        return self.iter

    def inject_fault(self) -> None:
        """Testing aid: put a NaN into the first vertex on the device, as a diverged step would."""
        self._read_state = self._read_image = None
        self._drop_brought()
        nan = np.array([np.nan], dtype=np.float32)
        self.device.queue.write_buffer(self.extra["params"], 0, nan)
        self.device.queue.write_buffer(self.ws.buffers["scene"], 0, nan)

    def set_state(self, raw: np.ndarray, m: np.ndarray, v: np.ndarray, images=None) -> None:
        """Raw parameters and Adam moments: (n_params,) for one image, (B, n_params) for a stack.
        ``images``: only these images changed -- the others keep their device values to the bit
        (the scene record the device materialised is not the host's rounding of it)."""
        B, n = self.batch, self.n_tris * 10 + 3
        raw, m, v = (per_image(a, B, n) for a in (raw, m, v))
        raw = raw.astype(np.float32)
        records = self._records_of(raw)
        mv = np.stack([m, v], axis=-1).astype(np.float32)  # moments[2 * (b * n + j) + {0, 1}]
        up = 0
        if images is None:
            up += self._write_extra("params", raw.ravel()) + self._write_extra("moments", mv.ravel())
            up += self.ws.write("scene", records)
        else:
            queue, stride = self.device.queue, self.shape.scene_stride
            for b in images:
                queue.write_buffer(self.extra["params"], b * n * 4, np.ascontiguousarray(raw[b]))
                queue.write_buffer(self.extra["moments"], b * n * 8, np.ascontiguousarray(mv[b]))
                up += n * 12 + self.ws.write("scene", np.ascontiguousarray(records[b]), offset=b * stride * 4)
        self.backend.counters.upload_bytes += up
        self._forget_reads()

    def _forget_reads(self) -> None:
        """The device's parameters, moments and records changed outside an iteration: what the
        last chunk brought back (state, image, respawn flags, error sums) and the image buffer are
        stale."""
        self._read_state = self._read_image = self._image_iter = self._read_records = None
        self._drop_brought()

    def _drop_brought(self) -> None:
        """What the last chunk brought back for the event after it -- respawn flags, error sums,
        removal costs -- is stale: the records changed (or a new chunk starts)."""
        self._read_flags = self._read_sums = self._read_costs = None

    def _records_of(self, raw: np.ndarray) -> np.ndarray:
        """(B, stride) float32 scene records of float32 raw parameters (B, n_params) as
        ``set_state`` writes them: the host's sigmoid, the locked triangles at their values."""
        vals = [values_from_raw(r, self.n_tris) for r in raw]
        records = SCENE.pack(np.stack([t for t, _ in vals]), np.stack([b for _, b in vals]), self._next_sigma())
        self._hold_locked(records)
        return records

    def values_as_set(self, raw):
        """Triangles (B, T, 10) and backgrounds (B, 3) that :meth:`current_values` reports right
        after ``set_state(raw)`` -- the host's float32 rounding of the sigmoid, where a step leaves
        the device's own (an ulp apart) -- without setting anything."""
        B, n = self.batch, self.n_tris * 10 + 3
        records = self._records_of(per_image(raw, B, n).astype(np.float32))
        tris, bg, _ = SCENE.unpack(records.astype(np.float64), self.n_tris)
        return tris, bg

    def set_locked(self, locked, values, records: bool = True) -> None:
        """Lock triangles ``locked[b]`` (indices) of each image b at ``values[b]`` (k, 10): from the
        next iteration on adam.wgsl leaves their parameters, moments and scene records alone, and
        the records hold these values (what they render; a raw parameter's sigmoid on the host
        would be an ulp off) -- written now with ``records``, else by the next ``set_state``.
        Empty lists unlock every triangle."""
        B, T = self.batch, self.n_tris
        if len(locked) == B and not any(len(i) for i in locked) and len(self._locks) == B and \
                not any(len(i) for i, _ in self._locks):  # none before, none now (every count change asks)
            self._drop_brought()
            return
        self._locks = [(np.asarray(i, dtype=np.int64), np.asarray(v, dtype=np.float64).reshape(-1, 10))
                       for i, v in zip(locked, values)]
        flags = np.zeros((B, T), dtype=np.uint32)
        stride = self.shape.scene_stride
        self._drop_brought()
        up = 0
        for b, (idx, vals) in enumerate(self._locks):
            flags[b, idx] = 1
            for i, row in zip(idx, vals) if records else ():
                up += self.ws.write("scene", np.ascontiguousarray(row, dtype=np.float32), offset=(b * stride + i * 10) * 4)
        self.backend.counters.upload_bytes += up + self._write_extra("locked", flags)

    def set_anchor(self, anchor, weights=None) -> None:
        """Pull the triangles towards ``anchor``, (B, T, 10) values (or (T, 10) for one image),
        with ``weights`` of the same shape (>= 0): from the next iteration on adam.wgsl adds the
        gradient of ``sum(weights (value - anchor)^2)`` to the loss's (reference.anchor_penalty;
        the reported loss stays the loss), except to locked triangles. One upload; nothing is read
        back. None: no anchor (a zero weight leaves a parameter's arithmetic as it was)."""
        B, T = self.batch, self.n_tris
        if anchor is None:
            if self._anchored:
                self.backend.counters.upload_bytes += self._write_extra("anchor", np.zeros(B * T * 20, np.float32))
            self._anchored = False
            return
        pairs = np.stack([np.asarray(anchor, dtype=np.float64).reshape(B, T, 10),
                          np.asarray(weights, dtype=np.float64).reshape(B, T, 10)], axis=-1)
        self.backend.counters.upload_bytes += self._write_extra("anchor", pairs.astype(np.float32))
        self._anchored = True

    def _hold_locked(self, records: np.ndarray) -> None:
        """Put the locked triangles' values into packed scene records (B, stride)."""
        T = self.n_tris
        for b, (idx, vals) in enumerate(self._locks):
            if len(idx):
                records[b, : T * 10].reshape(T, 10)[idx] = vals

    def get_state(self, kind: str = "state"):
        """Raw parameters and Adam moments, (n_params,) each or (B, n_params) for a stack: the copy
        the last ``run(..., read_state=True)`` brought back with its losses when nothing ran or
        changed since (no round trip of its own), else read now (counted as ``kind``)."""
        if self._read_state is not None and self._read_state[0] == self.iter:
            raw, m, v = (a.copy() for a in self._read_state[1:])
        else:
            B, n = self.batch, self.n_tris * 10 + 3
            enc = self.device.create_command_encoder()
            p, _ = self.ws.copy_out(enc, "params", B * n * 4, source=self.extra["params"])
            mo, _ = self.ws.copy_out(enc, "moments", B * n * 8, source=self.extra["moments"])
            self.device.queue.submit([enc.finish()])
            self.backend.counters.submissions += 1
            self.backend.counters.read(kind, B * n * 12)
            raw, m, v = self._parse_state(Workspace.read(p, B * n * 4), Workspace.read(mo, B * n * 8))
        return (raw, m, v) if self.batched else (raw[0], m[0], v[0])

    def last_image(self) -> np.ndarray | None:
        """The render of the last iteration's forward, (H, W, 3) float32 or (B, H, W, 3) for a
        stack, when the last ``run(..., read_image=True)`` brought it back and nothing ran or
        changed since; else None. It shows the parameters before that iteration's Adam step:
        what growth and respawn place new triangles against, without a render of their own."""
        if self._read_image is not None and self._read_image[0] == self.iter:
            return self._read_image[1] if self.batched else self._read_image[1][0]
        return None

    def read_image(self) -> np.ndarray | None:
        """The last forward's image as ``last_image`` has it, read from the device when the
        chunk did not bring it back (a round trip); None when the buffer holds no forward of the
        current state (nothing ran since a reset or a new state)."""
        image = self.last_image()
        if image is not None or self._image_iter != self.iter:
            return image
        B, H, W = self.batch, self.shape.height, self.shape.width
        enc = self.device.create_command_encoder()
        st, size = self.ws.copy_out(enc, "image", B * H * W * 12)
        self.device.queue.submit([enc.finish()])
        self.backend.counters.submissions += 1
        self.backend.counters.read("image", size)
        image = Workspace.read(st, size).reshape(B, H, W, 3)
        self._read_image = (self.iter, image)
        return image if self.batched else image[0]

    def _parse_state(self, params: np.ndarray, moments: np.ndarray):
        """(raw, m, v) float64 (B, n_params) from the float32 params and interleaved moments."""
        B, n = self.batch, self.n_tris * 10 + 3
        raw = params.view(np.float32).astype(np.float64).reshape(B, n)
        mv = moments.view(np.float32).astype(np.float64).reshape(B, n, 2)
        return raw, mv[..., 0].copy(), mv[..., 1].copy()

    def _copy_ring(self, enc, k: int) -> None:
        """Copy the chunk's k losses of each image (ring slots iter+1 .. iter+k modulo RING; image
        b's ring at b * RING) to the readback buffer, image after image in iteration order: the
        chunk reads back its own losses, not the whole ring."""
        ring, base = self.ws.buffers["ring"], self._out_at["ring"]
        first = (self.iter + 1) % RING
        head = min(k, RING - first)
        for b in range(self.batch):
            dst = base + b * k * 4
            enc.copy_buffer_to_buffer(ring, (b * RING + first) * 4, self._out, dst, head * 4)
            if k > head:  # wrapped round to the ring's start
                enc.copy_buffer_to_buffer(ring, b * RING * 4, self._out, dst + head * 4, (k - head) * 4)

    def _read_out(self, names: list[str], ts_bytes: int, ring_bytes: int, state_kind: str) -> dict[str, np.ndarray]:
        """Map the chunk's readback buffer once; each named region's bytes (uint8, copied): the
        ring's first ``ring_bytes`` (the chunk's losses), the state counted as ``state_kind``."""
        sizes = {**self._out_size, "timestamps": ts_bytes, "ring": ring_bytes}
        names = names + (["timestamps"] if ts_bytes else [])
        got = dict(zip(names, read_ranges(self._out, [(self._out_at[name], sizes[name]) for name in names])))
        kinds = {"ring": "losses", "timestamps": "losses", "params": state_kind, "moments": state_kind, "image": "image",
                 "flags": "events", "sums": "events", "costs": "sums", "records": "snapshot"}
        for name in names:
            self.backend.counters.read(kinds[name], sizes[name])
        return got

    def current_values(self):
        """Triangles, background and sigma as the device has them now (one small readback);
        triangles (B, T, 10) and backgrounds (B, 3) for a stack."""
        B = self.batch
        tris, bg, _ = SCENE.unpack(self.records().astype(np.float64), self.n_tris)
        # the record holds the next iteration's sigma (adam.wgsl); the scene is the current one's
        sigma = self.schedule.current_sigmas(self.iter, B).astype(np.float32).astype(np.float64)
        return (tris, bg, sigma) if self.batched else (tris[0], bg[0], float(sigma[0]))

    def records(self) -> np.ndarray:
        """(B, stride) float32: the scene records as the device materialised them from the raw
        parameters (adam.wgsl, in float32: an ulp from the host's rounding of the same values) with
        the next iteration's sigma. A checkpoint keeps them so that a resumed fit goes on to the bit."""
        B, stride = self.batch, self.shape.scene_stride
        size = B * stride * 4
        enc = self.device.create_command_encoder()
        st, _ = self.ws.copy_out(enc, "scene", size)
        self.device.queue.submit([enc.finish()])
        self.backend.counters.submissions += 1
        self.backend.counters.read("records", size)
        return Workspace.read(st, size).reshape(B, stride)

    def brought_records(self) -> np.ndarray | None:
        """(B, stride) float32: the scene records the last ``run(..., read_records=True)`` brought
        back, when nothing ran or changed since; else None."""
        got = self._read_records
        return got[1].copy() if got is not None and got[0] == self.iter else None

    def put_records(self, records) -> None:
        """Write back what :meth:`records` read (after ``set_state`` of the same parameters)."""
        rec = np.ascontiguousarray(records, dtype=np.float32).reshape(self.batch, self.shape.scene_stride)
        self._drop_brought()
        self.backend.counters.upload_bytes += self.ws.write("scene", rec)

    # ------------------------------------------------------------------ events on the device
    def stopped_contributing(self, alpha_min: float, width: int, height: int) -> np.ndarray:
        """(B, T) bool: the respawn rule (render/strategy.py stopped_contributing) on the scene
        records as the device holds them, for a frame of width x height px; 4 bytes a triangle
        come back (shaders/respawn_flags.wgsl) -- with the last chunk's losses when its
        ``run(..., flags=...)`` asked for the same rule and nothing changed since, else now."""
        rule = (float(alpha_min), int(width), int(height))
        if self._read_flags is not None and self._read_flags[:2] == (self.iter, rule):
            return self._read_flags[2]
        B, T = self.batch, self.n_tris
        enc = self.device.create_command_encoder()
        flags = self._encode_flags(enc, rule)
        st, size = self.ws.copy_out(enc, "respawn-flags", B * T * 4, source=flags)
        self.device.queue.submit([enc.finish()])
        self.backend.counters.submissions += 1
        self.backend.counters.read("events", size)
        return Workspace.read(st, size, dtype=np.uint32).reshape(B, T) != 0

    def _encode_flags(self, enc, rule: tuple[float, int, int]):
        """The respawn rule's pass into ``enc``; returns the (B, T) uint32 flags buffer. Its
        buffers and bind group are made at the first check and kept with the loop."""
        if self._flags_pass is None:
            B, T = self.batch, self.n_tris
            pool = self.backend.pool
            args = pool.acquire(STORAGE | COPY_DST, 16, "respawn-args")
            flags = pool.acquire(STORAGE | COPY_SRC, max(16, B * T * 4), "respawn-flags")
            pl = self.ws.pipeline("respawn_flags.wgsl")
            bg = self.device.create_bind_group(layout=pl.get_bind_group_layout(0), entries=[
                {"binding": i, "resource": {"buffer": buf}}
                for i, buf in enumerate((self.ws.buffers["frame"], self.ws.buffers["scene"], args, flags))])
            self._flags_pass = [args, flags, (pl, bg), None]
        args, flags, (pl, bg), written = self._flags_pass
        if written != rule:
            self.device.queue.write_buffer(args, 0, np.array([rule[0], rule[1], rule[2], 0], np.float32))
            self._flags_pass[3] = rule
        cpass = enc.begin_compute_pass()
        cpass.set_pipeline(pl)
        cpass.set_bind_group(0, bg)
        cpass.dispatch_workgroups(-(-self.n_tris // 64), self.batch, 1)
        cpass.end()
        return flags

    def _lay_out(self) -> None:
        """(Re)make the buffer a chunk's readback is mapped from: one region for each of _out_size."""
        self._out_at, end = {}, 0
        for name, size in self._out_size.items():
            self._out_at[name], end = end, end + (size + 7) // 8 * 8
        if self._out is not None:
            self.backend.pool.release(self._out)
        self._ready = None  # (it copies its timestamps into the buffer this replaces)
        self._out = self.backend.pool.acquire(MAP_READ | COPY_DST, end, "read:chunk")

    def _encode_sums(self, enc, placement):
        """The placement's error sums into ``enc``, of what placement places against: this loop's
        last forward image at full size, or (a half-size loop) a full-size render of the records
        encoded here too. Returns (the buffer holding the sums, the image)."""
        if (placement.width, placement.height) == (self.shape.width, self.shape.height):
            image = self.ws.buffers["image"]
        else:
            image = self.backend.encode_render_records(enc, self.ws.buffers["scene"], self.batch, self.n_tris,
                                                       placement.width, placement.height)
        placement.encode_error_tiles(enc, image)
        return placement.buffers["tile_err"], image

    def tile_sums(self, placement):
        """(sums (B, tiles) float32, image buffer): ``placement``'s error sums as the last
        ``run(..., sums=placement)`` brought them back with its losses, and the image they are of
        -- this loop's last forward (:meth:`image_buffer`), or a full-size render of the records
        for a half-size loop; None when that run did not, or the state changed since."""
        got = self._read_sums
        if got is None or got[0] != self.iter or got[1] is not placement:
            return None
        if got[3] is self.ws.buffers["image"] and self._image_iter != self.iter:
            return None
        return got[2], got[3]

    def removal_costs(self, targets, weights) -> np.ndarray | None:
        """(B, T): each triangle's removal cost against ``targets`` (weighted by ``weights``), as
        the last ``run(..., costs=(targets, weights))`` brought them back with its losses; None when
        that run did not, or the records changed since."""
        got = self._read_costs
        if got is None or got[0] != self.iter or got[1] is not targets or got[2] is not weights:
            return None
        return got[3].copy()

    def permute(self, source: np.ndarray, fresh: np.ndarray) -> None:
        """Reorder every image's triangles on the device: new slot t of image b takes old slot
        ``source[b, t]`` (parameters, moments and scene record), or fresh row ``-1 - source[b, t]``
        of ``fresh`` (rows, 20): raw parameters, then the record values they materialise to, with
        zero moments (shaders/permute.wgsl) -- an array, or rows already on the device
        (``DeviceRows``, placement's). Nothing comes back."""
        B, n = self.batch, self.n_tris * 10 + 3
        live = (self.extra["params"], self.extra["moments"], self.ws.buffers["scene"])
        sizes = (B * n * 4, B * n * 8, B * self.shape.scene_stride * 4)
        old = self._gather_buffers()[3:]
        self._gather(old, self.n_tris, source, fresh, copies=list(zip(live, old, sizes)))

    def take(self, other: GpuFitLoop, source: np.ndarray, fresh: np.ndarray) -> None:
        """This loop's state gathered from ``other``'s, a loop of another triangle count over the
        same images (a count change on the device): as :meth:`permute`, with ``source[b, t]``
        indexing ``other``'s triangles; the background comes along, and the rollback snapshot is
        taken of the result. Nothing comes back; call after :meth:`reset` without a state."""
        old = (other.extra["params"], other.extra["moments"], other.ws.buffers["scene"])
        self._gather(old, other.n_tris, source, fresh, snapshot=True)

    def copy_images(self, source) -> None:
        """Image b takes image ``source[b]``'s state on the device: parameters, Adam moments, scene
        records and the last forward's image (a replica selection, render/fitstate.py
        ``select_replicas``). What the last chunk brought back for the event after it -- error
        sums with the image they are of, respawn flags, removal costs -- is taken along, so the
        event sees each image as a copy of its source, as a render of it would (the placement's
        per-pixel errors, which stay on the device, are computed again from the copied image).
        The rollback snapshot is taken of the result. Nothing comes back."""
        source = np.asarray(source, dtype=np.int64).reshape(self.batch)
        moved = [b for b in range(self.batch) if source[b] != b]
        if not moved:
            return
        n, image = self.n_tris * 10 + 3, self.ws.buffers["image"]
        bufs = [(self.extra["params"], n * 4), (self.extra["moments"], n * 8),
                (self.ws.buffers["scene"], self.shape.scene_stride * 4)]
        sums = self._read_sums if self._read_sums is not None and self._read_sums[0] == self.iter else None
        if self._image_iter == self.iter:
            bufs.append((image, self.shape.width * self.shape.height * 12))
        if sums is not None and sums[3] is not image:  # (a half-size loop's full-size render of its records)
            bufs.append((sums[3], sums[1].width * sums[1].height * 12))
        pool, enc = self.backend.pool, self.device.create_command_encoder()
        scratch = []
        for buf, per in bufs:  # (a buffer cannot be copied into itself: whole, through a pooled one)
            tmp = pool.acquire(COPY_DST | COPY_SRC, self.batch * per, "replica-copy")
            scratch.append(tmp)
            enc.copy_buffer_to_buffer(buf, 0, tmp, 0, self.batch * per)
            for b in moved:
                enc.copy_buffer_to_buffer(tmp, int(source[b]) * per, buf, b * per, per)
        if sums is not None:
            sums[1].encode_error_tiles(enc, sums[3])
        self._encode_snapshot(enc, 1)
        self.snap_iter, self.snap_turn = [self.iter, self.iter], 0
        self.device.queue.submit([enc.finish()])
        self.backend.counters.submissions += 1
        for tmp in scratch:
            pool.release(tmp)
        self._read_state = None
        if self._read_image is not None:
            self._read_image = (self._read_image[0], self._read_image[1][source])
        if sums is not None:
            self._read_sums = (*sums[:2], sums[2][source], sums[3])
        if self._read_flags is not None:
            self._read_flags = (*self._read_flags[:2], self._read_flags[2][source])
        if self._read_costs is not None:
            self._read_costs = (*self._read_costs[:3], self._read_costs[3][source])

    def _gather_buffers(self) -> tuple:
        """(source indices, fresh rows, old count; permute's copies of parameters, moments and
        records): made at the first gather and kept with the loop -- a count change is a gather,
        and pruning cycles make them dozens of times a second."""
        if self._gather_bufs is None:
            B, T, n = self.batch, self.n_tris, self.n_tris * 10 + 3
            sizes = [(max(16, B * T * 4), "permute-source"), (B * max(T, 1) * FRESH_ROW * 4, "permute-fresh"),
                     (16, "permute-old-tris"), (B * n * 4, "permute-old"), (B * n * 8, "permute-old"),
                     (B * self.shape.scene_stride * 4, "permute-old")]
            self._gather_bufs = tuple(self.backend.pool.acquire(STORAGE | COPY_DST, size, label)
                                      for size, label in sizes)
        return self._gather_bufs

    def _gather(self, old, old_tris: int, source, fresh, copies=(), snapshot: bool = False) -> None:
        B, T = self.batch, self.n_tris
        source = np.ascontiguousarray(source, dtype=np.int32).reshape(B, T)
        on_device = isinstance(fresh, DeviceRows)  # (placed on the device: copied there, never uploaded)
        if not on_device:
            fresh = np.ascontiguousarray(fresh, dtype=np.float32).reshape(-1, FRESH_ROW)
        if len(fresh) > B * T:
            raise ValueError(f"{len(fresh)} fresh rows for {B} x {T} slots")
        src_buf, fresh_buf, shape_buf = self._gather_buffers()[:3]
        queue = self.device.queue
        queue.write_buffer(src_buf, 0, source)
        queue.write_buffer(shape_buf, 0, np.array([old_tris, 0, 0, 0], np.uint32))
        if len(fresh) and not on_device:
            queue.write_buffer(fresh_buf, 0, fresh)
        self.backend.counters.upload_bytes += source.nbytes + (0 if on_device else fresh.nbytes) + 16
        pl = self.ws.pipeline("permute.wgsl")
        key = tuple(old)  # (a bind group is the buffers it binds: the same ones, the same group)
        bg = self._gather_groups.get(key)
        if bg is None:
            live = (self.extra["params"], self.extra["moments"], self.ws.buffers["scene"])
            bufs = (self.ws.buffers["frame"], *live, *old, src_buf, fresh_buf, shape_buf)
            bg = self.device.create_bind_group(layout=pl.get_bind_group_layout(0), entries=[
                {"binding": i, "resource": {"buffer": buf}} for i, buf in enumerate(bufs)])
            if len(self._gather_groups) >= 8:
                self._gather_groups.clear()
            self._gather_groups[key] = bg
        # (placement's passes, where they wait for this submission, come first: events.DeviceRows)
        enc = fresh.encoder(self.device) if on_device else self.device.create_command_encoder()
        for buf, copy, size in copies:
            enc.copy_buffer_to_buffer(buf, 0, copy, 0, size)
        if on_device and len(fresh):
            enc.copy_buffer_to_buffer(fresh.buffer, 0, fresh_buf, 0, len(fresh) * FRESH_ROW * 4)
        cpass = enc.begin_compute_pass()
        cpass.set_pipeline(pl)
        cpass.set_bind_group(0, bg)
        cpass.dispatch_workgroups(-(-(T * 10 + 3) // 64), B, 1)
        cpass.end()
        if snapshot:
            self._encode_snapshot(enc, 1)
            self.snap_iter, self.snap_turn = [self.iter, self.iter], 0
        queue.submit([enc.finish()])
        self.backend.counters.submissions += 1
        self._forget_reads()

    def render_on_device(self, width: int, height: int):
        """The current scene records rendered at width x height into a device buffer ((B, H, W, 3)
        float32; the backend's render workspace of that shape), nothing read back."""
        return self.backend.render_records_on_device(self.ws.buffers["scene"], self.batch, self.n_tris, width, height)

    def records_buffer(self):
        """The device buffer of the scene records ((B, stride) float32, the next iteration's sigma
        in each: :meth:`records`)."""
        return self.ws.buffers["scene"]

    def image_buffer(self):
        """The device buffer holding the last forward's image of the current state ((B, H, W, 3)
        float32), or None when it holds none (nothing ran since a reset or a new state)."""
        return self.ws.buffers["image"] if self._image_iter == self.iter else None

    def gpu_image(self):
        """(buffer, width, height): the last forward's float32 rgb image, on the device."""
        return self.ws.buffers["image"], self.shape.width, self.shape.height

    def gpu_phase_samples(self) -> dict[str, list[float]]:
        return dict(self.backend.timer.samples)

    def release(self) -> None:
        self._ready = None
        self.ws.release()
        held = list(self.extra.values()) + [b for snap in self.snaps for b in snap.values()] + [self._out]
        for buf in held + (self._flags_pass[:2] if self._flags_pass else []) + list(self._gather_bufs or ()):
            self.backend.pool.release(buf)
        self._flags_pass = self._gather_bufs = None
        self._gather_groups = {}
        self.extra = {}
        self.snaps = []

    # ------------------------------------------------------------------ the loop
    def _encode_first(self, enc, slot: int, its: int, fast: Repeats) -> int:
        """A chunk's first part into ``enc``: the snapshot into ``slot``, the timed iteration and
        ``its - 1`` more; returns the bytes of timestamps it brings back."""
        self._encode_snapshot(enc, slot)
        cpass = enc.begin_compute_pass()
        self._encode_iteration(cpass, timed=True)
        fast.encode(cpass, its - 1)
        cpass.end()
        return self.backend.timer.resolve(enc, self._out, self._out_at["timestamps"])

    def _encode_ahead(self, slot: int, its: int, fast: Repeats) -> None:
        """Encode the next chunk's first part (``its`` iterations, its snapshot into
        ``slot``) while the GPU runs this chunk's last: after a chunk the GPU idles until the next
        one is submitted, and encoding this part is one of the host's steps in that turn that
        needs nothing from it. Its commands are what the next chunk would encode -- the buffers and bind
        groups are the loop's for its life; what the host writes between chunks lands before it
        runs, as it is submitted after -- so it changes no result (tests/test_run.py). The next
        chunk of this loop takes it when it starts from ``slot`` with at least ``its`` iterations
        (:meth:`_take_ready`); a rollback or a new readback layout drops it. Its timestamps are a
        set of their own until then (GpuTimer.detach)."""
        timer = self.backend.timer
        held = timer.detach()  # (the running chunk's: collected after its readback)
        try:
            enc = self.device.create_command_encoder()
            ts_bytes = self._encode_first(enc, slot, its, fast)
            self._ready = ReadyPart(enc, its, slot, self._out, ts_bytes, timer.detach())
        finally:
            timer.attach(held)

    def encode_ahead(self) -> bool:
        """For a loop the fit has left and may return to (pruning cycles revisit a few counts):
        its next first part encoded now, while another loop's chunk runs, from snapshot slot 0,
        where every return starts (:meth:`reset`, :meth:`take`). Returns whether it encoded one."""
        first = self.settings.first_submission
        if not ENCODE_AHEAD or first <= 0 or self._ready_fits(0, first):
            return False
        self._encode_ahead(0, first, self._iteration_dispatches())  # (one from another slot would go unused)
        return True

    def _take_ready(self, k: int, slot: int, first: int):
        """(command buffer, timestamp bytes) of the first part encoded ahead, where this chunk of
        ``k`` iterations starting from snapshot ``slot``, its first part ``first`` iterations, can
        begin with it; else None (dropped)."""
        fits = self._ready_fits(slot, first) and k >= first
        ready, self._ready = self._ready, None
        if not fits:
            return None
        self.backend.timer.attach(ready.spans)
        return ready.encoder.finish(), ready.ts_bytes

    def _ready_fits(self, slot: int, first: int) -> bool:
        """Whether the part encoded ahead is a first part of ``first`` iterations from snapshot
        ``slot`` that copies its timestamps into the current readback buffer."""
        return self._ready is not None and self._ready.fits(first, slot, self._out)

    def _part_growth(self) -> float:
        """How much longer each submission of a chunk may be than the one before: PART_SLACK
        times the GPU's time for an iteration (its timed passes) over the host's (encoding and
        finishing), as last measured -- 2 until both are known (render/gpu/encode.py
        submission_sizes). Timing moves only where the submissions split a chunk, never what
        they encode."""
        gpu, host = self._gpu_ms_per_it, self._host_ms_per_it
        return min(max(PART_SLACK * gpu / host, 2.0), 64.0) if gpu > 0 and host > 0 else 2.0

    def _iteration_dispatches(self) -> Repeats:
        """One iteration's (pipeline, bind group, workgroups), resolved once: untimed iterations
        are encoded from this list with three calls per dispatch and no other Python work."""
        if self._dispatches is None:
            recorder = Recorder()
            self._encode_iteration(recorder, timed=False)
            self._dispatches = Repeats(recorder.calls)
        return self._dispatches

    def _encode_iteration(self, cpass, timed: bool) -> None:
        ws, span = self.ws, self.backend.timer.span
        B = self.shape.batch
        if self.shape.fuses_backward:  # (its one dispatch starts the iteration)
            ws.encode_fused_forward_backward(cpass, span, timed, self.extra)
        else:
            ws.encode_binned_forward(cpass, span, timed, self.extra)  # (its first dispatch starts the iteration)
            with span(cpass, "backward", timed):
                ws.encode_backward(cpass)
        with span(cpass, "reduce+adam", timed):  # (+ the loss into the ring: loss_record.wgsl)
            ws.encode_custom(cpass, "adam.wgsl",
                             ["frame", "opt", "partial", "tile_mask", "state", "params", "moments", "scene",
                              "loss_partial", "ring", "sched", "sigma_end", "locked", "anchor", "tri_tiles"],
                             (reduce_groups(self.n_tris, self.shape.ppt) + 1, B, 1), self.extra)  # (+ the iteration's end)

    def run(self, n: int, read_state: bool = False, read_image: bool = False, state_kind: str = "state",
            flags: tuple[float, int, int] | None = None, sums=None, costs=None, ahead: bool = True,
            idle=None, read_records: bool = False, prepare=None) -> np.ndarray:
        """Run ``n`` iterations; returns their losses, (n,) or (n, B) for a stack (read from the
        ring once per submission). ``read_state``: the last submission also copies the parameters
        and moments back, so a ``get_state`` right after costs no round trip of its own (the
        fitter's events and snapshots follow a chunk); ``read_image`` likewise brings back the
        last forward's image (``last_image``). ``state_kind``: what the state is read for, as the
        readback counters name it ("state" for an event, "snapshot" for a crash-recovery copy).
        ``flags``: (alpha_min, width, height), the respawn rule the event after these iterations
        checks -- its flags come back with the losses, so that check is no round trip of its own.
        ``sums``: the fit's DevicePlacement (render/gpu/events.py), when the event may place
        triangles: the error sums of the image placement places against (the last forward's, or
        for a half-size loop a full-size render of the records, encoded here too) come back with
        the losses (:meth:`tile_sums`), so placement starts without a round trip. ``costs``:
        (full-size targets, weights or None) when the event prunes: each triangle's removal cost
        against them, of the records after these iterations, comes back too (:meth:`removal_costs`).

        A non-finite loss rolls the device back to the last good parameters and raises
        NumericalFault; a lost device raises DeviceLostError. ``ahead``: whether the next chunk
        may run on this loop (its first part is then encoded while the last part runs:
        :meth:`_encode_ahead`); ``idle``: called with no arguments there too, before the readback
        (the host's turn would otherwise only wait: the fitter encodes its kept loops' first
        parts ahead). ``prepare``: called with no arguments once the run's last part is submitted,
        whatever its length, before the readback (the fitter makes the loop the event after the
        run moves to). ``read_records``: the scene records after the last iteration come back too
        (:meth:`brought_records`), as the device materialised them: what a crash-recovery snapshot
        keeps, so that a fit resumed from it on a new device goes on to the bit."""
        try:
            with self.backend.timer.call():  # (a failed chunk's spans go, as a failed one-off call's)
                return self._run(n, read_state, read_image, state_kind, flags, sums, costs, ahead, idle, read_records,
                                 prepare)
        except wgpu.GPUError as exc:
            lost = as_device_lost(exc)
            if lost is not None:
                raise lost from None
            raise

    def _run(self, n: int, read_state: bool, read_image: bool, state_kind: str, flags, sums, costs,
             ahead: bool, idle, read_records: bool, prepare) -> np.ndarray:
        if sums is not None and self._out_size["sums"] != sums.sums_bytes:
            self._out_size["sums"] = sums.sums_bytes  # (before the chunk's copies into the buffer are encoded)
            self._lay_out()
        out = []
        self._read_state = self._read_image = self._read_records = None
        self._drop_brought()
        H, W = self.shape.height, self.shape.width
        host = self.backend.host
        done = 0
        while done < n:
            k = min(self.settings.chunk, n - done, RING)
            slot = self.snap_turn
            first = self.settings.first_submission
            parts = submission_sizes(k, first, self._part_growth())
            fast = self._iteration_dispatches()
            host_s, host_its = 0.0, 0  # the host's encoding and finishing of the parts after the first
            ready = self._take_ready(k, slot, first)
            command = None  # (a finished part not yet submitted)
            if ready is not None:  # (encoded while the last chunk ran: only its submission is left)
                command, ts_bytes = ready
                if len(parts) == 1:  # (a short chunk, else one submission: the ready part, then the rest)
                    parts = [first, k - first]
            else:
                with host.phase("encode"):
                    enc = self.device.create_command_encoder()
                    ts_bytes = self._encode_first(enc, slot, parts[0], fast)
            for i, part in enumerate(parts[1:]):  # the GPU runs what was submitted while the next part is encoded
                with host.phase("submit"):
                    t0 = time.perf_counter()
                    command = enc.finish() if command is None else command
                    if i:
                        host_s += time.perf_counter() - t0
                    self.device.queue.submit([command])
                    command = None
                    self.backend.counters.submissions += 1
                with host.phase("encode"):
                    t0 = time.perf_counter()
                    enc = self.device.create_command_encoder()
                    cpass = enc.begin_compute_pass()
                    fast.encode(cpass, part)
                    cpass.end()
                    host_s, host_its = host_s + time.perf_counter() - t0, host_its + part
            with host.phase("encode"):
                last = done + k >= n
                wanted = ["ring"] + (["params", "moments"] if read_state and last else []) + \
                    (["image"] if read_image and last else []) + (["flags"] if flags and last else []) + \
                    (["sums"] if sums is not None and last else []) + (["costs"] if costs is not None and last else []) + \
                    (["records"] if read_records and last else [])
                sources = {"image": self.ws.buffers["image"], "records": self.ws.buffers["scene"], **self.extra}
                if "flags" in wanted:  # (a pass after the iterations': the last iteration's records)
                    sources["flags"] = self._encode_flags(enc, flags)
                if "sums" in wanted:  # (after the iterations: the last forward's image or the records)
                    sources["sums"], sums_image = self._encode_sums(enc, sums)
                if "costs" in wanted:  # (the records after the last iteration, at its sigma)
                    sources["costs"], costs_done = self.backend.encode_removal_costs_records(
                        enc, self.ws.buffers["scene"], self.n_tris, self.schedule.sigmas(self.iter + k, self.batch),
                        costs[0], costs[1])
                self._copy_ring(enc, k)
                for name in wanted[1:]:
                    enc.copy_buffer_to_buffer(sources[name], 0, self._out, self._out_at[name], self._out_size[name])
            with host.phase("submit"):
                t0 = time.perf_counter()
                command = enc.finish()
                if host_its:
                    self._host_ms_per_it = (host_s + time.perf_counter() - t0) * 1e3 / host_its
                self.device.queue.submit([command])
                self.backend.counters.submissions += 1
            final = done + k >= n
            if ENCODE_AHEAD and first > 0 and parts[-1] >= 2 * first:
                with host.phase("encode"):  # (while the GPU runs that part: the host would only wait)
                    if ahead or not final:
                        self._encode_ahead(slot ^ 1, first, fast)
                    if idle is not None and final:
                        idle()
            if prepare is not None and final:  # (work the event after this run would do, whatever
                prepare()                      # the part's length: the GPU runs it meanwhile)
            with host.phase("readback"):
                try:
                    got = self._read_out(wanted, ts_bytes, self.batch * k * 4, state_kind)
                finally:
                    if "costs" in wanted:
                        costs_done()
                losses = got["ring"].view(np.float32).reshape(self.batch, k).T.astype(np.float64)  # (k, B)
                state = self._parse_state(got["params"], got["moments"]) if "params" in got else None
                image = got["image"].view(np.float32).reshape(self.batch, H, W, 3) if "image" in got else None
                dead = got["flags"].view(np.uint32).reshape(self.batch, self.n_tris) != 0 if "flags" in got else None
                tile_sums = got["sums"].view(np.float32).reshape(self.batch, -1) if "sums" in got else None
                removal = got["costs"].view(np.float32).reshape(self.batch, self.n_tris) if "costs" in got else None
                records = got["records"].view(np.float32).reshape(self.batch, -1) if "records" in got else None
                gpu_ms = self.backend.timer.collect(got.get("timestamps"))
                if gpu_ms:
                    self._gpu_ms_per_it = sum(gpu_ms.values())
            self.snap_iter[slot] = self.iter
            if not np.all(np.isfinite(losses)):
                bad = self.iter + 1 + int(np.argmax(~np.all(np.isfinite(losses), axis=1)))
                back = self._rollback(losses, slot)
                raise NumericalFault(f"non-finite loss at iteration {bad}; rolled back to iteration {back}", bad)
            self.snap_turn = slot ^ 1
            out.append(losses)
            self.iter += k
            self._image_iter = self.iter
            done += k
            if state is not None:
                self._read_state = (self.iter, *state)
            if image is not None:
                self._read_image = (self.iter, image)
            if dead is not None:
                self._read_flags = (self.iter, tuple(flags), dead)
            if tile_sums is not None:
                self._read_sums = (self.iter, sums, tile_sums, sums_image)
            if removal is not None:
                self._read_costs = (self.iter, costs[0], costs[1], removal.astype(np.float64))
            if records is not None:
                self._read_records = (self.iter, records)
        self.sigmas = self.schedule.current_sigmas(self.iter, self.batch)
        losses = np.concatenate(out) if out else np.empty((0, self.batch))
        return losses if self.batched else losses[:, 0]
