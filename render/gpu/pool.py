"""A pool of GPU buffers keyed on (usage, size class).

Buffers are taken with :meth:`BufferPool.acquire` and given back with :meth:`release`; a released
buffer is handed out again to the next request of the same key, so a repeated identical step
allocates nothing (``pool_stats()['misses']`` stays put). Sizes are rounded up to a size class
(2^k or 1.5 * 2^k bytes, at least 256: at most a third wasted) so that nearby shapes -- a
triangle count changed live from the GUI, say -- share buffers instead of each allocating their
own. Idle buffers beyond ``max_idle_bytes`` are destroyed, least recently released first, so a
long session with many different shapes stays bounded.
"""

from __future__ import annotations

import threading
from collections import OrderedDict


def size_class(size: int, cap: int | None = None) -> int:
    """Smallest 2^k or 1.5 * 2^k >= size (>= 256); ``cap`` keeps it within a device limit."""
    size = max(256, int(size))
    p = 1 << (size - 1).bit_length()  # next power of two
    c = p if p // 4 * 3 < size else p // 4 * 3
    if cap is not None and c > cap >= size:
        c = min(cap, (size + 255) // 256 * 256) // 4 * 4 if size % 4 == 0 else (size + 3) // 4 * 4
    return c


class BufferPool:
    def __init__(self, device, max_idle_bytes: int = 256 * 2**20, max_buffer_bytes: int | None = None):
        self._device = device
        self._free: OrderedDict[int, tuple[tuple[int, int], object]] = OrderedDict()  # id -> (key, buf), LRU order
        self._lock = threading.Lock()
        self.max_idle_bytes = max_idle_bytes
        self.max_buffer_bytes = max_buffer_bytes
        self.hits = 0
        self.misses = 0
        self.bytes = 0  # bytes of the buffers the pool holds now (in use + idle)
        self.peak_bytes = 0
        self._in_use = 0
        self.peak_in_use = 0
        self._idle = 0

    def acquire(self, usage: int, size: int, label: str = ""):
        key = (int(usage), size_class(size, self.max_buffer_bytes))
        with self._lock:
            found = next((bid for bid, (k, _) in self._free.items() if k == key), None)
            if found is not None:
                _, buf = self._free.pop(found)
                self.hits += 1
                self._idle -= key[1]
            else:
                self.misses += 1
                self.bytes += key[1]
                self.peak_bytes = max(self.peak_bytes, self.bytes)
                buf = self._device.create_buffer(size=key[1], usage=key[0], label=label or "pool")
            self._in_use += key[1]
            self.peak_in_use = max(self.peak_in_use, self._in_use)
            return buf

    def release(self, buf) -> None:
        key = (int(buf.usage), int(buf.size))
        with self._lock:
            self._in_use -= key[1]
            self._idle += key[1]
            self._free[id(buf)] = (key, buf)
            while self._idle > self.max_idle_bytes and self._free:
                _, (k, old) = self._free.popitem(last=False)
                self._idle -= k[1]
                self.bytes -= k[1]
                old.destroy()

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "hits": self.hits,
                "misses": self.misses,
                "bytes": self.bytes,
                "peak_bytes": self.peak_bytes,
                "in_use_bytes": self._in_use,
                "idle_bytes": self._idle,
                "peak_in_use_bytes": self.peak_in_use,
            }

    def clear(self) -> None:
        """Destroy the idle buffers (buffers in use are untouched)."""
        with self._lock:
            for k, b in self._free.values():
                self.bytes -= k[1]
                b.destroy()
            self._free.clear()
            self._idle = 0
