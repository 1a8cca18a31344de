"""One shared wgpu device per process, requested with what the adapter offers that we use.

The device is shared by the engine, the fitter and the GUI canvas (so the canvas can draw the
fitter's buffers without a readback). wgpu-py's timestamp period has no getter, so the instance is
set to normalise timestamps to nanoseconds before the first adapter request.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field

from ..errors import AdapterError, DeviceLostError

log = logging.getLogger("trifit.gpu")

_WANTED_FEATURES = ("subgroup", "timestamp-query", "timestamp-query-inside-passes")
_LIMITS_TO_RAISE = (
    "max-storage-buffers-per-shader-stage",
    "max-compute-workgroup-storage-size",
    "max-storage-buffer-binding-size",
    "max-buffer-size",
    "max-compute-workgroups-per-dimension",
)

_lock = threading.Lock()
_shared: GpuContext | None = None
_instance_configured = False


@dataclass
class GpuContext:
    adapter: object
    device: object
    features: frozenset[str]
    limits: dict[str, int]
    info: dict[str, str] = field(default_factory=dict)
    subgroup_size: int = 0  # measured by a probe kernel (0: no subgroup feature)
    ready_at: float = 0.0   # time.perf_counter() when it was made (a command's start-up timeline)

    @property
    def has_subgroups(self) -> bool:
        return "subgroup" in self.features

    @property
    def has_pass_timestamps(self) -> bool:
        return "timestamp-query-inside-passes" in self.features and "timestamp-query" in self.features

    def describe(self) -> str:
        i = self.info
        return f"{i['name']} ({i['backend']}, {i['type']})"


def _configure_instance() -> None:
    global _instance_configured
    if _instance_configured:
        return
    _instance_configured = True
    if not os.environ.get("XDG_RUNTIME_DIR"):
        # Mesa's Vulkan WSI prints "XDG_RUNTIME_DIR is invalid" on every adapter request when it
        # is unset (headless servers, CI); give it a private folder so the CLI's stderr stays clean.
        import tempfile

        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="trifit-xdg-")
    from .typecache import prime_wgpu

    prime_wgpu()  # the C types a fit uses, in one parse (render/gpu/typecache.py)
    try:
        from wgpu.backends.wgpu_native import extras

        extras.set_instance_extras(flags=["Default", "AutomaticTimestampNormalization"])
    except Exception as exc:  # an instance may already exist (e.g. a canvas made one first)
        log.debug("could not set instance extras: %s", exc)


def adapter_summary(adapter) -> dict[str, str]:
    info = adapter.info
    return {
        "name": str(info.get("device", "") or info.get("description", "unknown")),
        "backend": str(info.get("backend_type", "unknown")),
        "type": str(info.get("adapter_type", "unknown")),
        "vendor": str(info.get("vendor", "")),
        "driver": str(info.get("description", "")),
    }


#: ``TRIFIT_ADAPTER=K`` pins this process to the K-th of :func:`list_adapters` (counted from 0): on a
#: host with several GPUs, one process (a cluster worker) per GPU
ADAPTER_ENV = "TRIFIT_ADAPTER"


def request_adapter():
    """The adapter wgpu prefers (high performance), or None when there is none at all; with
    ``TRIFIT_ADAPTER=K`` set, the K-th of :func:`list_adapters` (AdapterError when there is none)."""
    pick = os.environ.get(ADAPTER_ENV, "").strip()
    if pick:
        adapters = list_adapters()
        if not pick.isdigit() or int(pick) >= len(adapters):
            raise AdapterError(f"{ADAPTER_ENV}={pick}: expected an adapter index from 0 to {len(adapters) - 1} "
                               f"({len(adapters)} adapter(s) found)" if adapters else
                               f"{ADAPTER_ENV}={pick}: no adapter found")
        return adapters[int(pick)]
    return _preferred_adapter()


def _preferred_adapter():
    _configure_instance()
    import wgpu

    try:
        return wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    except Exception as exc:
        log.info("no wgpu adapter: %s", exc)
        return None


def list_adapters() -> list:
    """The adapters ``TRIFIT_ADAPTER`` indexes, in wgpu's (the driver's) order: those of the preferred
    adapter's backend (Vulkan, Metal, D3D12; not the same device again through OpenGL), and of
    them the GPUs where there is any (not a software rasterizer beside them)."""
    preferred = _preferred_adapter()
    if preferred is None:
        return []
    import wgpu

    try:
        found = wgpu.gpu.enumerate_adapters_sync()
    except Exception as exc:
        log.info("cannot enumerate wgpu adapters: %s", exc)
        return [preferred]
    backend = preferred.info.get("backend_type")
    same = [a for a in found if a.info.get("backend_type") == backend]
    gpus = [a for a in same if a.info.get("adapter_type") in ("DiscreteGPU", "IntegratedGPU")]
    return gpus or same or [preferred]


def get_context(force_new: bool = False) -> GpuContext:
    """The process-wide GPU context; raises AdapterError when no adapter exists."""
    global _shared
    with _lock:
        if _shared is not None and not force_new:
            return _shared
        if os.environ.get("TRIFIT_NO_GPU"):
            raise AdapterError("GPU disabled by TRIFIT_NO_GPU")
        adapter = request_adapter()
        if adapter is None:
            raise AdapterError(
                "no GPU adapter found (on a machine without a GPU, install Mesa's lavapipe: "
                "apt-get install mesa-vulkan-drivers)"
            )
        features = frozenset(f for f in _WANTED_FEATURES if f in adapter.features)
        limits = {k: adapter.limits[k] for k in _LIMITS_TO_RAISE if k in adapter.limits}
        device = adapter.request_device_sync(
            label="trifit", required_features=sorted(features), required_limits=limits
        )
        _shared = GpuContext(adapter, device, features, dict(device.limits), adapter_summary(adapter))
        if _shared.has_subgroups:
            _shared.subgroup_size = probe_subgroup_size(device)
        _shared.ready_at = time.perf_counter()
        log.info("GPU adapter: %s (subgroup size %d)", _shared.describe(), _shared.subgroup_size)
        return _shared


_warming: threading.Thread | None = None


def warm_up() -> None:
    """Start making the process's GPU context in a background thread, so the driver's instance,
    adapter and device come up while the caller imports and reads its input; :func:`get_context`
    then waits for it (or, when it failed, tries again and raises). Does nothing once started."""
    global _warming
    with _lock:
        if _shared is not None or _warming is not None or os.environ.get("TRIFIT_NO_GPU"):
            return
        # wgpu-py's import is Python that holds the GIL: made here, before the thread starts, the
        # thread's work is the driver's, which releases it, and so overlaps the caller's own imports
        # (shared with them, the import would finish late and the device later still)
        try:
            _configure_instance()
        except Exception as exc:  # get_context() raises it again, where it is handled
            log.debug("GPU warm-up: %s", exc)

        # numpy's import sets OPENBLAS_MAIN_FREE and unsets it again (putenv, unsetenv) unless it is
        # set, and the driver's start in the thread reads the environment: glibc's getenv is not
        # safe against a concurrent setenv, and the two crashed a command's start now and then
        # (docs/RELIABILITY.md). Set as numpy sets it, so that its import leaves the environment alone.
        os.environ.setdefault("OPENBLAS_MAIN_FREE", "1")

        def make():
            try:
                get_context()
            except Exception as exc:  # the caller's own get_context() raises it, where it is handled
                log.debug("GPU warm-up: %s", exc)

        # not a daemon: an early exit (bad input) waits for the driver rather than unloading under it
        _warming = threading.Thread(target=make, name="trifit-gpu-warm-up")
        _warming.start()


def wait_warm_up() -> None:
    """Wait for the warm-up thread where one was started: a process about to leave without Python's
    teardown must not unload the driver under it."""
    thread = _warming
    if thread is not None and thread is not threading.current_thread():
        thread.join()


_PROBE = """
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) li: u32, @builtin(subgroup_size) size: u32,
        @builtin(num_subgroups) count: u32) {
    if (li == 0u) { out[0] = size; out[1] = count; }
}
"""


def probe_subgroup_size(device) -> int:
    """The subgroup size a 256-thread compute workgroup gets on this device (the backward kernel
    sizes its workgroup memory for 256 / size subgroups)."""
    import numpy as np
    import wgpu

    buf = device.create_buffer(size=16, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    pl = device.create_compute_pipeline(layout="auto", compute={
        "module": device.create_shader_module(code=_PROBE), "entry_point": "main"})
    bg = device.create_bind_group(layout=pl.get_bind_group_layout(0),
                                  entries=[{"binding": 0, "resource": {"buffer": buf}}])
    enc = device.create_command_encoder()
    cp = enc.begin_compute_pass()
    cp.set_pipeline(pl)
    cp.set_bind_group(0, bg)
    cp.dispatch_workgroups(1)
    cp.end()
    device.queue.submit([enc.finish()])
    size, count = (int(v) for v in np.frombuffer(device.queue.read_buffer(buf), dtype=np.uint32)[:2])
    buf.destroy()
    return size if size * count == 256 else 0


def as_device_lost(exc: BaseException) -> DeviceLostError | None:
    """``exc`` as a DeviceLostError where it says the device is lost -- wgpu raises a validation
    error ("Parent device is lost") from whatever call meets a lost device first, a buffer's
    creation as much as a submission --, else None."""
    if isinstance(exc, DeviceLostError):
        return exc
    import wgpu  # (loaded already wherever a wgpu call raised)

    if isinstance(exc, wgpu.GPUError) and "lost" in str(exc).lower():
        return DeviceLostError(f"the GPU device was lost: {str(exc).splitlines()[-1].strip()}")
    return None
