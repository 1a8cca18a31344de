"""One picture export (PNG, JPEG, WebP) from the window, with the fit still running.

Why this shape. The engine is used from the fit worker's thread only: its workspaces and buffer
pool have no locks, and the worker already takes turns on the device with the canvas
(app/gpu_gate.py). A whole export as one worker job would stop the fit and the preview for the
whole render, so the render is a chain of short jobs instead: each advances
``trifit.export.iter_tiles`` (small tiles, :data:`TILE_SIDE`) for about :data:`JOB_BUDGET_S`,
then hands the thread back for a fit chunk and its preview frame before the next job is
submitted. The first job reads the scene back, so the picture is the fit at that moment.

The GUI thread only chains the jobs and moves a progress bar. The tiles are quantised into one
uint8 array on the worker thread; the encode and the atomic write run on a thread of their own.
Cancel stops the chain between tiles (a job in flight stops before its next tile) and, during the
encode, drops the encoded bytes, so a cancelled export writes nothing; once the write has begun
it completes.
"""

from __future__ import annotations

import io
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PySide6 import QtCore

from trifit.errors import TrifitError
from trifit.fileutil import atomic_write_bytes

from .exports import engine_function

#: What the dialog offers: suffix -> Pillow format.
PICTURE_FORMATS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".webp": "WEBP"}
#: Tile side of a GUI export: small enough that one tile is a short stall of the fit on a
#: software rasterizer, and one shape (one cached workspace) for the whole picture.
TILE_SIDE = 256
#: A job renders tiles for about this long, then the fit runs a chunk and the canvas draws.
JOB_BUDGET_S = 0.1
#: Side of the dialog's preview crop, in output pixels.
PREVIEW_SIDE = 160


def picture_format(path) -> str:
    """The Pillow format for ``path``'s suffix; TrifitError naming the choices otherwise."""
    suffix = Path(path).suffix.lower()
    fmt = PICTURE_FORMATS.get(suffix)
    if fmt is None:
        raise TrifitError(f"{Path(path).name}: pictures are written as {', '.join(PICTURE_FORMATS)} "
                          f"(not {suffix or 'a name without a suffix'})")
    return fmt


def encode_picture(pixels: np.ndarray, fmt: str) -> bytes:
    """The file's bytes, with the options ``trifit.export.save_png`` uses (so a picture from the
    window is byte for byte the one ``trifit render`` writes; tests/test_gui_export.py checks)."""
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, format=fmt, **engine_function("export", "picture_options")(fmt))
    return out.getvalue()


def preview_job(size: tuple[int, int], edges: str, side: int = PREVIEW_SIDE) -> Callable:
    """A worker job: the centre ``side`` x ``side`` crop of the picture at ``size`` with ``edges``,
    as uint8 (H, W, 3), rendered from the fit's current scene (a tile of the export, so exactly
    what the file will hold there)."""
    with_edges = engine_function("export", "with_edges")
    tile_scene = engine_function("export", "tile_scene")
    to_uint8 = engine_function("export", "to_uint8")
    W, H = (int(v) for v in size)
    w, h = min(side, W), min(side, H)
    ox, oy = (W - w) // 2, (H - h) // 2

    def job(fitter):
        scene = with_edges(fitter.scene, W, H, edges)
        return to_uint8(fitter.engine.render(tile_scene(scene, W, H, ox, oy, w, h), w, h))
    return job


class PictureExport(QtCore.QObject):
    """One export to ``path`` at ``size`` (W, H) with ``edges`` ("crisp" or "fit").

    ``worker`` is the window's :class:`~app.worker.FitWorker`; ``fit_running()`` says whether the
    fit is running (then the next job waits for the fit's next progress, so a chunk and a preview
    frame come between two jobs; paused, jobs follow each other). Signals arrive on the GUI
    thread; exactly one of ``finished`` / ``failed`` / ``cancelled`` ends an export.
    Raises ExportUnavailable (no trifit.export in this build) or TrifitError (format) at once.
    """

    progress = QtCore.Signal(int, int)   # tiles done, tiles in all (0 in all: reading the scene)
    encoding = QtCore.Signal()           # every tile rendered: encoding and writing the file
    finished = QtCore.Signal(str)        # the path written
    failed = QtCore.Signal(str)          # why (one line)
    cancelled = QtCore.Signal()          # nothing was written
    _encoded = QtCore.Signal(str, str)   # from the encode thread: outcome, detail

    def __init__(self, worker, path, size: tuple[int, int], edges: str = "crisp",
                 fit_running: Callable[[], bool] = lambda: False, *, tile: int = TILE_SIDE,
                 budget_s: float = JOB_BUDGET_S, parent: QtCore.QObject | None = None):
        super().__init__(parent)
        self._with_edges = engine_function("export", "with_edges")
        self._iter_tiles = engine_function("export", "iter_tiles")
        self._plan_tiles = engine_function("export", "plan_tiles")
        self._to_uint8 = engine_function("export", "to_uint8")
        self.path = Path(path)
        self.format = picture_format(self.path)
        self.size = (int(size[0]), int(size[1]))
        self.edges = edges
        self.tile = int(tile)
        self.budget_s = float(budget_s)
        self.scene = None             # the fit's scene as read back by the first job
        self.state = "new"            # new, rendering, encoding, then done / failed / cancelled
        self.done_tiles = 0
        self.total_tiles = 0
        self.seconds = 0.0            # from start to the file written
        self._worker = worker
        self._fit_running = fit_running
        self._cancel = threading.Event()
        self._in_flight = False       # a job is queued or running on the worker
        self._due = False             # the next job waits for the fit's next progress
        self._t0 = 0.0
        self._tiles = None            # worker thread: the iter_tiles generator ...
        self._pixels: np.ndarray | None = None   # ... and the picture it fills
        self._thread: threading.Thread | None = None
        self._encoded.connect(self._on_encoded)
        worker.signals.progress.connect(self._on_fit_progress)
        worker.signals.running_changed.connect(self._on_fit_running)

    # ------------------------------------------------------------------ GUI thread
    @property
    def active(self) -> bool:
        return self.state in ("new", "rendering", "encoding")

    def start(self) -> None:
        self.state = "rendering"
        self._t0 = time.perf_counter()
        self._submit()

    def cancel(self) -> None:
        """Stop at the next tile (or drop the encoded bytes); ``cancelled`` follows."""
        if not self.active:
            return
        self._cancel.set()
        if self.state == "rendering" and not self._in_flight:
            self._end("cancelled")

    def join(self, timeout_s: float = 10.0) -> bool:
        """Wait for the encode thread (window shutdown); True when no thread is left."""
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
        self.done_tiles, self.total_tiles = counts
        self.progress.emit(self.done_tiles, self.total_tiles)
        if self.done_tiles < self.total_tiles:
            if self._fit_running():
                self._due = True      # after the fit's next chunk and frame
            else:
                self._submit()
            return
        self.state = "encoding"
        self.encoding.emit()
        pixels, self._pixels, self._tiles = self._pixels, None, None
        self._thread = threading.Thread(target=self._encode, args=(pixels,), name="trifit-picture-export")
        self._thread.start()

    def _on_job_failed(self, message: str) -> None:
        self._in_flight = False
        if self.state == "rendering":
            self._pixels = self._tiles = None
            self._end("cancelled" if self._cancel.is_set() else "failed", message)

    def _on_fit_progress(self, _progress) -> None:
        if self._due and self.state == "rendering":
            self._submit()

    def _on_fit_running(self, running: bool) -> None:
        if not running and self._due and self.state == "rendering":
            self._submit()

    def _on_encoded(self, outcome: str, detail: str) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._end(outcome, detail)

    def _end(self, outcome: str, detail: str = "") -> None:
        if not self.active:
            return
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

    # ------------------------------------------------------------------ worker thread
    def _render_some(self, fitter) -> tuple[int, int]:
        """Render tiles for about ``budget_s``; returns (tiles done, tiles in all)."""
        W, H = self.size
        if self._tiles is None:
            self.scene = fitter.scene
            picture = self._with_edges(self.scene, W, H, self.edges)
            tw, th = self._plan_tiles(W, H, picture.n_triangles, fitter.engine, self.tile)
            self.total_tiles = math.ceil(W / tw) * math.ceil(H / th)
            self._pixels = np.empty((H, W, 3), np.uint8)
            self._tiles = self._iter_tiles(picture, W, H, fitter.engine, self.tile)
        end = time.perf_counter() + self.budget_s
        done = self.done_tiles
        while done < self.total_tiles and not self._cancel.is_set():
            ox, oy, tile = next(self._tiles)
            h, w = tile.shape[:2]
            self._pixels[oy:oy + h, ox:ox + w] = self._to_uint8(tile)
            done += 1
            if time.perf_counter() >= end:
                break
        return done, self.total_tiles

    # ------------------------------------------------------------------ encode thread
    def _encode(self, pixels: np.ndarray) -> None:
        try:
            data = encode_picture(pixels, self.format)
            del pixels
            if self._cancel.is_set():
                self._encoded.emit("cancelled", "")
                return
            atomic_write_bytes(self.path, data)
        except Exception as exc:  # a full disk, a folder gone meanwhile: said in a dialog
            self._encoded.emit("failed", f"{self.path}: {type(exc).__name__}: {exc}")
        else:
            self._encoded.emit("done", str(self.path))
