"""The buffer pool: size classes, reuse, the idle cap."""

import pytest

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
