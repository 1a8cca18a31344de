"""One picture export (PNG, JPEG, WebP) from the window, with the fit still running.

A chain of short tile jobs on the fit worker (app/export_chain.py says why): each advances
``trifit.export.iter_tiles`` (small tiles, :data:`TILE_SIDE`) for about :data:`JOB_BUDGET_S`.
The first job reads the scene back, so the picture is the fit at that moment. The tiles are
quantised into one uint8 array on the worker thread; the encode and the atomic write run on a
thread of their own, and Cancel during the encode drops the encoded bytes.
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PySide6 import QtCore

from trifit.errors import TrifitError
from trifit.fileutil import atomic_write_bytes

from .export_chain import JOB_BUDGET_S, ChainedExport
from .exports import engine_function

#: What the dialog offers: suffix -> Pillow format.
PICTURE_FORMATS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".webp": "WEBP"}
#: Tile side of a GUI export: small enough that one tile is a short stall of the fit on a
#: software rasterizer, and one shape (one cached workspace) for the whole picture.
TILE_SIDE = 256
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


class PictureExport(ChainedExport):
    """One export to ``path`` at ``size`` (W, H) with ``edges`` ("crisp" or "fit"), tiles of
    ``tile`` pixels a side (the rest as :class:`~app.export_chain.ChainedExport`).
    Raises ExportUnavailable (no trifit.export in this build) or TrifitError (format) at once.
    """

    label = "Export"

    def __init__(self, worker, path, size: tuple[int, int], edges: str = "crisp",
                 fit_running: Callable[[], bool] = lambda: False, *, tile: int = TILE_SIDE,
                 budget_s: float = JOB_BUDGET_S, parent: QtCore.QObject | None = None):
        self._with_edges = engine_function("export", "with_edges")
        self._iter_tiles = engine_function("export", "iter_tiles")
        self._plan_tiles = engine_function("export", "plan_tiles")
        self._to_uint8 = engine_function("export", "to_uint8")
        self.format = picture_format(path)
        super().__init__(worker, path, fit_running, budget_s=budget_s, parent=parent)
        self.size = (int(size[0]), int(size[1]))
        self.edges = edges
        self.tile = int(tile)
        self.scene = None             # the fit's scene as read back by the first job
        self._tiles = None            # worker thread: the iter_tiles generator ...
        self._pixels: np.ndarray | None = None   # ... and the picture it fills

    @property
    def done_tiles(self) -> int:
        return self.done_count

    @property
    def total_tiles(self) -> int:
        return self.total_count

    def describe(self) -> str:
        W, H = self.size
        return f"Exporting {self.path} ({W} × {H} px, {self.edges} edges)"

    def _release(self) -> None:
        self._pixels = self._tiles = None

    # ------------------------------------------------------------------ worker thread
    def _render_some(self, fitter) -> tuple[int, int]:
        """Render tiles for about ``budget_s``; returns (tiles done, tiles in all)."""
        W, H = self.size
        if self._tiles is None:
            self.scene = fitter.scene
            picture = self._with_edges(self.scene, W, H, self.edges)
            tw, th = self._plan_tiles(W, H, picture.n_triangles, fitter.engine, self.tile)
            self.total_count = math.ceil(W / tw) * math.ceil(H / th)
            self._pixels = np.empty((H, W, 3), np.uint8)
            self._tiles = self._iter_tiles(picture, W, H, fitter.engine, self.tile)
        end = time.perf_counter() + self.budget_s
        done = self.done_count
        while done < self.total_count and not self._cancel.is_set():
            ox, oy, tile = next(self._tiles)
            h, w = tile.shape[:2]
            self._pixels[oy:oy + h, ox:ox + w] = self._to_uint8(tile)
            done += 1
            if time.perf_counter() >= end:
                break
        return done, self.total_count

    # ------------------------------------------------------------------ write thread
    def _write(self) -> str:
        pixels, self._pixels, self._tiles = self._pixels, None, None
        data = encode_picture(pixels, self.format)
        del pixels
        if self._cancel.is_set():
            return "cancelled"
        atomic_write_bytes(self.path, data)
        return "done"
