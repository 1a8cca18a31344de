"""The buffer pool: size classes, reuse, the idle cap."""

import numpy as np
import pytest
import wgpu

from trifit.gpu.pool import BufferPool, size_class

pytestmark = pytest.mark.gpu


def test_size_classes_waste_at_most_a_third():
    for n in [1, 255, 256, 257, 383, 384, 385, 1000, 4097, 10**6, 3 * 2**20 + 1]:
        c = size_class(n)
        assert c >= n and c >= 256 and (c == 256 or (c - n) / c <= 1 / 3 + 1e-9)
    # near a device limit the class never exceeds it
    assert 900 <= size_class(900, cap=1000) <= 1000
    assert size_class(1000, cap=1000) == 1000


def test_reuse_and_idle_cap(gpu_ctx):
    import wgpu

    pool = BufferPool(gpu_ctx.device, max_idle_bytes=4096)
    use = wgpu.BufferUsage.STORAGE
    a = pool.acquire(use, 1000)
    pool.release(a)
    b = pool.acquire(use, 900)       # same class (1024): reused
    assert b is a and pool.hits == 1 and pool.misses == 1
    bufs = [pool.acquire(use, 2048) for _ in range(4)]
    for x in bufs + [b]:
        pool.release(x)
    s = pool.stats()
    assert s["idle_bytes"] <= 4096 and s["bytes"] == s["idle_bytes"]  # oldest idle buffers destroyed
    assert s["in_use_bytes"] == 0 and s["peak_in_use_bytes"] == 4 * 2048 + 1024


@pytest.mark.parametrize("call", ["render", "removal_costs", "mse_records"])
def test_a_transient_call_that_fails_gives_its_buffers_back(gpu_ctx, monkeypatch, call):
    """A one-off (transient) call's workspace and pooled buffers go back to the pool when the call
    fails half-way (here: the submission), as they do when it succeeds; and its timestamp spans
    go too (the next call resolving queries no submission wrote hung on an H100)."""
    from trifit.errors import DeviceLostError
    from trifit.gpu.backend import GpuBackend

    backend = GpuBackend(gpu_ctx)
    rng = np.random.default_rng(0)
    tris = rng.uniform(0.1, 0.9, (1, 6, 10))
    bg, sigma = np.full((1, 3), 0.5), np.array([0.01])
    target = rng.uniform(0, 1, (1, 24, 32, 3)).astype(np.float32)
    records = backend.pool.acquire(wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST,
                                   4096, "records")
    calls = {
        "render": lambda: backend.render_batch(tris, bg, sigma, 32, 24, transient=True),
        "removal_costs": lambda: backend.removal_costs_batch(tris, bg, sigma, target, transient=True),
        "mse_records": lambda: backend.mse_records(records, 6, [0], sigma, target, transient=True),
    }
    before = backend.pool.stats()["in_use_bytes"]

    def lost(*args, **kw):
        raise DeviceLostError("the GPU device was lost (test)")

    monkeypatch.setattr(backend, "_submit_and_read", lost)
    with pytest.raises(DeviceLostError):
        calls[call]()
    assert backend.pool.stats()["in_use_bytes"] == before
    assert backend.timer.pending == ()
    monkeypatch.undo()
    calls[call]()  # and the pool still serves the same call
    assert backend.pool.stats()["in_use_bytes"] == before
