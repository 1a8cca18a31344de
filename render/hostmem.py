"""The host's native memory in use, as glibc's malloc counts it: where a native leak (a driver's or
wgpu-native's) shows at once, while the process's RSS hides it until the heap's free pages are
used up. Used by the leak test (tests/test_gpu_leaks.py) and the soak test (tools/soak.py)."""

from __future__ import annotations

import ctypes
import functools
import sys


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


@functools.cache
def _mallinfo2():
    """glibc's mallinfo2, loaded once (None off Linux or off glibc, or a glibc before 2.33)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
    except (OSError, AttributeError):
        return None
    return libc.mallinfo2


def malloc_in_use() -> int | None:
    """Bytes glibc's malloc has handed out and not had back, its heap's and its mapped blocks'
    (None where glibc's mallinfo2 is missing)."""
    mallinfo2 = _mallinfo2()
    if mallinfo2 is None:
        return None
    info = mallinfo2()
    return info.uordblks + info.hblkhd


__all__ = ["malloc_in_use"]
