"""Host work beside the fit: an iterator read ahead, and calls made behind, each on a thread of its own.

Why: a video's frames cost host work around every GPU fit -- decoding and resizing the next
frame, encoding the last one, writing its scene -- and done in line the GPU waits through all
of it. :class:`Prefetch` produces the next items while the fit runs; :class:`Behind` runs the
writes after it, in order. Both are bounded (``depth`` items), so a slow side holds the other
back instead of filling memory, and both take ``threaded=False`` to do the same work in line:
the same calls in the same order, so the two paths write the same bytes (tests/test_video.py).

Exceptions cross over: an error of the producer is raised by the ``next()`` that would have
returned its item; an error of a call made behind is raised by the next :meth:`Behind.call`
and by :meth:`Behind.close` (and the calls after it are not made).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator

#: how long a blocked side waits before looking again whether the other has ended
_POLL_S = 0.1
_END = object()


class Prefetch:
    """``make()``'s items, produced up to ``depth`` ahead on a thread of their own (the iterator
    is made and run on that thread: a decoder's state stays with one thread)."""

    def __init__(self, make: Callable[[], Iterator], depth: int = 4, *, threaded: bool = True,
                 name: str = "trifit-prefetch"):
        self._make = make
        self._inline: Iterator | None = None
        self._thread: threading.Thread | None = None
        self._done = False
        if not threaded:
            return
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, name=name, daemon=True)
        self._thread.start()

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        if self._thread is None:
            if self._inline is None:
                self._inline = iter(self._make())
            return next(self._inline)
        kind, value = self._queue.get()
        if kind is _END:
            self._done = True
            if value is not None:
                raise value
            raise StopIteration
        return value

    def close(self) -> None:
        """Stop producing and end the thread (items not taken are dropped)."""
        self._done = True
        if self._thread is None:
            if self._inline is not None and hasattr(self._inline, "close"):
                self._inline.close()
            return
        self._stop.set()
        while self._thread.is_alive():
            try:  # make room: a producer blocked on a full queue sees the stop
                self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                pass
        self._thread.join()

    def _produce(self) -> None:
        items = None
        try:
            items = iter(self._make())
            for item in items:
                if not self._put((None, item)):
                    return
            self._put((_END, None))
        except BaseException as exc:  # handed to the consumer, raised where it asks for the item
            self._put((_END, exc))
        finally:
            if items is not None and hasattr(items, "close"):
                items.close()

    def _put(self, entry) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(entry, timeout=_POLL_S)
                return True
            except queue.Full:
                pass
        return False


class Behind:
    """Calls made in order on a thread of their own, at most ``depth`` waiting; :meth:`close`
    waits for every call made (or, with ``abort``, drops those not begun)."""

    def __init__(self, depth: int = 4, *, threaded: bool = True, name: str = "trifit-behind"):
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        if not threaded:
            return
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._abort = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def call(self, fn: Callable, *args) -> None:
        """``fn(*args)``, after the calls made before it; raises an earlier call's error."""
        self._raise()
        if self._thread is None:
            try:
                fn(*args)
            except BaseException as exc:
                self._error = exc
                raise
            return
        while True:
            try:
                self._queue.put((fn, args), timeout=_POLL_S)
                return
            except queue.Full:
                self._raise()  # the thread ended on an error: it takes no more calls

    def close(self, abort: bool = False) -> None:
        """End the thread: after every call made, or (``abort``) after the call in progress;
        raises a call's error (not when aborting: the caller is already on its way out)."""
        if self._thread is not None:
            if abort:
                self._abort.set()
            while self._thread.is_alive():
                try:
                    self._queue.put((None, ()), timeout=_POLL_S)
                    break
                except queue.Full:
                    pass
            self._thread.join()
            self._thread = None
        if not abort:
            self._raise()

    def _raise(self) -> None:
        if self._error is not None:  # kept: every later call is refused with it too
            raise self._error

    def _serve(self) -> None:
        while True:
            fn, args = self._queue.get()
            if fn is None or self._abort.is_set():
                return
            try:
                fn(*args)
            except BaseException as exc:  # raised on the caller's side at its next call
                self._error = exc
                return


__all__ = ["Behind", "Prefetch"]
