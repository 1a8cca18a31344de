"""Reading a mapped buffer back: the fit loop's chunk ends, the timestamps and the workspace's reads.

wgpu-py's ``map_sync`` hands the wait to its device's poll thread: the call makes an empty
submission of its own (wgpu-py's guard for buffers nothing wrote), wakes that thread, which blocks
in the driver until the GPU is done and resolves the map's promise, and is woken again -- for every
readback, which a long fit makes at every chunk end. Here the calling thread maps through
wgpu-native's entry points and polls the device itself until the map's callback has run (one
callback for the process), so a chunk end is one thread's work (docs/PERFORMANCE.md, "Readbacks
on the fit's own thread"). Where this wgpu-py has another layout (the version is pinned in
pyproject.toml), ``map_sync`` does it as before; the bytes are the same either way
(tests/test_gpu_readback.py)."""

from __future__ import annotations

import itertools
import threading

import numpy as np
import wgpu


class _Native:
    """wgpu-native's map, poll, mapped-range and unmap entry points, and one map callback."""

    def __init__(self):
        from wgpu.backends.wgpu_native._ffi import ffi, lib

        self.ffi, self.lib = ffi, lib
        self.done: dict[int, int] = {}  # map request -> its status, set by the callback
        self.raised: dict[int, BaseException] = {}  # thread -> what interrupted a callback it ran
        self._requests = itertools.count(1)  # (next() is atomic: readers on several threads)

        def interrupted(_type, value, tb):
            # A Ctrl+C lands in whichever Python code the main thread runs, and while it waits that
            # is this callback, inside the driver's poll, where cffi would print the exception and
            # drop it: the map would look lost. So the callback's work is done here from its frame,
            # and the exception kept for the polling thread to raise once the poll returns.
            frame = tb.tb_frame if tb is not None else None
            if frame is not None and "userdata1" in frame.f_locals:
                self.done[int(ffi.cast("uintptr_t", frame.f_locals["userdata1"]))] = int(frame.f_locals["status"])
            self.raised[threading.get_ident()] = value

        @ffi.callback("void(WGPUMapAsyncStatus, WGPUStringView, void *, void *)", onerror=interrupted)
        def mapped(status, _message, userdata1, _userdata2):
            # (runs inside whichever thread's poll processed the map: this one's, or wgpu-py's)
            self.done[int(ffi.cast("uintptr_t", userdata1))] = int(status)

        self._callback = mapped  # (referenced for the process's life: wgpu-native holds the pointer)
        self.info = (lib.WGPUCallbackMode_AllowProcessEvents, lib.WGPUMapMode_Read, lib.WGPUMapAsyncStatus_Success)
        for name in ("wgpuBufferMapAsync", "wgpuDevicePoll", "wgpuBufferGetConstMappedRange", "wgpuBufferUnmap"):
            getattr(lib, name)  # (AttributeError: another layout)

    def read(self, buffer, ranges: list[tuple[int, int]]) -> list[np.ndarray]:
        ffi, lib = self.ffi, self.lib
        allow, read_mode, success = self.info
        if any(offset < 0 or offset + size > buffer.size for offset, size in ranges):
            raise ValueError(f"ranges {ranges} reach outside a {buffer.size}-byte buffer")
        request = next(self._requests)
        info = ffi.new("WGPUBufferMapCallbackInfo *")
        info.mode = allow
        info.callback = self._callback
        info.userdata1 = ffi.cast("void *", request)
        lib.wgpuBufferMapAsync(buffer._internal, read_mode, 0, buffer.size, info[0])
        device, idle_polls = buffer._device._internal, 0
        while request not in self.done:
            # (blocks until the queue's work is done, then runs the callbacks of what it finished; a
            # map whose callback has not run after three polls of an idle queue never will)
            idle = lib.wgpuDevicePoll(device, True, ffi.NULL)
            idle_polls = idle_polls + 1 if idle else 0
            exc = self.raised.pop(threading.get_ident(), None)
            if exc is not None:  # (a Ctrl+C during the poll: the map is left unmapped, then raised)
                if self.done.pop(request, None) == success:
                    lib.wgpuBufferUnmap(buffer._internal)
                raise exc
            if idle_polls > 2 and request not in self.done:
                raise wgpu.GPUError("a readback's map never completed: the GPU device may have been lost")
        status = self.done.pop(request)
        if status != success:
            raise wgpu.GPUError(f"could not map a readback buffer (status {status}): the GPU device may have been lost")
        try:
            # (the whole range once, sliced here: wgpu-native aborts the process on a misaligned one)
            ptr = lib.wgpuBufferGetConstMappedRange(buffer._internal, 0, buffer.size)
            if ptr == ffi.NULL:
                raise wgpu.GPUError("could not read a mapped readback buffer")
            whole = np.frombuffer(ffi.buffer(ptr, buffer.size), dtype=np.uint8)
            return [whole[offset:offset + max(size, 0)].copy() for offset, size in ranges]
        finally:
            lib.wgpuBufferUnmap(buffer._internal)


_native: list = []  # [the _Native, or None where this wgpu-py does not expose the entry points]
_native_lock = threading.Lock()


def native() -> _Native | None:
    """The entry points, looked up at the first readback (after the engine has imported wgpu-py's
    backend its own way: render/gpu/typecache.py); None where this wgpu-py lacks them."""
    if not _native:
        with _native_lock:
            if not _native:
                try:
                    _native.append(_Native())
                except (ImportError, AttributeError):
                    _native.append(None)
    return _native[0]


def read_ranges(buffer, ranges: list[tuple[int, int]], use_native: bool = True) -> list[np.ndarray]:
    """The bytes (uint8 copies) of each (offset, size) of the MAP_READ ``buffer``, once the GPU has
    run what was submitted: the buffer is mapped whole, the ranges copied out, and unmapped.
    ``use_native=False``: through wgpu-py's ``map_sync`` (the tests compare the two)."""
    entry_points = native() if use_native else None
    if entry_points is not None and getattr(buffer, "_internal", None) and \
            getattr(getattr(buffer, "_device", None), "_internal", None):
        return entry_points.read(buffer, ranges)
    buffer.map_sync(wgpu.MapMode.READ, 0, buffer.size)
    try:
        return [np.frombuffer(buffer.read_mapped(offset, size, copy=True), dtype=np.uint8).copy() if size > 0
                else np.empty(0, np.uint8) for offset, size in ranges]
    finally:
        buffer.unmap()
