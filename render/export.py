"""Exports of a scene: raster images at any size, NumPy arrays, SVG, and fit animations.

* :func:`save_render` picks the format from the suffix (``.png .jpg .jpeg .webp .tif .tiff .bmp``,
  ``.npy`` float32 (H, W, 3), ``.svg``) and writes atomically (a temporary file renamed over
  the target), so an interrupted export never leaves half a file.
* :func:`render_large` renders at sizes beyond what one GPU buffer holds by rendering tiles. A tile
  is the full picture seen through a smaller frame, so it is rendered as a *remapped scene*:
  in pixel units of the full render (docs/MODEL.md) a vertex sits at ``(x W, y H)``, pixel
  ``(i, j)`` has its centre at ``(i + .5, j + .5)`` and the edge softness is
  ``sigma_px = sigma min(W, H)``. The tile of ``w x h`` pixels at offset ``(ox, oy)`` has the same
  pixel centres shifted by ``(ox, oy)``; so the tile scene has vertices
  ``x' = (x W - ox) / w``, ``y' = (y H - oy) / h`` and ``sigma' = sigma min(W, H) / min(w, h)``
  (the same ``sigma_px``), and every tile pixel equals the full render's pixel.
* :func:`save_svg` writes the triangles as polygons (hard edges: an SVG viewer anti-aliases them,
  which matches the soft render at a sharp sigma).
* :class:`AnimationRecorder` keeps small uint8 frames of a running fit (bounded memory) and writes
  an animated GIF (or animated WebP / PNG) with Pillow.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from . import __version__
from .errors import AdapterError, TrifitError
from .fileutil import atomic_write, atomic_write_bytes
from .limits import is_whole
from .scene import Scene

#: Pillow format names of the raster suffixes.
RASTER_FORMATS = {
    ".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".webp": "WEBP",
    ".tif": "TIFF", ".tiff": "TIFF", ".bmp": "BMP",
}
#: Every suffix :func:`save_render` writes.
SUFFIXES = tuple(RASTER_FORMATS) + (".npy", ".svg")
#: Largest output side accepted (the float32 image alone would be 3 GiB at 16384 x 16384).
MAX_RENDER_SIDE = 32768
#: Formats whose files cannot hold a side that long (Pillow's WebP encoder refuses more).
FORMAT_MAX_SIDE = {"WEBP": 16383}
#: Default cap on a tile's pixels, and on the bytes of the GPU workspace that renders it
#: (a workspace is pooled and kept, so huge tiles would keep memory after the export).
TILE_MAX_PIXELS = 2048 * 2048
TILE_MAX_WORKSPACE_BYTES = 512 * 1024 * 1024
#: Tiles of the reference backend (its float64 output buffer is the memory that matters).
REFERENCE_TILE_PIXELS = 1024 * 1024


#: Edge softness of a crisp export, in output pixels: a logistic edge rises 10-90% over ~4.4 sigma,
#: so about one output pixel -- the antialiasing of a vector rendering, at any size.
CRISP_SIGMA_PX = 0.25
#: the fit settings of `--sharp`: the anneal ends at a crisp picture's softness at the working size, and the
#: sigma probes (which move it towards what suits the fit's own soft render) are off (docs/QUALITY.md, "Crisp pictures")
SHARP_SETTINGS = {"sigma_probes": 0, "sigma_end_px": CRISP_SIGMA_PX}


def sharp_settings(sharp: bool) -> dict:
    """The fit settings ``--sharp`` (or the window's Sharp edges box) adds: :data:`SHARP_SETTINGS`, or none."""
    return dict(SHARP_SETTINGS) if sharp else {}


def fitted_crisp(settings) -> bool:
    """Whether a fit with these FitSettings was made for crisp pictures (:data:`SHARP_SETTINGS`:
    `--sharp`, the window's Sharp edges box, a clip's frames)."""
    return settings.sigma_probes == 0 and settings.sigma_end_px == SHARP_SETTINGS["sigma_end_px"]


def crisp_picture(suffix: str, edges: str = "crisp") -> bool:
    """Whether a picture written as ``suffix`` with ``edges`` (:func:`save_render`) draws crisp
    edges -- a raster picture with crisp edges, or SVG's polygons -- so that a fit for crisp
    pictures (:data:`SHARP_SETTINGS`) suits it; not ``.npy`` (the scene's own render) or a scene."""
    suffix = suffix.lower()
    return suffix == ".svg" or (suffix in RASTER_FORMATS and edges == "crisp")


EDGES = ("crisp", "fit")


def with_edges(scene: Scene, width: int, height: int, edges: str = "crisp") -> Scene:
    """The scene to render at ``width`` x ``height``: ``"crisp"`` antialiases edges over about one
    output pixel (a 4096 px picture of a 176 px fit stays sharp); ``"fit"`` keeps the softness the
    fit optimised (scaled with the picture)."""
    if edges not in EDGES:
        raise TrifitError(f"unknown edges {edges!r}; use one of {', '.join(EDGES)}")
    if edges == "fit":
        return scene
    out = scene.copy()
    out.sigma = CRISP_SIGMA_PX / min(int(width), int(height))
    return out


def picture_size(frame: tuple[int, int], *, size: tuple[int, int] | None = None, scale: float | None = None,
                 width: int | None = None, stretch: bool = False, suffix: str | None = None) -> tuple[int, int]:
    """Output size for a picture of a ``frame`` (w, h): ``size`` WxH (its aspect must be the
    frame's, to a pixel, unless ``stretch``), ``scale`` x the frame, or ``width`` with the aspect
    kept; the frame itself by default. ``suffix``: the file's, whose format may hold less."""
    fw, fh = (int(v) for v in frame)
    if sum(v is not None for v in (size, scale, width)) > 1:
        raise TrifitError("give one of a size, a scale or a width")
    if scale is not None:
        if not (math.isfinite(fw * scale) and math.isfinite(fh * scale)):
            raise TrifitError(f"scale {scale:g} gives no render size: render sizes are between 1x1 and "
                              f"{MAX_RENDER_SIDE}x{MAX_RENDER_SIDE}")
        W, H = round(fw * scale), round(fh * scale)
    elif width is not None:
        W, H = int(width), round(int(width) * fh / fw)
    elif size is not None:
        W, H = (int(v) for v in size)
        if not stretch and abs(W * fh - H * fw) > max(fw, fh, W, H):
            kept = [(a, b) for a, b in ((W, round(W * fh / fw)), (round(H * fw / fh), H))
                    if 1 <= a <= MAX_RENDER_SIDE and 1 <= b <= MAX_RENDER_SIDE]
            hint = f"a {kept[0][0]}x{kept[0][1]} picture would keep it; " if kept else ""
            raise TrifitError(f"size {W}x{H} has another aspect than the scene's {fw}x{fh} "
                              f"({hint}--stretch distorts it)")
    else:
        W, H = fw, fh
    _check_side(W, H, suffix)
    return W, H


def _check_side(W: int, H: int, suffix: str | None) -> None:
    if not (1 <= W <= MAX_RENDER_SIDE and 1 <= H <= MAX_RENDER_SIDE):
        raise TrifitError(f"render size must be between 1x1 and {MAX_RENDER_SIDE}x{MAX_RENDER_SIDE}, got {W}x{H}")
    fmt = RASTER_FORMATS.get((suffix or "").lower())
    most = FORMAT_MAX_SIDE.get(fmt)
    if most is not None and max(W, H) > most:
        raise TrifitError(f"a {fmt} picture's sides are at most {most} px, got {W}x{H}; "
                          "give a smaller size or another format (.png)")


def _engine(engine, backend: str):
    if engine is not None:
        return engine
    from .engine import Engine

    return Engine(backend)


def _render_size(scene: Scene, width, height, suffix: str | None = None) -> tuple[int, int]:
    W = int(width) if width else int(scene.width)
    H = int(height) if height else int(scene.height)
    _check_side(W, H, suffix)
    return W, H


# ---------------------------------------------------------------------- dispatch
def save_render(scene: Scene, path, width: int | None = None, height: int | None = None,
                backend: str = "auto", engine=None, edges: str = "fit") -> Path:
    """Write ``scene`` rendered at ``width`` x ``height`` (default: its frame) to ``path``.

    The format follows the suffix: raster formats and ``.npy`` are rendered through the engine
    (tiled when large, see :func:`render_large`); pictures with the ``edges`` of
    :func:`with_edges`, ``.npy`` as the scene itself renders; ``.svg`` is written as vector
    polygons. Returns the path written.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise TrifitError(f"{path}: unknown output format {suffix or '(none)'}; use one of {', '.join(SUFFIXES)}")
    W, H = _render_size(scene, width, height, suffix)  # (before any rendering)
    if suffix == ".svg":
        save_svg(scene, path, W, H)
        return path
    if suffix == ".npy":  # data, not a picture: the scene's own render, whatever the edges
        img = render_large(scene, W, H, _engine(engine, backend))
        atomic_write(path, lambda f: np.save(f, img))
    else:
        save_png(with_edges(scene, W, H, edges), path, W, H, engine=_engine(engine, backend))
    return path


def save_png(scene: Scene, path, width: int | None = None, height: int | None = None,
             engine=None, backend: str = "auto") -> Path:
    """Render at any size and write an 8-bit image; the format follows the suffix (PNG by default).

    Large sizes are rendered in tiles and quantised tile by tile, so the float image of the whole
    frame is never held (an 8192 x 8192 export holds 192 MiB of uint8, not 768 MiB of float32).
    """
    from PIL import Image

    path = Path(path)
    W, H = _render_size(scene, width, height, path.suffix)
    fmt = RASTER_FORMATS.get(path.suffix.lower(), "PNG")
    pixels = render_large(scene, W, H, _engine(engine, backend), dtype=np.uint8)
    im = Image.fromarray(pixels, "RGB")
    options = picture_options(fmt)
    atomic_write(path, lambda f: im.save(f, format=fmt, **options))
    return path


def picture_options(fmt: str) -> dict:
    """Pillow's save options for a picture in ``fmt`` (every writer of 8-bit pictures uses
    these, so the CLI's and the window's files are the same bytes)."""
    if fmt == "PNG":
        from PIL.PngImagePlugin import PngInfo

        info = PngInfo()
        info.add_text("Software", f"trifit {__version__}")
        return {"pnginfo": info, "compress_level": 6}
    return {"JPEG": {"quality": 95, "subsampling": 0}, "WEBP": {"quality": 95},
            "TIFF": {"compression": "tiff_deflate"}}.get(fmt, {})


def to_uint8(image: np.ndarray) -> np.ndarray:
    """float [0, 1] -> uint8 with rounding (the quantisation every raster export uses)."""
    return (np.clip(image, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


# ---------------------------------------------------------------------- tiling
def tile_scene(scene: Scene, width: int, height: int, ox: int, oy: int, w: int, h: int) -> Scene:
    """The scene whose ``w x h`` render is the tile at ``(ox, oy)`` of the ``width x height`` render."""
    tris = scene.triangles.copy()
    tris[:, 0:6:2] = (scene.triangles[:, 0:6:2] * width - ox) / w
    tris[:, 1:6:2] = (scene.triangles[:, 1:6:2] * height - oy) / h
    sigma = scene.sigma * min(width, height) / min(w, h)
    return Scene(w, h, sigma, scene.background.copy(), tris)


def _workspace_fits(ctx, w: int, h: int, n_tris: int) -> bool:
    from .gpu.workspace import Shape, check_limits

    shape = Shape(1, w, h, n_tris)
    try:
        check_limits(ctx, shape)
    except AdapterError:
        return False
    return sum(shape.buffer_sizes().values()) <= TILE_MAX_WORKSPACE_BYTES


def plan_tiles(width: int, height: int, n_tris: int, engine, max_tile=None) -> tuple[int, int]:
    """The tile size ``(tw, th)`` for a ``width x height`` render; the whole frame when it fits.

    ``max_tile`` (an int or a ``(w, h)`` pair) caps the tile further (tests use it to force tiling).
    """
    ctx = getattr(getattr(engine, "impl", None), "ctx", None)
    if ctx is not None:
        def fits(w, h):
            return w * h <= TILE_MAX_PIXELS and _workspace_fits(ctx, w, h, n_tris)
    else:
        def fits(w, h):
            return w * h <= REFERENCE_TILE_PIXELS
    cap_w, cap_h = width, height
    if max_tile is not None:
        mw, mh = (max_tile, max_tile) if isinstance(max_tile, (int, np.integer)) else max_tile
        if any(not is_whole(v) or v < 1 for v in (mw, mh)):
            raise ValueError(f"max_tile must be a whole number of pixels >= 1 (or a pair), got {max_tile!r:.40}")
        cap_w, cap_h = min(width, int(mw)), min(height, int(mh))
    if fits(cap_w, cap_h):
        return cap_w, cap_h
    side = 1 << int(math.floor(math.log2(max(cap_w, cap_h))))
    while side >= 16:
        tw, th = min(cap_w, side), min(cap_h, side)
        if fits(tw, th):
            return tw, th
        side //= 2
    raise AdapterError(f"cannot render {n_tris} triangles even in 16x16 tiles on this adapter")


def iter_tiles(scene: Scene, width: int, height: int, engine, max_tile=None
               ) -> Iterator[tuple[int, int, np.ndarray]]:
    """Yield ``(ox, oy, pixels)`` covering the ``width x height`` render, row by row.

    Every tile is rendered at one size (edge tiles overhang the frame and are cropped), so the GPU
    backend builds a single workspace for the whole export.
    """
    tw, th = plan_tiles(width, height, scene.n_triangles, engine, max_tile)
    if (tw, th) == (width, height):
        yield 0, 0, engine.render(scene, width, height)
        return
    for oy in range(0, height, th):
        for ox in range(0, width, tw):
            img = engine.render(tile_scene(scene, width, height, ox, oy, tw, th), tw, th)
            yield ox, oy, img[: min(th, height - oy), : min(tw, width - ox)]


def render_large(scene: Scene, width: int, height: int, engine=None, *, max_tile=None,
                 dtype=np.float32) -> np.ndarray:
    """Render at any size: tiles through remapped scenes where one render would not fit.

    Returns (H, W, 3) float32 in [0, 1], or uint8 (rounded) with ``dtype=np.uint8``.
    """
    if np.dtype(dtype) not in (np.dtype(np.float32), np.dtype(np.uint8)):
        raise ValueError(f"render_large gives float32 or uint8, not {np.dtype(dtype)}")
    engine = _engine(engine, "auto")
    W, H = _render_size(scene, width, height)
    out = np.empty((H, W, 3), dtype=dtype)
    as_bytes = np.dtype(dtype) == np.uint8
    for ox, oy, tile in iter_tiles(scene, W, H, engine, max_tile):
        h, w = tile.shape[:2]
        out[oy:oy + h, ox:ox + w] = to_uint8(tile) if as_bytes else tile
    return out


# ---------------------------------------------------------------------- SVG
def _hex(rgb) -> str:
    r, g, b = (int(round(float(np.clip(v, 0.0, 1.0)) * 255)) for v in rgb)
    return f"#{r:02x}{g:02x}{b:02x}"


def _num(v: float) -> str:
    text = f"{v:.3f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def svg_text(scene: Scene, width: int | None = None, height: int | None = None) -> str:
    """The scene as an SVG document: a background rectangle, then one polygon per triangle in
    painting order (the last on top), each with its fill colour and ``fill-opacity``.

    The viewBox is the frame in pixels; ``width``/``height`` (default: the frame) set the
    document's displayed size. Edges are hard polygon edges (SVG has no per-shape logistic edge),
    so the picture matches the render at a sharp sigma.
    """
    fw, fh = int(scene.width), int(scene.height)
    W, H = _render_size(scene, width, height)
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{W}" height="{H}" '
        f'viewBox="0 0 {fw} {fh}">',
        f"<title>trifit scene: {scene.n_triangles} triangles</title>",
        f"<desc>{_xml_text(f'trifit {__version__}; sigma {scene.sigma * min(fw, fh):.3g} px at the frame')}</desc>",
        f'<rect x="0" y="0" width="{fw}" height="{fh}" fill="{_hex(scene.background)}"/>',
        '<g stroke="none">',
    ]
    for t in scene.triangles:
        pts = " ".join(f"{_num(t[k] * fw)},{_num(t[k + 1] * fh)}" for k in (0, 2, 4))
        lines.append(f'<polygon points="{pts}" fill="{_hex(t[6:9])}" fill-opacity="{_num(float(t[9]))}"/>')
    lines.append("</g>")
    lines.append("</svg>")
    return "\n".join(lines) + "\n"


def _xml_text(text: str) -> str:
    from xml.sax.saxutils import quoteattr  # (here: it imports urllib and http, which a fit does not need)

    return quoteattr(text)[1:-1]


def save_svg(scene: Scene, path, width: int | None = None, height: int | None = None) -> Path:
    """Write :func:`svg_text` atomically; returns the path."""
    path = Path(path)
    atomic_write_bytes(path, svg_text(scene, width, height).encode("utf-8"))
    return path


# ---------------------------------------------------------------------- animation
ANIMATION_FORMATS = {".gif": "GIF", ".webp": "WEBP", ".png": "PNG", ".apng": "PNG"}


class AnimationRecorder:
    """Frames of a running fit, written as an animated GIF (or ``.webp`` / ``.png`` APNG).

    A fit changes the picture most in its first iterations and less and less after, so frames are
    spaced by visible change, not by a fixed count: the gaps between frames grow geometrically,
    ``every`` iterations at first (one frame per iteration by default). With ``total`` (the
    iterations the fit is planned for) the growth is chosen so that about ``frames`` frames reach
    exactly the last one; without (a fit to a time limit) the gaps grow by ``GROWTH`` a frame as
    the fit goes on, so a fit ten times longer gets a fixed number of frames more, not ten times
    as many. ``capture(fitter)`` renders the fitter's current scene at a small size (longer side
    at most ``max_side``) when a frame is due; :meth:`until_due` says how many iterations a run
    may go before the next, so that frames land on their iterations. Frames are kept as uint8
    arrays; when ``max_frames`` are held, a third or more are dropped and the growth squared (see
    :meth:`_thin`), so memory stays below ``max_frames * max_side^2 * 3`` bytes however long the
    fit runs, and the gaps still grow. ``save()`` writes the file atomically (the
    last frame is held for ``hold_ms``). Usage::

        rec = AnimationRecorder("fit.gif", total=600)
        fitter.run(stop, callback=lambda stats: rec.capture(fitter))
        rec.capture(fitter, force=True)  # the final state
        rec.save()
    """

    #: the gaps' growth per frame when the fit's length is unknown: about 30 frames per tenfold
    #: iterations, after the first twenty or so (one frame each)
    GROWTH = 1.08

    def __init__(self, path, every: int = 1, max_frames: int = 120, max_side: int = 256,
                 frame_ms: int = 80, hold_ms: int = 1500, *, total: int | None = None, frames: int = 80):
        self.path = Path(path)
        fmt = ANIMATION_FORMATS.get(self.path.suffix.lower())
        if fmt is None:
            raise TrifitError(f"{self.path}: animations are written as {', '.join(ANIMATION_FORMATS)}")
        if every < 1 or max_frames < 2 or max_side < 8 or frames < 2 or (total is not None and total < 0):
            raise ValueError("need every >= 1, max_frames >= 2, frames >= 2, max_side >= 8 and total >= 0")
        self.format = fmt
        self.min_gap = int(every)
        self.max_frames = int(max_frames)
        self.max_side = int(max_side)
        self.frame_ms = int(frame_ms)
        self.hold_ms = int(hold_ms)
        self.total = None if total is None else int(total)
        self.target_frames = min(int(frames), self.max_frames)
        self.growth = self.GROWTH
        self.frames: list[np.ndarray] = []
        self.iterations: list[int] = []
        self._start: int | None = None   # the first frame's iteration: offsets count from there
        self._plan: list[int] = []       # offsets still to come, when the total is known
        self._next: int | None = None    # the next frame's iteration

    # ------------------------------------------------------------------ spacing
    def _step(self, offset: int, growth: float, gap: int, last_gap: int = 0) -> int:
        """The offset of the frame after one at ``offset``: ``offset + 1`` grows by ``growth``, and
        the gap is at least ``gap`` and never shorter than the one before (``last_gap``)."""
        return max(offset + gap, offset + last_gap, int(round((offset + 1) * growth)) - 1)

    def _offsets(self, total: int, growth: float, limit: int) -> list[int]:
        """Offsets 0 .. ``total`` spaced by :meth:`_step`, the last exactly ``total``; the gaps never
        shrink (a short last gap is merged into the one before). Stops early past ``limit`` offsets."""
        out = [0]
        while out[-1] < total and len(out) <= limit:
            nxt = self._step(out[-1], growth, self.min_gap)
            if nxt >= total:
                if len(out) > 1 and total - out[-1] < out[-1] - out[-2]:
                    out[-1] = total
                else:
                    out.append(total)
                break
            out.append(nxt)
        return out

    def _plan_for(self, total: int) -> list[int]:
        """The fewest-growth plan over ``total`` iterations with at most ``target_frames`` frames."""
        if len(self._offsets(total, 1.0, self.target_frames)) <= self.target_frames:
            return self._offsets(total, 1.0, self.target_frames)  # every ``min_gap`` iterations
        lo, hi = 1.0, float(total + 1)  # too many frames at lo; two at hi
        for _ in range(60):
            mid = math.sqrt(lo * hi)
            if len(self._offsets(total, mid, self.target_frames)) <= self.target_frames:
                hi = mid
            else:
                lo = mid
        self.growth = hi  # where the fit runs past its total, the gaps go on growing alike
        return self._offsets(total, hi, self.target_frames)

    def _schedule_after(self, iteration: int) -> None:
        """Set the next frame's iteration after a frame at ``iteration``."""
        offset = iteration - self._start
        while self._plan and self._plan[0] <= offset:
            self._plan.pop(0)
        if self._plan:
            nxt = self._plan[0]
        else:
            last_gap = iteration - self.iterations[-2] if len(self.iterations) > 1 else 0
            nxt = self._step(offset, self.growth, self.min_gap, last_gap)
        self._next = self._start + nxt

    @property
    def every(self) -> int:
        """The gap (iterations) from the newest frame to the next one."""
        if self._next is None or not self.iterations:
            return self.min_gap
        return self._next - self.iterations[-1]

    def due(self, iteration: int) -> bool:
        return self._next is None or iteration >= self._next

    def until_due(self, iteration: int) -> int:
        """Iterations from ``iteration`` to the next frame (at least 1): how far a run may go so
        that the next frame lands on its iteration."""
        return 1 if self._next is None else max(1, self._next - int(iteration))

    # ------------------------------------------------------------------ frames
    @property
    def nbytes(self) -> int:
        return sum(f.nbytes for f in self.frames)

    def frame_size(self, width: int, height: int) -> tuple[int, int]:
        scale = min(1.0, self.max_side / max(width, height))
        return max(1, round(width * scale)), max(1, round(height * scale))

    def capture(self, fitter, force: bool = False) -> bool:
        """Add a frame of ``fitter``'s current scene when one is due (or ``force``). True if added."""
        it = int(fitter.iteration)
        if not force and not self.due(it):
            return False
        if self.iterations and self.iterations[-1] == it:
            return False
        scene = fitter.scene
        w, h = self.frame_size(scene.width, scene.height)
        self.add_frame(fitter.engine.render(scene, w, h), it)
        return True

    def add_frame(self, image: np.ndarray, iteration: int) -> None:
        """Add an (H, W, 3) frame (float in [0, 1] or uint8), resized to ``max_side`` if larger."""
        arr = np.asarray(image)
        if arr.ndim != 3 or arr.shape[2] != 3 or arr.shape[0] < 1 or arr.shape[1] < 1:
            raise ValueError(f"a frame is (H, W, 3) with pixels, got shape {arr.shape}")
        if arr.dtype != np.uint8 and not (np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr))):
            raise ValueError(f"a frame is uint8, or finite floats in [0, 1]; got {arr.dtype}")
        frame = arr if arr.dtype == np.uint8 else to_uint8(arr)
        h, w = frame.shape[:2]
        fw, fh = self.frame_size(w, h)
        if (fw, fh) != (w, h):
            from PIL import Image

            frame = np.asarray(Image.fromarray(frame, "RGB").resize((fw, fh), Image.Resampling.BOX))
        iteration = int(iteration)
        if self._start is None:
            self._start = iteration
            self._plan = self._plan_for(self.total) if self.total is not None else []
        self.frames.append(np.ascontiguousarray(frame))
        self.iterations.append(iteration)
        if len(self.frames) > self.max_frames:
            self._thin()
        self._schedule_after(iteration)

    def _thin(self) -> None:
        """Keep at most two thirds of the frames: those a recorder with the growth squared would
        have taken -- the first, the early ones (still one per ``min_gap``), then geometrically
        spaced -- and the newest; the least gap doubles too while that keeps more. Frames to come
        follow the new spacing, so the gaps still grow and the early frames stay dense."""
        offsets = [it - self._start for it in self.iterations]
        self.growth *= self.growth
        while True:
            keep = [0]
            for i in range(1, len(offsets)):
                last_gap = offsets[keep[-1]] - offsets[keep[-2]] if len(keep) > 1 else 0
                if offsets[i] >= self._step(offsets[keep[-1]], self.growth, self.min_gap, last_gap):
                    keep.append(i)
            newest = len(offsets) - 1
            if keep[-1] != newest:  # the newest always stays: a short last gap is merged into the one before
                if len(keep) > 1 and offsets[newest] - offsets[keep[-1]] < offsets[keep[-1]] - offsets[keep[-2]]:
                    keep[-1] = newest
                else:
                    keep.append(newest)
            if len(keep) <= max(2, 2 * self.max_frames // 3):
                break
            self.min_gap *= 2
        self.frames = [self.frames[i] for i in keep]
        self.iterations = [self.iterations[i] for i in keep]
        self._plan = []  # past the plan's frame budget: the gaps grow from here as without a total

    def save(self) -> Path:
        """Write the animation atomically; returns its path."""
        if not self.frames:
            raise TrifitError("no frames were captured")
        from PIL import Image

        frames = list(self.frames)
        # the final picture is held hold_ms: frames before it that show the same picture (a fit
        # that no longer changes at this size) are dropped, or the writer (GIF) would merge them
        # into the hold and lengthen it by their time
        while len(frames) > 1 and frames[-2].shape == frames[-1].shape and np.array_equal(frames[-2], frames[-1]):
            del frames[-2]
        size = frames[-1].shape[1], frames[-1].shape[0]
        images = [Image.fromarray(f, "RGB") if (f.shape[1], f.shape[0]) == size
                  else Image.fromarray(f, "RGB").resize(size) for f in frames]
        durations = [self.frame_ms] * (len(images) - 1) + [self.hold_ms]
        options: dict = {"save_all": True, "append_images": images[1:], "duration": durations, "loop": 0}
        if self.format == "WEBP":
            options["lossless"] = True
        atomic_write(self.path, lambda f: images[0].save(f, format=self.format, **options))
        return self.path


__all__ = [
    "AnimationRecorder", "RASTER_FORMATS", "SUFFIXES", "crisp_picture", "fitted_crisp", "iter_tiles", "plan_tiles",
    "render_large", "save_png", "save_render", "save_svg", "svg_text", "tile_scene", "to_uint8",
]
