"""WGSL sources from the ``shaders`` package, assembled and compiled once per device.

Each kernel file is prefixed with ``common.wgsl``; the backward kernel also gets one of the two
workgroup-reduction implementations (subgroup adds where the adapter has them, else a
workgroup-memory tree). Pipelines use ``layout="auto"`` and are cached per (device, kernel,
variant, entry point).
"""

from __future__ import annotations

import functools
import importlib.resources
import threading

_lock = threading.Lock()
_RASTER_KERNELS = ("bin.wgsl", "forward.wgsl", "backward.wgsl", "naive_forward.wgsl", "render.wgsl")
_PPT_KERNELS = ("bin.wgsl", "forward.wgsl", "backward.wgsl")  # several pixels (bin: triangles) per thread
_pipelines: dict[tuple, object] = {}


@functools.cache
def source(name: str) -> str:
    return importlib.resources.files("shaders").joinpath(name).read_text(encoding="utf-8")


def max_subgroups(subgroup_size: int, threads: int = 256) -> int:
    """Subgroup slots per workgroup the backward reserves: threads / the probed subgroup size (4,
    the smallest WebGPU allows, when unknown). Over-reserving costs occupancy (docs/PERFORMANCE.md)."""
    return max(1, threads // (subgroup_size if subgroup_size >= 4 else 4))


def backward_batch(workgroup_storage: int, subgroups: bool, subgroup_size: int = 0, ppt: int = 1) -> int:
    """KB: triangles whose workgroup sums share one barrier pair in the backward kernel, as many
    (up to 16) as the adapter's workgroup memory holds next to the staged triangles."""
    threads = 256 // ppt
    fixed = 128 * 48 + 128 * 4 + 16  # staged TriPx records and ids, counters
    per_slot = 3 * 16 * max_subgroups(subgroup_size, threads) if subgroups else 10 * 4
    if not subgroups:
        fixed += 10 * threads * 4
    return int(max(1, min(16, (workgroup_storage - fixed) // per_slot)))


def kernel_source(name: str, subgroups: bool, kb: int = 1, subgroup_size: int = 0, ppt: int = 1) -> str:
    parts = [source("common.wgsl")]
    threads = 256 // ppt
    if name in _PPT_KERNELS:
        parts.append(f"const PPT: u32 = {int(ppt)}u;  // pixels per thread")
        parts.append(f"const THREADS: u32 = {threads}u;  // WG / PPT")
    if name == "backward.wgsl":
        parts.append(f"const KB: u32 = {int(kb)}u;  // triangles per barrier pair (render/gpu/shaders.py)")
        parts.append(f"const MAX_SUBGROUPS: u32 = {max_subgroups(subgroup_size, threads)}u;  "
                     "// THREADS / probed subgroup size")
    if name in _RASTER_KERNELS:
        parts.append(source("scene_access.wgsl"))
    if name == "backward.wgsl":
        parts.append(source("reduce_subgroup.wgsl" if subgroups else "reduce_workgroup.wgsl"))
    if name == "adam.wgsl":
        parts.append(source("reduce.wgsl").split("@group(0)")[0])  # reduce_param, before the bindings
    if name in ("adam.wgsl", "loss_reduce.wgsl"):
        parts.append(source("loss_record.wgsl"))
    if name in ("adam.wgsl", "bin.wgsl"):
        parts.append(source("schedule.wgsl"))
    parts.append(source(name))
    return "\n".join(parts)


def check_pixels_per_thread(ppt) -> int:
    """The pixels (bin: triangles) per thread the kernels are written for: 1, 2 or 4."""
    if ppt not in (1, 2, 4):
        raise ValueError(f"pixels_per_thread must be 1, 2 or 4, got {ppt}")
    return int(ppt)


def pipeline(device, name: str, entry: str = "main", subgroups: bool = False, workgroup_storage: int = 16384,
             subgroup_size: int = 0, ppt: int = 1):
    """``ppt``: pixels per thread of the forward and backward kernels, triangles per thread of the
    bin kernel (1, 2 or 4); others ignore it."""
    is_backward = name == "backward.wgsl"
    ppt = check_pixels_per_thread(ppt) if name in _PPT_KERNELS else 1
    kb = backward_batch(workgroup_storage, subgroups, subgroup_size, ppt) if is_backward else 1
    key = (device, name, entry, subgroups and is_backward, kb, subgroup_size, ppt)  # the device itself: ids get reused
    with _lock:
        found = _pipelines.get(key)
        if found is not None:
            return found
    module = device.create_shader_module(label=name, code=kernel_source(name, subgroups, kb, subgroup_size, ppt))
    pl = device.create_compute_pipeline(
        label=f"{name}:{entry}", layout="auto", compute={"module": module, "entry_point": entry}
    )
    with _lock:
        _pipelines.setdefault(key, pl)
    return pl
