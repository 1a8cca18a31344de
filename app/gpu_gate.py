"""Turn-taking on the shared wgpu device between the fit worker and the GUI's canvas.

Why: wgpu-native makes a queue submission wait while another thread waits for earlier work
(the worker's per-chunk readback). Measured on lavapipe (wgpu 0.32): a GUI-thread
``queue.submit`` issued during a 10-iteration fit submission blocked for 334 ms, and during a
live fit each preview frame spent ~30 ms of the GUI thread in ``get_current_texture`` and
``present``. So:

* the worker holds the gate whenever it uses the GPU (a chunk, a rebuild, an export);
* the canvas draws only when it can take the gate without waiting, else it retries later;
* after each chunk the worker leaves the GPU to the GUI for one frame: it clears
  ``frame_done``, emits its progress, and waits (bounded) until the GUI has drawn or declined.

The GUI therefore never waits on the fit's GPU work; the worker waits at most one preview
frame per chunk.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager


class GpuGate:
    def __init__(self):
        self._lock = threading.Lock()
        self._frame_done = threading.Event()
        self._frame_done.set()

    # ------------------------------------------------------------------ worker thread
    @contextmanager
    def worker_turn(self):
        with self._lock:
            yield

    def expect_frame(self) -> None:
        """Call before emitting a progress that carries a new device frame."""
        self._frame_done.clear()

    def wait_for_frame(self, timeout_s: float) -> bool:
        """Leave the GPU to the GUI until it has drawn (or declined) the frame, or the timeout."""
        return self._frame_done.wait(timeout_s)

    # ------------------------------------------------------------------ GUI thread
    def try_gui_turn(self) -> bool:
        """Take the GPU for one draw without waiting; False while the worker is using it."""
        return self._lock.acquire(blocking=False)

    def gui_turn(self, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) for the GPU: for diagnostics, never on the draw path."""
        return self._lock.acquire(timeout=timeout_s)

    def end_gui_turn(self) -> None:
        self._lock.release()
        self._frame_done.set()

    def frame_handled(self) -> None:
        """The GUI will not draw this frame (hidden canvas, nothing new): release the worker."""
        self._frame_done.set()
