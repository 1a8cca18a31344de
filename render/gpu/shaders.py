"""WGSL sources from the ``shaders`` package, composed and compiled once per device.

A kernel is composed, in this order, of: the layouts generated from render/gpu/layouts.py (the
structs Python writes and the scene record's index functions), ``common.wgsl``, the variant's
constants (pixels per thread, the backward's batch and subgroup slots), the shared pieces it lists in
``PIECES`` (scene access, the workgroup-reduction variant -- subgroup adds where the adapter has
them, else a workgroup-memory tree --, the focus variant -- per-pixel loss weights or none --, the
gradient reduction, the loss record, the schedules), and last the kernel file itself, which holds
only its bindings and entry points (and its own helpers).
No piece may spell a generated struct. Pipelines use ``layout="auto"`` and are cached per
(device, kernel, variant, entry point).
"""

from __future__ import annotations

import functools
import importlib.resources
import math
import threading
from dataclasses import dataclass

from . import layouts

_lock = threading.Lock()
#: the kernels with PPT pixels (binning: triangles) per thread
_PPT_KERNELS = ("bin.wgsl", "forward.wgsl", "forward_listed.wgsl", "forward_fine.wgsl", "backward.wgsl",
                "forward_backward.wgsl")
_pipelines: dict[tuple, object] = {}
SUPER_TILES = 4         # binning in two passes (bin.wgsl coarse_main): super-tiles of 4 x 4 tiles
PARAMS_PER_GROUP = 30   # the gradient reduction's triangle parameters a workgroup (reduce_param.wgsl): whole
                        # triangles, so adam.wgsl's size rates read vertices no other workgroup writes
SERIAL_PARAMS_PER_GROUP = 250  # ... where one thread runs a parameter's lanes in turn (several pixels a thread)
SUM_LANES = 8           # reduce_param.wgsl's lanes a triangle's parameter sums its tiles in (GPUs: a thread each)
FINE_MASK_WORDS = 512   # ... and a tile's mask in workgroup memory there: up to 16,384 triangles


@functools.cache
def source(name: str) -> str:
    return importlib.resources.files("trifit.shaders").joinpath(name).read_text(encoding="utf-8")


def hands_off(name: str, ppt: int) -> bool:
    """Whether kernel ``name``'s backward starts from the colour and dL/dC its forward left in the
    same thread (HANDED_OFF) rather than reading them back from memory, where dL/dC is then not
    written: the fit's fused kernel (forward_backward.wgsl) with several pixels a thread (CPU
    adapters, where each of those reads and writes is a loop over the lanes). GPUs keep the memory
    round trip: not measured there, and the values held across the forward's end would take
    registers from their occupancy."""
    return name == "forward_backward.wgsl" and ppt > 1


def defers_recompose(ppt: int) -> bool:
    """Whether the backward re-composites the canvas beneath a nearly opaque entry outside its loop
    over a batch's entries (backward_walk.wgsl DEFER_RECOMPOSE: the subgroup leaves the loop, re-
    composites, and walks the entry again): where the kernels walk several pixels a thread (CPU
    adapters), since llvmpipe runs a branch's body, and a loop's first pass in it, at every entry
    whether or not a lane takes it. GPUs branch around it in the loop. The same arithmetic in the
    same order either way."""
    return ppt > 1


def costs_by_variant(ppt: int) -> bool:
    """Whether the backward's walk sums removal costs rather than gradients by a pipeline variant of
    its own (backward_walk.wgsl COSTS_BY_VARIANT: pruning's cost pass its own pipeline, a fit's
    iterations without the costs' arithmetic) rather than by the frame's flag: where the kernels
    walk several pixels a thread (CPU adapters), since llvmpipe runs the costs' branch, lanes off,
    at every pixel and entry of every iteration. GPUs branch on the uniform flag and keep one
    pipeline. The same arithmetic either way."""
    return ppt > 1


def spreads_cells(name: str, ppt: int) -> bool:
    """Whether kernel ``name``'s workgroups take their tiles (super-tiles) in a spread order
    (common.wgsl spread_cell, the frame's strides: :func:`spread_stride`): the kernels that walk or
    bin tiles several pixels a thread (CPU adapters), since llvmpipe splits a dispatch's workgroups
    into one contiguous run a thread, which in row order gives one thread the frame's top and another
    its bottom. GPUs schedule workgroups as they free up and keep row order. A permutation of the
    tiles: the same bits either way."""
    return ppt > 1 and name in _PPT_KERNELS


def spread_stride(n: int) -> int:
    """The stride of a grid of ``n`` cells' spread order (common.wgsl spread_cell: workgroup w takes
    cell w x stride mod n): the first from n / golden ratio up that is coprime with n, so that the
    order is a permutation and every run of workgroups takes cells from all over the grid; 1 (row
    order) where n < 3, or where n > 65535 and w x stride could leave a u32."""
    if n < 3 or n > 65535:
        return 1
    s = max(n * 618 // 1000, 1)
    while math.gcd(s, n) != 1:
        s += 1
    return s


def skips_by_vector(name: str, ppt: int) -> bool:
    """Whether kernel ``name``'s walks skip, a subgroup at a time, the list entries none of its
    pixels can reach (VECTOR_SKIP: common.wgsl walk_pixel gives each eight threads a block of 8 x
    ppt pixels, and block_touches rules an entry out by its grown bounding box and its edge lines):
    the kernels that take a gradient (a fit's) where they walk several pixels a thread (CPU
    adapters), since llvmpipe runs every listed pair for every lane, and only in a loop of its own,
    since it branches only at a loop's back edge (docs/PERFORMANCE.md, "What llvmpipe runs under a
    branch"). A skipped entry would have been culled at every pixel, so the same bits either way.
    Render-only kernels keep every entry: at the renders' culling budget few entries can be skipped
    and the vote made fitted scenes' renders 5-9% slower at 512-1024 px. GPUs skip entries by their
    subgroups' branches."""
    return ppt > 1 and "backward_walk.wgsl" in PIECES.get(name, ())


def serial_lanes(ppt: int) -> bool:
    """Whether the gradient reduction runs a parameter's lanes in turn in one thread (reduce_param.wgsl
    SERIAL_LANES): where the kernels walk several pixels a thread (CPU adapters). GPUs run them as
    SUM_LANES threads. The same additions in the same order either way."""
    return ppt > 1


def params_per_group(ppt: int) -> int:
    """Triangle parameters a workgroup of the gradient reduction takes (reduce_param.wgsl)."""
    return SERIAL_PARAMS_PER_GROUP if serial_lanes(ppt) else PARAMS_PER_GROUP


def max_subgroups(subgroup_size: int, threads: int = 256) -> int:
    """Subgroup slots per workgroup the backward reserves: threads / the probed subgroup size (4,
    the smallest WebGPU allows, when unknown). Over-reserving costs occupancy (docs/PERFORMANCE.md)."""
    return max(1, threads // (subgroup_size if subgroup_size >= 4 else 4))


def subgroup_splits(subgroup_size: int) -> int:
    """Transposing exchange steps of the backward's subgroup sum (reduce_subgroup.wgsl): one per
    lane bit, at most 4 (ten values halve to one); 0 where the size is unknown or not a power of
    two, which sums with subgroupAdd instead."""
    if subgroup_size < 2 or subgroup_size & (subgroup_size - 1):
        return 0
    return min(4, subgroup_size.bit_length() - 1)


def backward_batch(workgroup_storage: int, subgroups: bool, subgroup_size: int = 0, ppt: int = 1) -> int:
    """KB: triangles whose workgroup sums share one barrier pair in the backward kernel, as many
    (up to 16) as the adapter's workgroup memory holds next to the staged triangles."""
    threads = 256 // ppt
    st = staging(ppt)
    fixed = st.backward * (st.record_bytes + 4) + 16  # staged records and their ids, counters
    per_slot = 10 * 4 * max_subgroups(subgroup_size, threads) if subgroups else 10 * 4
    if not subgroups:
        fixed += 10 * threads * 4
    return int(max(1, min(16, (workgroup_storage - fixed) // per_slot)))


REDUCTION = "<reduction>"  # stands for reduce_subgroup.wgsl or reduce_workgroup.wgsl in PIECES
#: stands for focus_map.wgsl (a focus map weighs the loss: its own binding) or focus_none.wgsl (none:
#: the unweighted arithmetic, and no binding) in PIECES
FOCUS = "<focus>"
#: stands for the walks' per-adapter-kind pieces (Staging.pieces): how the early stop counts
#: (walk_stop_pixel.wgsl / walk_stop_round.wgsl), then how triangles are staged (stage_setup.wgsl: one
#: pixel a thread, set up once per tile as they are staged; stage_tri.wgsl / stage_tri_shared.wgsl:
#: several, each thread sets up the staged record for its pixels)
STAGING = "<staging>"
#: stands for how the rasterising kernels bind and read the scene records: scene_storage.wgsl (a storage
#: buffer) or scene_uniform.wgsl (a uniform one: CPU adapters, where it fits; Shape.scene_uniform)
SCENE = "<scene>"
#: the pieces a variant chooses
PLACEHOLDERS = (REDUCTION, FOCUS, STAGING, SCENE)
SCENE_UNIFORM_BYTES = 65536  # the uniform scene binding: WebGPU's least max-uniform-buffer-binding-size


@dataclass(frozen=True)
class Staging:
    """How the forward and backward walks stage triangles in workgroup memory (and count their early stop)."""
    pieces: tuple[str, ...]
    record_bytes: int  # one staged record (common.wgsl TriSetup or TriPx)
    forward: int       # records a forward round
    backward: int      # records a backward round


def staging(ppt: int, shared_reads: bool = False) -> Staging:
    """One pixel a thread (GPUs) stages set-up records, fewer a round: rounds of 128 (forward) and
    64 (backward) measured faster on the H200 than 256 and 128, as less workgroup memory lets more
    workgroups run at once. Several pixels a thread (CPU adapters) stage the plain, smaller record
    (docs/PERFORMANCE.md, "Set-up triangles"), read shared over the subgroup where ``shared_reads``
    (subgroups of at least 8: :func:`shares_reads`), and count the early stop once a round
    (docs/PERFORMANCE.md, "What llvmpipe runs under a branch")."""
    if ppt == 1:
        return Staging(("walk_stop_pixel.wgsl", "stage_setup.wgsl"), 80, 128, 64)
    return Staging(("walk_stop_round.wgsl", "stage_tri_shared.wgsl" if shared_reads else "stage_tri.wgsl"), 48, 256, 128)


def shares_reads(subgroups: bool, subgroup_size: int) -> bool:
    """Whether the walks read what every lane reads alike once a lane, shared over the subgroup."""
    return bool(subgroups) and subgroup_size >= 8


#: the shared pieces of each kernel, in order, between the constants and the kernel file
PIECES: dict[str, tuple[str, ...]] = {
    "bin.wgsl": (SCENE, "scene_access.wgsl", "scan.wgsl", "schedule.wgsl", "tile_bin.wgsl", "fine_bin.wgsl"),
    "forward.wgsl": (SCENE, "scene_access.wgsl", "scan.wgsl", "schedule.wgsl", "tile_bin.wgsl", STAGING, FOCUS,
                     "forward_walk.wgsl"),
    "forward_listed.wgsl": (SCENE, "scene_access.wgsl", STAGING, FOCUS, "forward_walk.wgsl"),
    "forward_fine.wgsl": (SCENE, "scene_access.wgsl", "scan.wgsl", "fine_bin.wgsl", STAGING, FOCUS, "forward_walk.wgsl"),
    "backward.wgsl": (SCENE, "scene_access.wgsl", STAGING, REDUCTION, FOCUS, "backward_walk.wgsl"),
    "forward_backward.wgsl": (SCENE, "scene_access.wgsl", "scan.wgsl", "schedule.wgsl", "tile_bin.wgsl", STAGING, FOCUS,
                              "forward_walk.wgsl", REDUCTION, "backward_walk.wgsl"),
    "naive_forward.wgsl": (SCENE, "scene_access.wgsl",),
    "render.wgsl": (SCENE, "scene_access.wgsl", "scan.wgsl"),
    "reduce.wgsl": ("reduce_param.wgsl", "loss_record.wgsl"),
    "loss_reduce.wgsl": ("loss_record.wgsl",),
    "adam.wgsl": ("reduce_param.wgsl", "loss_record.wgsl", "schedule.wgsl"),
    "events.wgsl": (),
    "respawn_flags.wgsl": (),
    "permute.wgsl": (),
    "costs.wgsl": (),
}


def constants(name: str, kb: int = 1, subgroup_size: int = 0, ppt: int = 1, costs: bool = False) -> str:
    """The variant's WGSL constants for kernel ``name``."""
    threads = 256 // ppt
    lines = [f"const SPREAD_CELLS: bool = {str(spreads_cells(name, ppt)).lower()};  "
             "// workgroups take tiles in a spread order (common.wgsl spread_cell)"]
    if "reduce_param.wgsl" in PIECES.get(name, ()):
        serial = serial_lanes(ppt)
        lines.append(f"const PARAMS_PER_GROUP: u32 = {params_per_group(ppt)}u;  // triangle parameters a workgroup")
        lines.append(f"const SERIAL_LANES: bool = {str(serial).lower()};  // one thread a parameter, its lanes in turn")
        lines.append(f"const SUM_LANES: u32 = {SUM_LANES}u;  // a triangle's parameter: the sum's lanes")
        lines.append(f"const TILE_LANES: u32 = {1 if serial else SUM_LANES}u;  // threads a parameter")
    if name == "adam.wgsl":  # the reference loop's, so the two cannot drift apart
        from ..fitloop import SMALL_RATE_MIN

        lines.append(f"const SMALL_RATE_MIN: f32 = {SMALL_RATE_MIN!r};  // render/fitloop.py")
    if name == "events.wgsl":  # the host's placement constants, so the two cannot drift apart
        from .. import placement
        from ..fitloop import LOGIT_EPS
        from . import events

        for const in ("PLACE_IN", "PLACE_OUT"):
            lines.append(f"const {const}: u32 = {int(getattr(events, const))}u;  // render/gpu/events.py")
        lines.append(f"const LOGIT_EPS: f32 = {LOGIT_EPS!r};  // render/fitloop.py")
        lines.append(f"const VAR_PER_R2: f32 = {placement.VAR_PER_R2!r};  // render/placement.py, as the next two")
        lines.append(f"const MIN_VAR_PX: f32 = {placement.MIN_VAR_PX!r};")
        lines.append(f"const MAX_SAMPLES_PER_SIDE: i32 = {int(placement.MAX_SAMPLES_PER_SIDE)};")
    if name in ("events.wgsl", "permute.wgsl"):  # (the one writes the rows the other gathers)
        from ..fitloop import FRESH_ROW

        lines.append(f"const FRESH_ROW: u32 = {FRESH_ROW}u;  // floats in a fresh row (render/fitloop.py)")
    if "fine_bin.wgsl" in PIECES.get(name, ()):
        lines.append(f"const SUPER: u32 = {SUPER_TILES}u;  // tiles a super-tile spans each way (two-pass binning)")
        lines.append(f"const FINE_WORDS: u32 = {FINE_MASK_WORDS}u;  // mask words a tile's workgroup holds (fine_bin.wgsl)")
    if SCENE in PIECES.get(name, ()):
        lines.append(f"const SCENE_VEC4S: u32 = {SCENE_UNIFORM_BYTES // 16}u;  // the uniform scene binding's vec4s")
    if name in _PPT_KERNELS:
        lines.append(f"const PPT: u32 = {int(ppt)}u;  // pixels per thread")
        lines.append(f"const THREADS: u32 = {threads}u;  // WG / PPT")
    if "forward_walk.wgsl" in PIECES.get(name, ()) or "backward_walk.wgsl" in PIECES.get(name, ()):
        lines.append(f"const HANDED_OFF: bool = {str(hands_off(name, ppt)).lower()};  "
                     "// the backward starts from the forward's pixels in this thread (common.wgsl)")
        lines.append(f"const VECTOR_SKIP: bool = {str(skips_by_vector(name, ppt)).lower()};  "
                     "// entries a subgroup's pixels cannot reach are skipped (render/gpu/shaders.py)")
    if "forward_walk.wgsl" in PIECES.get(name, ()):
        lines.append(f"const STAGE: u32 = {staging(ppt).forward}u;  // triangles staged a round (render/gpu/shaders.py)")
    if "backward_walk.wgsl" in PIECES.get(name, ()):
        lines.append(f"const BSTAGE: u32 = {staging(ppt).backward}u;  // triangles staged a backward round "
                     "(render/gpu/shaders.py)")
        lines.append(f"const DEFER_RECOMPOSE: bool = {str(defers_recompose(ppt)).lower()};  "
                     "// re-composites outside the loop over entries (render/gpu/shaders.py)")
        lines.append(f"const KB: u32 = {int(kb)}u;  // triangles per barrier pair (render/gpu/shaders.py)")
        lines.append(f"const COSTS_BY_VARIANT: bool = {str(costs_by_variant(ppt)).lower()};  "
                     "// removal costs or gradients by the pipeline, not frame.removal_costs (render/gpu/shaders.py)")
        lines.append(f"const COSTS_VARIANT: bool = {str(bool(costs)).lower()};  // ... and this pipeline's: costs")
        lines.append(f"const MAX_SUBGROUPS: u32 = {max_subgroups(subgroup_size, threads)}u;  "
                     "// THREADS / probed subgroup size")
        lines.append(f"const SG_SIZE: u32 = {int(subgroup_size)}u;  // probed subgroup size (0: unknown)")
        lines.append(f"const SG_SPLITS: u32 = {subgroup_splits(subgroup_size)}u;  "
                     "// reduce_subgroup.wgsl's transposing exchange steps")
    return "\n".join(lines) + "\n"


def compose(generated: str, parts: list[tuple[str, str]]) -> str:
    """``generated`` WGSL, then the (label, text) parts in order; a part that spells a struct of
    ``generated`` is refused (its one declaration is in render/gpu/layouts.py)."""
    owned = set(layouts.declared_structs(generated))
    for label, text in parts:
        spelled = sorted(owned.intersection(layouts.declared_structs(text)))
        if spelled:
            raise ValueError(f"{label} spells struct {', '.join(spelled)}, which render/gpu/layouts.py "
                             "generates for every kernel: delete it from the file")
    return "\n".join([generated] + [f"// ---- {label}\n{text}" for label, text in parts if text])


def kernel_source(name: str, subgroups: bool, kb: int = 1, subgroup_size: int = 0, ppt: int = 1,
                  weighted: bool = False, scene_uniform: bool = False, costs: bool = False) -> str:
    """``weighted``: the kernels that evaluate the loss weigh it by a focus map (FOCUS);
    ``scene_uniform``: the rasterising kernels read the scene records from a uniform binding (SCENE);
    ``costs``: the backward's walk sums removal costs (where a variant decides it: costs_by_variant)."""
    if name not in PIECES:
        raise ValueError(f"unknown kernel {name!r} (kernels: {', '.join(PIECES)})")
    chosen = {REDUCTION: ("reduce_subgroup.wgsl" if subgroups else "reduce_workgroup.wgsl",),
              FOCUS: ("focus_map.wgsl" if weighted else "focus_none.wgsl",),
              SCENE: ("scene_uniform.wgsl" if scene_uniform else "scene_storage.wgsl",),
              STAGING: staging(ppt, shares_reads(subgroups, subgroup_size)).pieces}
    pieces = [piece for p in PIECES[name] for piece in chosen.get(p, (p,))]
    parts = [("shaders/common.wgsl", source("common.wgsl")),
             ("constants (render/gpu/shaders.py)", constants(name, kb, subgroup_size, ppt, costs))]
    parts += [(f"shaders/{p}", source(p)) for p in [*pieces, name]]
    return compose(layouts.kernel_layouts(), parts)


def check_pixels_per_thread(ppt) -> int:
    """The pixels (bin: triangles) per thread the kernels are written for: 1, 2, 4 or 8."""
    if ppt not in (1, 2, 4, 8):
        raise ValueError(f"pixels_per_thread must be 1, 2, 4 or 8, got {ppt}")
    return int(ppt)


def _variant(device, name: str, entry: str, subgroups: bool, workgroup_storage: int, subgroup_size: int, ppt: int,
             weighted: bool, scene_uniform: bool = False, costs: bool = False) -> tuple[tuple, int, int, bool, bool, bool]:
    """(cache key, backward batch, pixels per thread, weighted, scene_uniform, costs) of a kernel's pipeline
    variant."""
    is_backward = "backward_walk.wgsl" in PIECES.get(name, ())
    reduces = "reduce_param.wgsl" in PIECES.get(name, ())  # (its lanes: threads or in turn)
    ppt = check_pixels_per_thread(ppt) if name in _PPT_KERNELS or reduces else 1
    if is_backward and "forward_walk.wgsl" in PIECES.get(name, ()):  # (the fused walk: the forward's share)
        st = staging(ppt)
        workgroup_storage -= (st.forward - st.backward) * st.record_bytes + 4 * (256 // ppt) + 1024
    kb = backward_batch(workgroup_storage, subgroups, subgroup_size, ppt) if is_backward else 1
    weighted = bool(weighted) and FOCUS in PIECES.get(name, ())
    subgroups = bool(subgroups) and (is_backward or STAGING in PIECES.get(name, ()))  # (who reads it)
    scene_uniform = bool(scene_uniform) and SCENE in PIECES.get(name, ())
    costs = bool(costs) and is_backward and costs_by_variant(ppt)  # (elsewhere the frame's flag decides)
    # the device itself: ids get reused
    return ((device, name, entry, subgroups, kb, subgroup_size, ppt, weighted, scene_uniform, costs), kb, ppt,
            weighted, scene_uniform, costs)


def pipeline(device, name: str, entry: str = "main", subgroups: bool = False, workgroup_storage: int = 16384,
             subgroup_size: int = 0, ppt: int = 1, weighted: bool = False, scene_uniform: bool = False,
             costs: bool = False):
    """``ppt``: pixels per thread of the forward and backward kernels, triangles per thread of the
    bin kernel (1, 2, 4 or 8); others ignore it. ``weighted``: the focus-map variant of the kernels
    that have one (FOCUS); ``scene_uniform``: the uniform-binding variant of the kernels that read
    the scene records (SCENE); ``costs``: the removal-cost variant of the kernels that walk the
    backward, where a variant decides it (costs_by_variant); others ignore them."""
    key, kb, ppt, weighted, scene_uniform, costs = _variant(device, name, entry, subgroups, workgroup_storage,
                                                            subgroup_size, ppt, weighted, scene_uniform, costs)
    with _lock:
        found = _pipelines.get(key)
        if found is not None:
            return found
    module = device.create_shader_module(label=name, code=kernel_source(name, subgroups, kb, subgroup_size, ppt, weighted,
                                                                        scene_uniform, costs))
    pl = device.create_compute_pipeline(
        label=f"{name}:{entry}", layout="auto", compute={"module": module, "entry_point": entry}
    )
    with _lock:  # two threads that built the same variant at once return the same one
        return _pipelines.setdefault(key, pl)


def built(device, name: str, entry: str = "main", subgroups: bool = False, workgroup_storage: int = 16384,
          subgroup_size: int = 0, ppt: int = 1, weighted: bool = False, scene_uniform: bool = False,
          costs: bool = False) -> bool:
    """Whether :func:`pipeline` with these arguments would return a cached pipeline."""
    key = _variant(device, name, entry, subgroups, workgroup_storage, subgroup_size, ppt, weighted, scene_uniform,
                   costs)[0]
    with _lock:
        return key in _pipelines
