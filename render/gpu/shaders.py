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
_RASTER_KERNELS = ("bin.wgsl", "forward.wgsl", "backward.wgsl")
_pipelines: dict[tuple, object] = {}


@functools.cache
def source(name: str) -> str:
    return importlib.resources.files("shaders").joinpath(name).read_text(encoding="utf-8")


def kernel_source(name: str, subgroups: bool) -> str:
    parts = [source("common.wgsl")]
    if name in _RASTER_KERNELS:
        parts.append(source("scene_access.wgsl"))
    if name == "backward.wgsl":
        parts.append(source("reduce_subgroup.wgsl" if subgroups else "reduce_workgroup.wgsl"))
    parts.append(source(name))
    return "\n".join(parts)


def pipeline(device, name: str, entry: str = "main", subgroups: bool = False):
    key = (id(device), name, entry, subgroups and name == "backward.wgsl")
    with _lock:
        found = _pipelines.get(key)
        if found is not None:
            return found
    module = device.create_shader_module(label=name, code=kernel_source(name, subgroups))
    pl = device.create_compute_pipeline(
        label=f"{name}:{entry}", layout="auto", compute={"module": module, "entry_point": entry}
    )
    with _lock:
        _pipelines.setdefault(key, pl)
    return pl
