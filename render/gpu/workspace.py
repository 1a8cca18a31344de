"""A workspace: the device buffers, bind groups and dispatch encoders for one problem shape
(batch B, frame W x H, T triangles). The one-shot engine calls and the fitter both encode their
GPU passes through it, so the kernels are driven from one place.

Pass order for one loss-and-gradient evaluation (all inside one compute pass):
    bin -> forward -> loss -> backward -> reduce (or the fitter's fused reduce + Adam)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import wgpu

from ..errors import AdapterError
from . import shaders
from .device import GpuContext
from .layouts import FRAME, SCENE, STATE
from .pool import BufferPool
from .readback import read_ranges

TILE = 16
STORAGE = wgpu.BufferUsage.STORAGE
COPY_DST = wgpu.BufferUsage.COPY_DST
COPY_SRC = wgpu.BufferUsage.COPY_SRC
UNIFORM = wgpu.BufferUsage.UNIFORM
MAP_READ = wgpu.BufferUsage.MAP_READ

#: front-to-back walks stop once transmittance is below this (the forward's error is below it)
STOP_TRANSMITTANCE = 1e-6
#: culling's budget: what dropping far coverage may change a pixel by, at most, in all (renders and the
#: engine's passes; a fit's iterations use FitSettings.cull_tolerance)
CULL_TOLERANCE = 1e-5
#: the backward un-composites by division while 1 - alpha >= this, else re-composites (the engine's
#: passes; a fit's iterations use FitSettings.recompute_below)
RECOMPUTE_BELOW = 1.0 / 16.0
#: with a loss, the forward and the backward walk on to this transmittance, so the gradients of
#: hidden triangles and the background stay exact (a fit's iterations: FitSettings.stop_transmittance,
#: the same by default: render/fitloop.py EXACT_STOP_TRANSMITTANCE, not imported here so that a
#: render does not load the fit's modules)
STOP_TRANSMITTANCE_WITH_LOSS = 1e-30
#: backward segments: list entries per segment, and the checkpoint memory they may use. Where a
#: frame has at most SHORT_SEGMENT_TILES tiles a segment is SHORT_SEGMENT_LEN entries: one such frame
#: leaves the GPU far from full, and shorter segments are more workgroups walking at once; on bigger
#: frames the GPU is full and each segment's set-up costs more than the parallelism gains
#: (docs/PERFORMANCE.md, "Shorter backward segments on small frames"). The rule is per image, not
#: per batch: an image's bits must not depend on the batch it is fitted in (tests/test_batch_fit.py).
SEGMENT_LEN = 32
SHORT_SEGMENT_LEN = 16
SHORT_SEGMENT_TILES = 256
SEGMENT_BUDGET_BYTES = 64 * 2**20
# Binning in two steps (super-tiles, shaders/bin.wgsl coarse_main; then tiles, fine_bin.wgsl) from
# this many tile-triangle tests of flat binning (every tile tests every triangle) on: 512 px with
# 1000 triangles is 1.0 M (flat binning in the forward measured 6% faster there), with 2000 2.0 M
# (two steps 8% faster), 1024 px with 5000 20 M (docs/PERFORMANCE.md, "Binning by bit counts").
COARSE_BIN_TESTS = 1_400_000
# The forward bins its own tiles (one dispatch fewer) up to this many tile workgroups a dispatch
# (tiles x batch), where one-pass binning applies: below it the GPU is not full and the pass's
# launch and barrier are what binning costs; a full GPU ran the longer fused workgroups slower
# (docs/PERFORMANCE.md, "Binning inside the forward"). After the super-tiles' pass, likewise
# (Shape.fine_in_forward).
FUSED_BIN_GROUPS = 2048
# A fit's iteration walks each tile's forward and backward in one workgroup
# (shaders/forward_backward.wgsl: two dispatches an iteration, not three) where the forward bins its
# own tiles, on CPU adapters (whose backward has one segment a tile anyway: the same bits) and on
# GPUs for images of at least this many tiles (512 px). There the tiles fill the GPU, the segments'
# parallelism is worth less than their checkpoints and a dispatch: on an H200 the 20 s fit at
# 512 px / 1000 triangles used less host CPU for a few percent fewer iterations and the same PSNR;
# smaller frames gained no iterations without them (docs/PERFORMANCE.md, "The forward and the
# backward in one dispatch"). Per image, not per batch, as the segments' rule: an image whose batch
# is too big for binning in the forward walks one segment a tile unfused, with the same bits.
FUSE_BACKWARD_TILES = 1024

LOSS_KINDS = {"mse": 0, "l1": 1}


def reduce_groups(n_tris: int, ppt: int = 1) -> int:
    """Workgroups an image's gradient reduction (reduce.wgsl, adam.wgsl) takes with ``ppt`` pixels a
    thread: the triangles' parameters shaders.params_per_group(ppt) at a time, then the background's
    own (reduce_param.wgsl)."""
    per = shaders.params_per_group(ppt)
    return (n_tris * 10 + per - 1) // per + 1


def cull_sigmas(n_tris: int, tolerance: float = CULL_TOLERANCE) -> float:
    """How many sigma outside a triangle its coverage is culled: ln(T / tolerance).

    A culled triangle would have changed a pixel by at most its coverage there (compositing is a
    convex blend of values in [0, 1] and the layers above only scale the change down), and
    coverage k sigma outside is sigmoid(-k) < e^-k; so T triangles change a pixel by less than
    T e^-k = tolerance in all. 150 triangles: 16.5 sigma at CULL_TOLERANCE."""
    return math.log(max(n_tris, 1) / tolerance)


@dataclass(frozen=True)
class BinStep:
    """One dispatch of a binning path: ``entry``, or in a fit ``fit_entry`` where it has one (the
    path's first dispatch, which also starts the iteration); workgroups over the tiles, or over the
    super-tiles (``supers``). ``bindings`` in order (None: a binding the entry does not use); the
    names in _FIT_ONLY are bound only in a fit, the focus map ("weights") only where the shape is
    weighted."""
    kernel: str
    entry: str
    bindings: tuple[str | None, ...]
    fit_entry: str | None = None
    supers: bool = False


#: bound by a path's first dispatch in a fit only: the iteration's state and schedule
_FIT_ONLY = ("state", "sched")
_FORWARD = ("frame", "scene", "tile_count", "tile_list", "image", "target", "dldc", "loss_partial", "ckpt", "weights")
_SUPER_LISTS = ("super_count", "super_list")
_COARSE = BinStep("bin.wgsl", "coarse_main", ("frame", "scene", None, None, None, "tri_tiles", *_FIT_ONLY, *_SUPER_LISTS),
                  "coarse_fit_main", supers=True)
#: The four binning paths (Shape.bin_path), each its dispatches up to the forward's, the forward
#: last; the backward and the reduction read the lists, masks and tile ranges they leave, whichever
#: path made them, and every path computes the same bits (tests/test_gpu_engine.py).
BIN_PATHS: dict[str, tuple[BinStep, ...]] = {
    # every tile tests every triangle, in the forward's own workgroups
    "forward": (BinStep("forward.wgsl", "main", (*_FORWARD, "tile_mask", "tri_tiles", *_FIT_ONLY), "fit_main"),),
    # the same, in a pass of its own (more tile workgroups than FUSED_BIN_GROUPS)
    "one pass": (BinStep("bin.wgsl", "main", ("frame", "scene", "tile_count", "tile_list", "tile_mask", "tri_tiles",
                                              *_FIT_ONLY), "fit_main"),
                 BinStep("forward_listed.wgsl", "main", _FORWARD)),
    # super-tiles, then tiles from their lists, each a pass of its own (COARSE_BIN_TESTS and more)
    "two passes": (_COARSE,
                   BinStep("bin.wgsl", "fine_main", ("frame", "scene", "tile_count", "tile_list", "tile_mask", None,
                                                     None, None, *_SUPER_LISTS)),
                   BinStep("forward_listed.wgsl", "main", _FORWARD)),
    # super-tiles, then the forward's workgroups bin their tiles from those lists
    "coarse, then the forward": (_COARSE, BinStep("forward_fine.wgsl", "main", (*_FORWARD, "tile_mask",
                                                                                 *_SUPER_LISTS))),
}
#: a fit iteration's binning, forward and backward in one dispatch (forward_backward.wgsl fit_main,
#: Shape.fuses_backward): the bindings of the path that bins in the forward, then the partials
_FUSED_BINDINGS = (*BIN_PATHS["forward"][0].bindings, "partial")


@dataclass(frozen=True)
class Shape:
    batch: int
    width: int
    height: int
    n_tris: int
    segmented: bool = True  # split tile lists into backward segments (off on CPU adapters)
    ppt: int = 1  # backward pixels per thread (more on CPU adapters: shaders/backward.wgsl)
    weighted: bool = False  # a focus map weighs the loss (its own buffer and kernel variant: shaders/focus_map.wgsl)
    fit: bool = False  # the fit loop's: its iteration may fuse the forward and the backward (fuses_backward)

    @property
    def segment_len(self) -> int:
        """List entries a backward segment takes (SHORT_SEGMENT_LEN on small frames)."""
        return SHORT_SEGMENT_LEN if self.n_tiles <= SHORT_SEGMENT_TILES else SEGMENT_LEN

    @property
    def n_seg(self) -> int:
        """Backward segments per tile: enough for parallelism, within SEGMENT_BUDGET_BYTES."""
        length = self.segment_len
        if not self.segmented or self.n_tris <= length or self.fit_one_segment:
            return 1
        per_seg = self.batch * self.n_tiles * 256 * 16
        return max(1, min((self.n_tris + length - 1) // length, SEGMENT_BUDGET_BYTES // per_seg,
                          65535 // self.batch))

    @property
    def seg_len(self) -> int:
        return self.segment_len if self.n_seg > 1 else max(self.n_tris, 1)

    @property
    def tiles_x(self) -> int:
        return (self.width + TILE - 1) // TILE

    @property
    def tiles_y(self) -> int:
        return (self.height + TILE - 1) // TILE

    @property
    def n_tiles(self) -> int:
        return self.tiles_x * self.tiles_y

    @property
    def scene_stride(self) -> int:
        return SCENE.stride(self.n_tris)

    @property
    def scene_uniform(self) -> bool:
        """The rasterising kernels read the scene records from a uniform binding (shaders/
        scene_uniform.wgsl): on CPU adapters (several pixels a thread), where llvmpipe gathers a
        uniform buffer's loads and loops over the lanes for a storage buffer's, when the batch's
        records fit the binding (shaders.SCENE_UNIFORM_BYTES: ~1,600 triangles for one image)."""
        return self.ppt > 1 and self.batch * self.scene_stride * 4 <= shaders.SCENE_UNIFORM_BYTES

    @property
    def mask_words(self) -> int:
        return max(1, (self.n_tris + 31) // 32)

    @property
    def bins_in_forward(self) -> bool:
        """The forward's workgroups bin their own tiles (forward.wgsl): one-pass binning with at most
        FUSED_BIN_GROUPS tile workgroups; else binning has passes of its own (bin.wgsl)."""
        return not self.coarse_bin and self.n_tiles * self.batch <= FUSED_BIN_GROUPS

    @property
    def coarse_bin(self) -> bool:
        """Bin in two passes, super-tiles then tiles (the same lists): where every tile testing
        every triangle would cost COARSE_BIN_TESTS tests or more."""
        return self.n_tiles * self.n_tris >= COARSE_BIN_TESTS and self.mask_words <= shaders.FINE_MASK_WORDS

    @property
    def fine_in_forward(self) -> bool:
        """After the super-tiles' pass (coarse_bin) the forward's workgroups bin their own tiles from
        their super-tiles' lists (forward_fine.wgsl) where there are at most FUSED_BIN_GROUPS of
        them (tiles x batch): one dispatch fewer an iteration for the host to encode, the GPU's
        time the same. More run in several waves, and a fine pass of its own (bin.wgsl fine_main)
        was measured faster there (docs/PERFORMANCE.md, "Binning by bit counts")."""
        return self.coarse_bin and self.n_tiles * self.batch <= FUSED_BIN_GROUPS

    @property
    def bin_path(self) -> str:
        """This shape's binning path, a key of BIN_PATHS."""
        if self.bins_in_forward:
            return "forward"
        if not self.coarse_bin:
            return "one pass"
        return "coarse, then the forward" if self.fine_in_forward else "two passes"

    @property
    def fit_one_segment(self) -> bool:
        """A fit's image of at least FUSE_BACKWARD_TILES tiles whose binning is flat walks one
        backward segment a tile (per image: whether its batch lets the forward bin, and so fuse,
        changes no bits)."""
        return self.fit and self.segmented and self.n_tiles >= FUSE_BACKWARD_TILES and not self.coarse_bin

    @property
    def fuses_backward(self) -> bool:
        """A fit's iteration walks each tile's forward and backward in one workgroup
        (shaders/forward_backward.wgsl) -- where the forward bins its own tiles and a tile's list is
        one backward segment: on CPU adapters, and on GPUs where fit_one_segment."""
        return self.fit and self.fuses_loss_pass

    @property
    def fuses_loss_pass(self) -> bool:
        """A loss pass with a backward (fit iteration, gradients, removal costs) walks each tile's
        forward and backward in one workgroup: where the forward bins its own tiles and a tile's
        list is one backward segment -- on CPU adapters (the backward is not segmented), and in a
        GPU's fit where fit_one_segment."""
        return self.bins_in_forward and (not self.segmented or self.fit_one_segment)

    @property
    def renders_in_forward(self) -> bool:
        """Render-only calls walk the forward's binning path without the loss rather than
        shaders/render.wgsl: where the kernels walk several pixels a thread (CPU adapters), which the
        forward does and render.wgsl, one pixel a thread, does not -- on lavapipe it took 4-5x the
        forward's time, and the two give the same bits there (a GPU's compiler may round them
        differently: docs/PERFORMANCE.md, "Render-only calls on CPU adapters")."""
        return self.ppt > 1

    @property
    def supers(self) -> tuple[int, int]:
        """Super-tiles across and down (coarse binning)."""
        k = shaders.SUPER_TILES
        return (self.tiles_x + k - 1) // k, (self.tiles_y + k - 1) // k

    def buffer_sizes(self, ring_len: int = 1) -> dict[str, int]:
        B, T, nt = self.batch, self.n_tris, self.n_tiles
        pixels = B * self.width * self.height * 3 * 4
        return {
            "frame": FRAME.size,
            "ckpt": B * nt * self.n_seg * 256 * 16 if self.n_seg > 1 else 16,
            "state": STATE.size,
            "scene": B * self.scene_stride * 4,  # (a uniform binding's buffer is padded to it: Workspace)
            "tile_count": B * nt * 4,
            "tile_list": B * nt * max(T, 1) * 4,
            "tile_mask": B * nt * self.mask_words * 4,
            "tri_tiles": B * max(T, 1) * 8,
            **({"super_count": B * self.supers[0] * self.supers[1] * 4,
                "super_list": B * self.supers[0] * self.supers[1] * max(T, 1) * 4} if self.coarse_bin else {}),
            "image": pixels,
            "target": pixels,
            "dldc": pixels,
            "loss_partial": B * nt * 4,
            "partial": B * nt * (T + 1) * 10 * 4,
            "grad": B * (T + 1) * 10 * 4,
            "costs": B * max(T, 1) * 4,
            "ring": B * ring_len * 4,
            **({"weights": B * self.width * self.height * 4} if self.weighted else {}),
        }


_USAGES = {
    "frame": UNIFORM | COPY_DST,
    "state": STORAGE | COPY_DST | COPY_SRC,
    "scene": STORAGE | COPY_DST | COPY_SRC,
    "image": STORAGE | COPY_SRC | COPY_DST,  # (COPY_DST: a replica selection copies images, GpuFitLoop.copy_images)
    "target": STORAGE | COPY_DST,
    "weights": STORAGE | COPY_DST,
    "grad": STORAGE | COPY_SRC,
    "costs": STORAGE | COPY_SRC,
    "ring": STORAGE | COPY_SRC | COPY_DST,
}


def path_entries(shape: Shape) -> tuple[tuple[str, str], ...]:
    """The (kernel, entry) pairs a workspace of ``shape`` dispatches on its binning path
    (BIN_PATHS; :meth:`Workspace.encode_binned_forward`), for a fit and not: what to build for it."""
    return tuple((step.kernel, entry) for step in BIN_PATHS[shape.bin_path]
                 for entry in (step.fit_entry, step.entry) if entry is not None)


def check_limits(ctx: GpuContext, shape: Shape, ring_len: int = 1) -> None:
    """Refuse, before allocating, a problem the adapter cannot hold."""
    max_binding = ctx.limits.get("max-storage-buffer-binding-size", 1 << 27)
    max_buffer = ctx.limits.get("max-buffer-size", 1 << 28)
    cap = min(max_binding, max_buffer)
    for name, size in shape.buffer_sizes(ring_len).items():
        if size > cap:
            raise AdapterError(
                f"{shape.batch} x {shape.width}x{shape.height} px with {shape.n_tris} triangles needs a "
                f"{size / 2**20:.0f} MiB '{name}' buffer; this adapter allows {cap / 2**20:.0f} MiB per buffer"
            )
    max_groups = ctx.limits.get("max-compute-workgroups-per-dimension", 65535)
    if max(shape.tiles_x, shape.tiles_y, shape.batch * shape.n_seg) > max_groups:
        raise AdapterError(f"frame or batch too large for one dispatch ({max_groups} workgroups per dimension)")


class Workspace:
    """Buffers and bind groups for one :class:`Shape`, taken from (and given back to) a pool."""

    def __init__(self, ctx: GpuContext, pool: BufferPool, shape: Shape, ring_len: int = 1,
                 subgroups: bool | None = None, cull_tolerance: float = CULL_TOLERANCE,
                 loss_stop: float = STOP_TRANSMITTANCE_WITH_LOSS, recompute_below: float = RECOMPUTE_BELOW):
        """``cull_tolerance``: what culling may change a pixel by, at most, in all; ``loss_stop``: the
        transmittance at which walks with a loss stop; ``recompute_below``: the 1 - alpha under which
        the backward re-composites rather than divides (the fit loop's own workspace passes its
        FitSettings.cull_tolerance, stop_transmittance and recompute_below)."""
        check_limits(ctx, shape, ring_len)
        self.cull_tolerance = cull_tolerance
        self.loss_stop = loss_stop
        self.recompute_below = recompute_below
        self.ctx = ctx
        self.device = ctx.device
        self.pool = pool
        self.shape = shape
        self.ring_len = ring_len
        self.subgroups = ctx.has_subgroups if subgroups is None else (subgroups and ctx.has_subgroups)
        self.scene_uniform = shape.scene_uniform  # (decided once: its buffer and its kernels' variant agree)
        self.buffers: dict[str, object] = {}
        for name, size in shape.buffer_sizes(ring_len).items():
            usage = _USAGES.get(name, STORAGE)
            if name == "scene" and self.scene_uniform:  # (every adapter holds a uniform binding's 64 KiB)
                usage, size = usage | UNIFORM, shaders.SCENE_UNIFORM_BYTES
            self.buffers[name] = pool.acquire(usage, size, label=name)
        self._staging: dict[tuple[str, int], object] = {}
        self._bind_groups: dict[str, tuple[object, object]] = {}
        self._paths: dict[bool, list[tuple]] = {}  # (the binning path's dispatches, in a fit and not)
        self.frame_kind: object = "unset"  # (loss, removal_costs) uploaded; loss None = render only
        self._target_of: np.ndarray | None = None  # the read-only array the target buffer holds (write_target)

    # ------------------------------------------------------------------ lifetime
    def release(self) -> None:
        for buf in list(self.buffers.values()) + list(self._staging.values()):
            self.pool.release(buf)
        self.buffers.clear()
        self._staging.clear()
        self._bind_groups.clear()
        self._paths.clear()

    # ------------------------------------------------------------------ uploads
    def frame_bytes(self, loss: str | None = "mse", removal_costs: bool = False) -> bytes:
        """The frame uniform; ``removal_costs``: the backward sums removal costs, not gradients."""
        s = self.shape
        return FRAME.pack(
            width=s.width, height=s.height, n_tris=s.n_tris, batch=s.batch,
            tiles_x=s.tiles_x, tiles_y=s.tiles_y, n_tiles=s.n_tiles, scene_stride=s.scene_stride,
            mask_words=s.mask_words, loss_kind=LOSS_KINDS[loss or "mse"],
            inv_values=1.0 / (s.width * s.height * 3),
            stop_t=STOP_TRANSMITTANCE if loss is None else self.loss_stop,
            cull_k=cull_sigmas(s.n_tris, self.cull_tolerance), recompute_below=self.recompute_below,
            ring_len=self.ring_len, with_loss=0 if loss is None else 1, n_seg=s.n_seg, seg_len=s.seg_len,
            removal_costs=int(removal_costs), tile_spread=shaders.spread_stride(s.n_tiles),
            super_spread=shaders.spread_stride(s.supers[0] * s.supers[1]),
        )

    def write(self, name: str, data, offset: int = 0) -> int:
        if name == "target":
            self._target_of = None
        raw = memoryview(np.ascontiguousarray(data)).cast("B") if not isinstance(data, bytes) else data
        self.device.queue.write_buffer(self.buffers[name], offset, raw)
        return len(raw)

    def write_target(self, targets: np.ndarray) -> int:
        """Upload the target images (B, H, W, 3) float32 -- unless this workspace holds these already:
        the very array it uploaded last, read-only, so unchanged since (a fit's targets: pruning's
        removal costs pass them at every step, 2 MB at 512 px). Returns the bytes uploaded."""
        if targets is self._target_of and not targets.flags.writeable:
            return 0
        up = self.write("target", np.ascontiguousarray(targets, dtype=np.float32))
        if not targets.flags.writeable:
            self._target_of = targets
        return up

    def set_frame(self, loss: str | None = "mse", removal_costs: bool = False) -> int:
        """Upload the frame uniform; ``loss=None`` renders only (no target needed);
        ``removal_costs``: the backward sums each triangle's removal cost (with loss "mse")."""
        kind = (loss, removal_costs)
        if self.frame_kind == kind:
            return 0
        self.frame_kind = kind
        return self.write("frame", self.frame_bytes(loss, removal_costs))

    # ------------------------------------------------------------------ bind groups
    def pipeline(self, kernel: str, entry: str = "main", costs: bool = False):
        """``kernel``'s pipeline in this workspace's variant (compiled once per device and variant);
        ``costs``: the removal-cost pass's (shaders.costs_by_variant)."""
        return shaders.pipeline(*self._variant(kernel, entry, None, costs))

    def _variant(self, kernel: str, entry: str, scene_uniform: bool | None = None, costs: bool = False) -> tuple:
        """``scene_uniform``: another shape's scene binding (None: this workspace's)."""
        return (self.device, kernel, entry, self.subgroups,
                self.ctx.limits.get("max-compute-workgroup-storage-size", 16384),
                self.ctx.subgroup_size, self.shape.ppt, self.shape.weighted,
                self.scene_uniform if scene_uniform is None else scene_uniform, costs)

    def build_pipelines(self, kernels) -> None:
        """Compile ``kernels`` in this workspace's variant, several at once: (kernel, entry) pairs, or
        (kernel, entry, scene_uniform[, costs]) for a shape whose scene binding may differ from this
        one's (Shape.scene_uniform; None: this one's) and the removal-cost pass's variant. The driver's
        compiler runs outside the GIL, so a process's first fit waits for the slowest pipeline rather
        than for their sum."""
        todo = [v for v in dict.fromkeys(self._variant(*k) for k in kernels) if not shaders.built(*v)]
        if len(todo) < 2:
            for variant in todo:
                shaders.pipeline(*variant)
            return
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(8, len(todo)), thread_name_prefix="trifit-pipeline") as pool:
            for done in [pool.submit(shaders.pipeline, *variant) for variant in todo]:
                done.result()  # a compile error raises here, as it would have in line

    def bind_group(self, kernel: str, names: list[str | None], entry: str = "main", extra: dict | None = None,
                   costs: bool = False):
        """Pipeline and bind group for ``kernel`` with buffers bound in order (None: a binding this
        entry point does not use); cached."""
        key = f"{kernel}:{entry}:{costs}"
        found = self._bind_groups.get(key)
        if found is not None:
            return found
        pl = self.pipeline(kernel, entry, costs)
        bufs = {**self.buffers, **(extra or {})}
        entries = [{"binding": i, "resource": self._resource(n, bufs[n])} for i, n in enumerate(names) if n is not None]
        bg = self.device.create_bind_group(layout=pl.get_bind_group_layout(0), entries=entries)
        self._bind_groups[key] = (pl, bg)
        return pl, bg

    def _resource(self, name: str, buf) -> dict:
        """A binding's resource: the whole buffer, but the scene's uniform binding exactly its size (a
        pooled buffer may be larger than a uniform binding allows)."""
        if name == "scene" and self.scene_uniform:
            return {"buffer": buf, "offset": 0, "size": shaders.SCENE_UNIFORM_BYTES}
        return {"buffer": buf}

    def _dispatch(self, cpass, kernel: str, names: list[str], groups, entry: str = "main", extra=None,
                  costs: bool = False):
        pl, bg = self.bind_group(kernel, names, entry, extra, costs)
        cpass.set_pipeline(pl)
        cpass.set_bind_group(0, bg)
        cpass.dispatch_workgroups(*groups)

    # ------------------------------------------------------------------ passes
    @property
    def tile_groups(self):
        s = self.shape
        return (s.tiles_x, s.tiles_y, s.batch)

    def encode_binned_forward(self, cpass, span, timed: bool, fit: dict | None = None) -> None:
        """This shape's binning path (BIN_PATHS): binning's own passes, where it has them (timed as
        "bin"), then the forward ("forward"), which bins its tiles itself where binning has no pass
        of its own and, after the super-tiles' pass, may bin them from their lists. ``span``: the
        timer's span (``timer.span``); ``fit``: the fit loop's buffers (its ``sched``): the path's
        first dispatch then also starts the iteration (the counter, the learning rate's scale)."""
        *bins, forward = self._path_dispatches(fit)
        for name, dispatches in (("bin", bins), ("forward", [forward])):
            if dispatches:
                with span(cpass, name, timed):
                    self._record(cpass, dispatches)

    @staticmethod
    def _record(cpass, dispatches) -> None:
        """Record resolved (pipeline, bind group, workgroups) dispatches into ``cpass``, in order."""
        for pl, bg, groups in dispatches:
            cpass.set_pipeline(pl)
            cpass.set_bind_group(0, bg)
            cpass.dispatch_workgroups(*groups)

    def _path_dispatches(self, fit: dict | None) -> list[tuple]:
        """The binning path's (pipeline, bind group, workgroups), resolved once for a fit and once
        outside one: the engine's small calls are bound by the host's encoding."""
        found = self._paths.get(fit is not None)
        if found is None:
            fitting = fit is not None
            found = []
            for step in BIN_PATHS[self.shape.bin_path]:
                names = self._bound(step.bindings, fitting)
                entry = step.fit_entry if fitting and step.fit_entry else step.entry
                groups = (*self.shape.supers, self.shape.batch) if step.supers else self.tile_groups
                found.append((*self.bind_group(step.kernel, names, entry, fit), groups))
            self._paths[fit is not None] = found
        return found

    def _bound(self, bindings, fitting: bool) -> list[str | None]:
        """``bindings`` as this shape binds them: None for the fit's own (_FIT_ONLY) outside a fit
        and for the focus map where the shape has none."""
        weighted = self.shape.weighted
        return [None if (n in _FIT_ONLY and not fitting) or (n == "weights" and not weighted) else n for n in bindings]

    def encode_fused_forward_backward(self, cpass, span, timed: bool, fit: dict | None = None,
                                      costs: bool = False) -> None:
        """Binning, forward and backward in one dispatch (Shape.fuses_loss_pass), timed as
        "forward+backward": a fit's iteration (``fit``: its buffers; the dispatch starts the
        iteration), or outside a fit a loss pass's (``costs``: the removal costs' pass)."""
        with span(cpass, "forward+backward", timed):
            self._dispatch(cpass, "forward_backward.wgsl", self._bound(_FUSED_BINDINGS, fit is not None),
                           self.tile_groups, "main" if fit is None else "fit_main", fit, costs)

    def _focus(self) -> list[str]:
        """The focus map's binding, last, in the weighted variant of the forward and backward."""
        return ["weights"] if self.shape.weighted else []

    def encode_render(self, cpass) -> None:
        """Render only (a frame without the loss): binning fused into the forward
        (shaders/render.wgsl), one dispatch -- or, where Shape.renders_in_forward, the binning
        path's dispatches (the fit's forward, its lists written and not read)."""
        if self.shape.renders_in_forward:
            self._record(cpass, self._path_dispatches(None))
        else:
            self._dispatch(cpass, "render.wgsl", ["frame", "scene", "image"], self.tile_groups)

    def encode_naive_forward(self, cpass) -> None:
        """The baseline kernel (shaders/naive_forward.wgsl): every pixel walks every triangle."""
        s = self.shape
        self._dispatch(cpass, "naive_forward.wgsl", ["frame", "scene", "image"],
                       ((s.width * s.height + 255) // 256, s.batch, 1))

    def encode_loss(self, cpass) -> None:
        """The per-pixel loss is fused into the forward (frame.with_loss); this sums its tiles (a
        forward without a backward: :meth:`encode_reduce` sums them beside the gradients)."""
        self._dispatch(cpass, "loss_reduce.wgsl", ["frame", "loss_partial", "state", "ring"],
                       (self.shape.batch, 1, 1))

    def encode_backward(self, cpass, costs: bool = False) -> None:
        """The backward's own dispatch (``costs``: the removal costs' pass)."""
        s = self.shape
        self._dispatch(cpass, "backward.wgsl",
                       ["frame", "scene", "tile_count", "tile_list", "image", "dldc", "partial", "ckpt"] + self._focus(),
                       (s.tiles_x, s.tiles_y, s.batch * s.n_seg), costs=costs)

    def encode_reduce(self, cpass) -> None:
        """The gradients' reduction, and in its first workgroup the loss (what encode_loss does alone)."""
        self._dispatch(cpass, "reduce.wgsl",
                       ["frame", "partial", "tile_mask", "grad", "tri_tiles", "loss_partial", "state", "ring"],
                       (reduce_groups(self.shape.n_tris, self.shape.ppt) + 1, self.shape.batch, 1), entry="reduce_grad")

    def encode_costs(self, cpass) -> None:
        """Column 0 of the reduced sums (the removal costs) into the compact ``costs`` buffer."""
        self._dispatch(cpass, "costs.wgsl", ["frame", "grad", "costs"],
                       ((self.shape.n_tris + 63) // 64, self.shape.batch, 1))

    def encode_custom(self, cpass, kernel: str, names: list[str], groups, extra: dict) -> None:
        self._dispatch(cpass, kernel, names, groups, extra=extra)

    # ------------------------------------------------------------------ readback
    def staging(self, name: str, size: int):
        key = (name, size)
        buf = self._staging.get(key)
        if buf is None:
            buf = self.pool.acquire(MAP_READ | COPY_DST, size, label=f"read:{name}")
            self._staging[key] = buf
        return buf

    def copy_out(self, encoder, name: str, size: int | None = None, source=None):
        src = source if source is not None else self.buffers[name]
        size = size if size is not None else src.size
        dst = self.staging(name, size)
        encoder.copy_buffer_to_buffer(src, 0, dst, 0, size)
        return dst, size

    @staticmethod
    def read(staging, size: int, dtype=np.float32) -> np.ndarray:
        return read_ranges(staging, [(0, size)])[0].view(dtype)
