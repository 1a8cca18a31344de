"""Readbacks on the calling thread (render/gpu/readback.py): the same bytes as wgpu-py's map_sync,
no work left for wgpu-py's poll thread, a fit the same either way."""

import numpy as np
import pytest
import wgpu

from trifit import Fitter
from trifit.gpu import readback

pytestmark = pytest.mark.gpu


def _filled(device, data: np.ndarray):
    """A MAP_READ buffer that a submitted copy filled with ``data``."""
    src = device.create_buffer_with_data(data=data.tobytes(), usage=wgpu.BufferUsage.COPY_SRC)
    dst = device.create_buffer(size=data.nbytes, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
    enc = device.create_command_encoder()
    enc.copy_buffer_to_buffer(src, 0, dst, 0, data.nbytes)
    device.queue.submit([enc.finish()])
    return dst


def test_ranges_read_the_same_as_map_sync(gpu_ctx):
    assert readback.native() is not None  # the pinned wgpu-py has the entry points
    data = np.arange(4096, dtype=np.uint32) * np.uint32(2654435761)
    ranges = [(0, 16), (256, 1024), (4000, 0), (16376, 8)]
    got = {}
    for native in (True, False):
        buf = _filled(gpu_ctx.device, data)
        got[native] = readback.read_ranges(buf, ranges, use_native=native)
        assert buf.map_state == "unmapped"  # (and can be mapped again)
        again = readback.read_ranges(buf, [(0, 8)], use_native=native)[0]
        assert again.tobytes() == data[:2].tobytes()
    raw = data.view(np.uint8)
    for (offset, size), a, b in zip(ranges, got[True], got[False]):
        assert a.dtype == np.uint8 and a.tobytes() == b.tobytes() == raw[offset:offset + size].tobytes()


def test_many_reads_complete_and_leave_no_request_behind(gpu_ctx):
    data = np.arange(64, dtype=np.float32)
    buf = _filled(gpu_ctx.device, data)
    for k in range(50):
        enc = gpu_ctx.device.create_command_encoder()  # (a submission in flight before each map)
        gpu_ctx.device.queue.submit([enc.finish()])
        assert readback.read_ranges(buf, [(4 * k % 256, 4)])[0].view(np.float32)[0] == data[k % 64]
    assert readback.native().done == {}


def test_a_map_that_fails_raises_a_gpu_error_and_keeps_the_buffer_usable(gpu_ctx):
    buf = _filled(gpu_ctx.device, np.ones(16, np.float32))
    buf.map_sync(wgpu.MapMode.READ)  # mapped already: wgpu-native refuses a second map
    try:
        with pytest.raises(wgpu.GPUError, match="could not map"):
            readback.read_ranges(buf, [(0, 4)])
    finally:
        buf.unmap()
    assert readback.read_ranges(buf, [(0, 4)])[0].view(np.float32)[0] == 1.0


def test_ctrl_c_inside_the_map_callback_reaches_the_reader(gpu_ctx, monkeypatch):
    """A KeyboardInterrupt raised while the map's callback runs (where a waiting main thread takes
    Ctrl+C) is raised by the read, not dropped by cffi as a lost map, and the buffer is usable after."""
    native = readback.native()
    data = np.arange(64, dtype=np.uint32)

    class Interrupting(dict):
        armed = True

        def __setitem__(self, key, value):
            if Interrupting.armed:
                Interrupting.armed = False
                raise KeyboardInterrupt
            super().__setitem__(key, value)

    monkeypatch.setattr(native, "done", Interrupting())
    buf = _filled(gpu_ctx.device, data)
    with pytest.raises(KeyboardInterrupt):
        readback.read_ranges(buf, [(0, 16)])
    assert buf.map_state == "unmapped" and not native.done and not native.raised
    assert readback.read_ranges(buf, [(0, 16)])[0].tobytes() == data[:4].tobytes()


def test_a_fit_reads_back_the_same_either_way(gpu_engine, monkeypatch):
    target = np.random.default_rng(3).random((30, 40, 3))
    scenes, calls = [], {"map_sync": 0}
    real = wgpu.GPUBuffer.map_sync

    def counted(self, *a, **kw):
        calls["map_sync"] += 1
        return real(self, *a, **kw)

    monkeypatch.setattr(wgpu.GPUBuffer, "map_sync", counted)
    for native in (None, readback.native()):
        monkeypatch.setattr(readback, "_native", [native])
        before = calls["map_sync"]
        f = Fitter(target, triangles=12, size=40, seed=2, engine=gpu_engine, chunk=25, first_submission=3)
        f.step(80)
        scenes.append((f.scene, f.history.losses.tobytes()))
        f.close()
        assert (calls["map_sync"] > before) == (native is None)
    (a, la), (b, lb) = scenes
    assert a.triangles.tobytes() == b.triangles.tobytes() and a.sigma == b.sigma and la == lb
