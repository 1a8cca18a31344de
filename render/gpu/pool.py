"""A pool of GPU buffers keyed on (usage, size).

Buffers are taken with :meth:`BufferPool.acquire` and given back with :meth:`release`; a released
buffer is handed out again to the next request of the same key, so a repeated identical step
allocates nothing (``pool_stats()['misses']`` stays put). Sizes are rounded up to 256 bytes so
near-equal requests share buffers.
"""

from __future__ import annotations

import threading
from collections import defaultdict


def _round(size: int) -> int:
    return max(256, (int(size) + 255) // 256 * 256)


class BufferPool:
    def __init__(self, device):
        self._device = device
        self._free: dict[tuple[int, int], list] = defaultdict(list)
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.bytes = 0  # bytes of every buffer the pool ever allocated (all are kept)
        self.peak_in_use = 0
        self._in_use = 0

    def acquire(self, usage: int, size: int, label: str = ""):
        key = (int(usage), _round(size))
        with self._lock:
            free = self._free[key]
            if free:
                self.hits += 1
                buf = free.pop()
            else:
                self.misses += 1
                self.bytes += key[1]
                buf = self._device.create_buffer(size=key[1], usage=key[0], label=label or "pool")
            self._in_use += key[1]
            self.peak_in_use = max(self.peak_in_use, self._in_use)
            return buf

    def release(self, buf) -> None:
        with self._lock:
            self._in_use -= buf.size
            self._free[(int(buf.usage), int(buf.size))].append(buf)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "hits": self.hits,
                "misses": self.misses,
                "bytes": self.bytes,
                "in_use_bytes": self._in_use,
                "peak_in_use_bytes": self.peak_in_use,
            }

    def clear(self) -> None:
        """Destroy the free buffers (buffers in use are untouched)."""
        with self._lock:
            for bufs in self._free.values():
                for b in bufs:
                    self.bytes -= b.size
                    b.destroy()
            self._free.clear()
