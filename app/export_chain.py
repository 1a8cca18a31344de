"""An export that renders on the fit worker in short jobs, with the fit still running, then
finishes its file on a thread of its own: what a picture export (app/picture_export.py) and a
video export (app/video_export.py) share.

Why this shape. The engine is used from the fit worker's thread only: its workspaces and buffer
pool have no locks, and the worker already takes turns on the device with the canvas
(app/gpu_gate.py). A whole export as one worker job would stop the fit and the preview for the
whole render, so the render is a chain of short jobs instead: each does about ``budget_s`` of
work (:meth:`ChainedExport._render_some`: tiles of a picture, frames of a clip), then hands the
thread back for a fit chunk and its preview frame before the next job is submitted. The GUI
thread only chains the jobs and moves a progress bar; the end of the file (:meth:`_write`:
encoding, the atomic rename) runs on a thread of its own. Cancel stops the chain between jobs
(a job in flight stops at its next unit) and, during the write, before the rename: a cancelled
export writes nothing; once the rename has begun it completes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from PySide6 import QtCore

#: A job renders for about this long, then the fit runs a chunk and the canvas draws.
JOB_BUDGET_S = 0.1


class ChainedExport(QtCore.QObject):
    """One export to ``path``. ``worker`` is the window's :class:`~app.worker.FitWorker`;
    ``fit_running()`` says whether the fit is running (then the next job waits for the fit's
    next progress, so a chunk and a preview frame come between two jobs; paused, jobs follow
    each other). Signals arrive on the GUI thread; exactly one of ``finished`` / ``failed`` /
    ``cancelled`` ends an export."""

    progress = QtCore.Signal(int, int)   # units done, units in all (0 in all: not counted yet)
    encoding = QtCore.Signal()           # every unit rendered: finishing and writing the file
    finished = QtCore.Signal(str)        # the path written
    failed = QtCore.Signal(str)          # why (one line)
    cancelled = QtCore.Signal()          # nothing was written
    _written = QtCore.Signal(str, str)   # from the write thread: outcome, detail

    #: what the status bar calls the export ("Export", "Video") and its units ("tiles", "frames")
    label = "Export"

    def __init__(self, worker, path, fit_running: Callable[[], bool] = lambda: False, *,
                 budget_s: float = JOB_BUDGET_S, parent: QtCore.QObject | None = None):
        super().__init__(parent)
        self.path = Path(path)
        self.budget_s = float(budget_s)
        self.state = "new"            # new, rendering, encoding, then done / failed / cancelled
        self.done_count = 0
        self.total_count = 0
        self.seconds = 0.0            # from start to the file written
        self._worker = worker
        self._fit_running = fit_running
        self._cancel = threading.Event()
        self._in_flight = False       # a job is queued or running on the worker
        self._due = False             # the next job waits for the fit's next progress
        self._t0 = 0.0
        self._thread: threading.Thread | None = None
        self._written.connect(self._on_written)
        worker.signals.progress.connect(self._on_fit_progress)
        worker.signals.running_changed.connect(self._on_fit_running)

    # ------------------------------------------------------------------ for subclasses
    def _render_some(self, fitter) -> tuple[int, int]:
        """Worker thread: render for about ``budget_s`` (stop early when ``_cancel`` is set);
        returns (units done, units in all)."""
        raise NotImplementedError

    def _write(self) -> str:
        """Write thread: finish the file; "done" (written) or "cancelled" (``_cancel`` was set
        before the rename: nothing written). An exception fails the export."""
        raise NotImplementedError

    def _release(self) -> None:
        """GUI thread, the export ended while rendering (cancelled or failed): drop what it holds."""

    def describe(self) -> str:
        """The status bar's tool tip."""
        return f"Exporting {self.path}"

    # ------------------------------------------------------------------ GUI thread
    @property
    def active(self) -> bool:
        return self.state in ("new", "rendering", "encoding")

    def start(self) -> None:
        self.state = "rendering"
        self._t0 = time.perf_counter()
        self._submit()

    def cancel(self) -> None:
        """Stop at the next unit (or before the rename); ``cancelled`` follows."""
        if not self.active:
            return
        self._cancel.set()
        if self.state == "rendering" and not self._in_flight:
            self._end("cancelled")

    def join(self, timeout_s: float = 10.0) -> bool:
        """Wait for the write thread (window shutdown); True when no thread is left."""
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                return False
            self._thread = None
        return True

    def _submit(self) -> None:
        self._due = False
        self._in_flight = True
        self._worker.submit(self._render_some, on_done=self._on_job_done, on_error=self._on_job_failed)

    def _on_job_done(self, counts) -> None:
        self._in_flight = False
        if self.state != "rendering":
            return
        if self._cancel.is_set():
            self._end("cancelled")
            return
        self.done_count, self.total_count = counts
        self.progress.emit(self.done_count, self.total_count)
        if self.done_count < self.total_count:
            if self._fit_running():
                self._due = True      # after the fit's next chunk and frame
            else:
                self._submit()
            return
        self.state = "encoding"
        self.encoding.emit()
        self._thread = threading.Thread(target=self._write_main, name=f"trifit-{self.label.lower()}-export")
        self._thread.start()

    def _on_job_failed(self, message: str) -> None:
        self._in_flight = False
        if self.state == "rendering":
            self._end("cancelled" if self._cancel.is_set() else "failed", message)

    def _on_fit_progress(self, _progress) -> None:
        if self._due and self.state == "rendering":
            self._submit()

    def _on_fit_running(self, running: bool) -> None:
        if not running and self._due and self.state == "rendering":
            self._submit()

    def _on_written(self, outcome: str, detail: str) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._end(outcome, detail)

    def _end(self, outcome: str, detail: str = "") -> None:
        if not self.active:
            return
        if self.state == "rendering":
            self._release()
        self.state = outcome
        self._due = False
        self._disconnect_worker()
        if outcome == "done":
            self.seconds = time.perf_counter() - self._t0
            self.finished.emit(detail)
        elif outcome == "failed":
            self.failed.emit(detail)
        else:
            self.cancelled.emit()

    def _disconnect_worker(self) -> None:
        for signal, slot in ((self._worker.signals.progress, self._on_fit_progress),
                             (self._worker.signals.running_changed, self._on_fit_running)):
            try:
                signal.disconnect(slot)
            except (RuntimeError, TypeError):  # already gone (the worker's signals were deleted)
                pass

    # ------------------------------------------------------------------ write thread
    def _write_main(self) -> None:
        try:
            outcome = self._write()
        except Exception as exc:  # a full disk, a folder gone meanwhile: said in a dialog
            self._written.emit("failed", f"{self.path}: {type(exc).__name__}: {exc}")
        else:
            self._written.emit(outcome, str(self.path) if outcome == "done" else "")
