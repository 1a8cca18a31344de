"""Reading target images: any Pillow format, EXIF orientation applied, grey / palette / 16-bit /
CMYK converted to 8-bit RGB, alpha composited over white, resized so the longer side is ``size``
(Pillow LANCZOS). Returns float32 (H, W, 3) in [0, 1]. Every failure is an :class:`ImageError`
with a one-line reason.

Untrusted files (see docs/RELIABILITY.md, "bad input"):

- only regular files are read (a folder, a FIFO or a device is refused before it is opened);
- the pixel count from the header is checked against :data:`MAX_PIXELS` *before* any pixel is
  decoded (decompression bombs: a few hundred bytes can declare 30000 x 30000 pixels);
- JPEG (and MPO) files are decoded at a reduced scale (libjpeg "draft" mode, 1/2, 1/4 or 1/8)
  when a working ``size`` is given, so a 24 MP photo costs a few MB, not 72 MB. Other formats
  (PNG, TIFF, ...) have no reduced decode in Pillow: they are decoded in full, and memory grows
  with the pixel count (bounded by the cap);
- any exception Pillow raises while parsing or decoding (its parsers can raise OSError,
  SyntaxError, EOFError, struct.error, TypeError, IndexError, zlib.error, ...) becomes an
  ImageError; a broken EXIF block is ignored (orientation 1), it does not make the image unusable;
- Python warnings raised by Pillow while reading (corrupt EXIF, "truncated file read", the
  decompression-bomb warning) are logged at debug level on the ``trifit`` logger instead of
  being printed, Pillow's own log records are muted below CRITICAL unless the application has
  configured the ``PIL`` logger itself, and what libtiff prints on file descriptor 2 while a
  TIFF is decoded is logged the same way, so a command-line error stays one line. (Both
  diversions are process-wide for the duration of one load: another thread's warnings or
  stderr output in that window are logged, not shown; two loads should not run concurrently.)
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import tempfile
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from .errors import ImageError
from .limits import MAX_WORKING_SIZE

#: Images with more pixels than this are refused before decoding (decompression bombs).
MAX_PIXELS = 120_000_000

log = logging.getLogger("trifit")

# Pillow logs some decoder complaints at ERROR (e.g. a TIFF "More samples per pixel than can be
# decoded") just before raising; the exception already says it, and a second stderr line would
# break the command line's one-line error rule. Leave an application's own choice alone.
_pil_log = logging.getLogger("PIL")
if _pil_log.level == logging.NOTSET:
    _pil_log.setLevel(logging.CRITICAL)

# EXIF orientation (tag 0x0112) -> the transpose that makes the pixels upright
_ORIENTATION = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
_EXIF_ORIENTATION = 0x0112
_BLOCK_PIXELS = 1 << 20  # row blocks for the 16/32-bit and float conversions (bounded temporaries)


def _one_line(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_size(size) -> int | None:
    if size is None:
        return None
    try:
        n = int(size)
    except (TypeError, ValueError, OverflowError):
        raise ImageError(f"working size must be a whole number, got {size!r:.40}") from None
    if isinstance(size, bool) or n != size or not 1 <= n <= MAX_WORKING_SIZE:
        raise ImageError(f"working size must be between 1 and {MAX_WORKING_SIZE} px, got {size!r:.40}")
    return n


def load_image(path: str | os.PathLike[str], size: int | None = None) -> np.ndarray:
    """Read an image file as float32 (H, W, 3) in [0, 1], longer side ``size`` when given.

    RGBA / LA / palette transparency is composited over white. Raises :class:`ImageError` (one
    line: the path and what is wrong) for anything that is not a readable image within the caps.
    """
    size = _check_size(size)
    return _read(Path(path), size, lambda im: prepare(im, size))


def load_grey(path: str | os.PathLike[str], size: int | None = None) -> np.ndarray:
    """Read an image file as its grey levels, float32 (h, w) in [0, 1] at the file's own size
    (EXIF orientation applied; any mode converted to Pillow's "L", alpha over white): a focus
    map (render/focus.py), which is resized to a fit's working size exactly, not by its longer
    side. ``size``: a JPEG may be decoded at a reduced scale no smaller than this. The same
    checks and one-line :class:`ImageError` as :func:`load_image`."""
    size = _check_size(size)
    return _read(Path(path), size, grey_levels)


def grey_levels(im: Image.Image) -> np.ndarray:
    """float32 (h, w) in [0, 1]: an image's grey levels as :func:`load_grey` reads them."""
    try:
        return np.asarray(_flatten(_orient(im)).convert("L"), dtype=np.float32) / 255.0
    except ValueError as exc:
        raise ImageError(f"cannot read grey levels: {_one_line(exc)}") from None


def _read(p: Path, size: int | None, convert) -> np.ndarray:
    """The checked read both loaders share: ``convert`` turns the decoded image into the array."""
    try:
        st = p.stat()
    except FileNotFoundError:
        raise ImageError(f"{p}: no such file") from None
    except (OSError, ValueError) as exc:  # permission, name too long, NUL byte in the name
        raise ImageError(f"{p}: cannot read: {_one_line(getattr(exc, 'strerror', None) or exc)}") from None
    if stat.S_ISDIR(st.st_mode):
        raise ImageError(f"{p}: is a folder, not an image")
    if not stat.S_ISREG(st.st_mode):
        raise ImageError(f"{p}: not a regular file (a device, pipe or socket cannot be read as an image)")
    if st.st_size == 0:
        raise ImageError(f"{p}: empty file")
    try:
        f = open(p, "rb")
    except OSError as exc:
        raise ImageError(f"{p}: cannot read: {_one_line(exc.strerror or exc)}") from None
    with f, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # our own cap (MAX_PIXELS) is the rule; Pillow's warning threshold (89 MP) is lower
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            im = _decode(f, p, size)
            try:
                return convert(im)
            except ImageError as exc:  # e.g. an unsupported pixel mode: say which file
                raise ImageError(f"{p}: {exc}") from None
            finally:
                im.close()
        except MemoryError:
            raise ImageError(f"{p}: not enough memory to decode this image") from None
        finally:
            for w in caught:
                log.debug("%s: %s: %s", p, w.category.__name__, w.message)


def _decode(f, p: Path, size: int | None) -> Image.Image:
    """Open, check the header's pixel count, then decode (JPEG at a reduced scale)."""
    try:
        im = Image.open(f)
    except Image.DecompressionBombError as exc:
        raise ImageError(f"{p}: image is too large, more than the {MAX_PIXELS // 1_000_000} MP cap "
                         f"({_one_line(exc)})") from None
    except UnidentifiedImageError:
        raise ImageError(f"{p}: not an image Pillow can read") from None
    except MemoryError:
        raise
    except Exception as exc:  # a parser choking on a hostile header: any exception type
        raise ImageError(f"{p}: cannot decode image: {_one_line(exc)}") from None
    try:
        w, h = im.size
        if w < 1 or h < 1:
            raise ImageError(f"{p}: image has no pixels ({w}x{h})")
        if w * h > MAX_PIXELS:
            raise ImageError(f"{p}: image is too large: {w}x{h} pixels is more than the "
                             f"{MAX_PIXELS // 1_000_000} MP cap")
        if size is not None and im.format in ("JPEG", "MPO"):
            im.draft("RGB", (size, size))  # libjpeg decodes at 1/2, 1/4 or 1/8 scale
        with _c_stderr_to_log(p) if im.format == "TIFF" else contextlib.nullcontext():
            im.load()
        w, h = im.size
        if w < 1 or h < 1 or w * h > MAX_PIXELS:  # formats whose load() picks another size
            raise ImageError(f"{p}: decoded image has an unusable size {w}x{h}")
        return im
    except ImageError:
        im.close()
        raise
    except MemoryError:
        im.close()
        raise
    except Exception as exc:
        # A decoder on hostile data: OSError ("image file is truncated"), SyntaxError, EOFError,
        # ValueError, struct.error, zlib.error, TypeError, IndexError, KeyError... none of them
        # is a bug in trifit, all mean "this file is broken".
        im.close()
        raise ImageError(f"{p}: cannot decode image: {_one_line(exc)}") from None


@contextlib.contextmanager
def _c_stderr_to_log(p: Path):
    """libtiff (used by Pillow for compressed TIFF) prints its errors straight to file
    descriptor 2 ("ZIPDecode: Decoding error at scanline 0, ..."), before Pillow raises. For the
    length of one TIFF decode, fd 2 goes to a temporary file whose text is logged at debug level,
    so a refused file still gives exactly one line on stderr."""
    try:
        tmp = tempfile.TemporaryFile()
    except OSError:  # no temporary file: leave stderr alone rather than refuse the image
        yield
        return
    with tmp:
        try:
            saved = os.dup(2)
        except OSError:  # no stderr at all: nothing to protect
            yield
            return
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read(4096).decode("utf-8", "replace").strip()
            if text:
                log.debug("%s: libtiff said: %s", p, " | ".join(text.splitlines()))


def prepare(im: Image.Image, size: int | None = None) -> np.ndarray:
    """Orientation, mode conversion, alpha compositing and resizing of an opened image."""
    im = _orient(im)
    im = _flatten(im)  # "L" or "RGB"; resizing grey before expanding to RGB gives the same pixels
    w, h = im.size
    if w < 1 or h < 1:
        raise ImageError(f"image has no pixels ({w}x{h})")
    if size is not None:
        scale = int(size) / max(w, h)
        nw, nh = max(1, round(w * scale)), max(1, round(h * scale))
        if (nw, nh) != (w, h):
            im = im.resize((nw, nh), Image.Resampling.LANCZOS)
    if im.mode != "RGB":
        im = im.convert("RGB")
    arr = np.asarray(im, dtype=np.float32)
    arr /= 255.0
    return arr


def checked_size(path) -> tuple[int, int]:
    """(width, height) as :func:`load_image` orients the image, once the whole file has been
    decoded under load_image's checks and caps: :class:`ImageError` (one line) for whatever
    load_image would refuse (a truncated JPEG among them, which a header or ``verify()`` passes)."""
    _read(Path(path), 64, lambda im: None)  # (a JPEG at a reduced scale: faster, and still all of its data)
    return source_size(path)


def source_size(path) -> tuple[int, int]:
    """(width, height) of an image file as :func:`load_image` orients it (EXIF applied), read
    from its header; for a file load_image has accepted."""
    with Image.open(path) as im:
        return _oriented_size(im)


def _oriented_size(im: Image.Image) -> tuple[int, int]:
    w, h = im.size
    try:
        orientation = im.getexif().get(_EXIF_ORIENTATION, 1)
    except Exception:  # an unreadable EXIF block counts as orientation 1, as in _orient
        orientation = 1
    return (h, w) if orientation in (5, 6, 7, 8) else (w, h)


def _orient(im: Image.Image) -> Image.Image:
    """Apply the EXIF orientation; an unreadable EXIF block counts as orientation 1."""
    try:
        orientation = im.getexif().get(_EXIF_ORIENTATION, 1)
    except MemoryError:
        raise
    except Exception as exc:  # corrupt EXIF from a hostile or broken file: ignore it
        log.debug("ignoring unreadable EXIF: %s", _one_line(exc))
        return im
    method = _ORIENTATION.get(orientation) if isinstance(orientation, int) else None
    return im.transpose(method) if method is not None else im


def _flatten(im: Image.Image) -> Image.Image:
    """Any mode -> "L" or "RGB" (8 bits), alpha composited over white.

    16-bit grey (I;16*) is scaled by 255/65535. 32-bit integer (I) is taken as 16-bit when any
    value exceeds 255, else as 8-bit; float (F) as [0, 1] when its maximum is <= 1, else as
    [0, 255]; both clipped, NaN as 0.
    """
    mode = im.mode
    if mode.startswith("I;16"):
        return _to_l(im, lambda a: np.asarray(a, dtype=np.float64) / 65535.0 * 255.0 + 0.5)
    if mode == "I":
        top = 65535.0 if _blockwise_max(im, lambda a: a) > 255 else 255.0
        return _to_l(im, lambda a: np.asarray(a, dtype=np.float64) / top * 255.0 + 0.5)
    if mode == "F":
        scale = 255.0 if _blockwise_max(im, lambda a: np.nan_to_num(a.astype(np.float64))) <= 1.0 else 1.0
        return _to_l(im, lambda a: np.nan_to_num(a.astype(np.float64)) * scale)
    if mode == "1":
        return im.convert("L")
    if mode in ("L", "RGB"):
        return im
    if mode == "P":
        transparent = "transparency" in im.info or (im.palette is not None and im.palette.mode == "RGBA")
        im = im.convert("RGBA" if transparent else "RGB")
        if im.mode == "RGB":
            return im
    if mode in ("LA", "PA", "RGBa", "La"):
        im = im.convert("RGBA")
    if im.mode == "RGBA":
        white = Image.new("RGBA", im.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, im).convert("RGB")
    try:
        return im.convert("RGB")  # CMYK, YCbCr, LAB, HSV, RGBX, ...
    except ValueError as exc:
        raise ImageError(f"unsupported pixel mode {mode}: {_one_line(exc)}") from None


def _row_blocks(im: Image.Image):
    w, h = im.size
    rows = max(1, _BLOCK_PIXELS // max(1, w))
    for top in range(0, h, rows):
        yield top, np.asarray(im.crop((0, top, w, min(h, top + rows))))


def _blockwise_max(im: Image.Image, fn) -> float:
    return max(float(np.max(fn(block))) for _, block in _row_blocks(im))


def _to_l(im: Image.Image, fn) -> Image.Image:
    """A one-band 16/32-bit or float image -> "L" through ``fn`` (then clipped to [0, 255] and
    truncated), a block of rows at a time so no full-size float64 copy is made."""
    w, h = im.size
    out = np.empty((h, w), dtype=np.uint8)
    for top, block in _row_blocks(im):
        out[top : top + block.shape[0]] = np.clip(fn(block), 0, 255).astype(np.uint8)
    return Image.fromarray(out, "L")


def as_target(image, size: int | None = None) -> np.ndarray:
    """A target from a path, a PIL image or an array (uint8 or float in [0, 1]), longer side ``size``."""
    if isinstance(image, (str, os.PathLike)):
        return load_image(image, size)
    if isinstance(image, Image.Image):
        return prepare(image, size)
    arr = np.asarray(image)
    if arr.ndim == 2:
        arr = np.stack([arr] * 3, axis=-1)
    if arr.ndim != 3 or arr.shape[2] not in (3, 4) or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ImageError(f"target array must be (H, W, 3), got {arr.shape}")
    arr = arr[..., :3]
    if arr.dtype == np.uint8:
        arr = arr.astype(np.float32) / 255.0
    arr = np.asarray(arr, dtype=np.float32)
    if not np.all(np.isfinite(arr)) or arr.min() < 0 or arr.max() > 1:
        raise ImageError("target array values must be finite and in [0, 1]")
    if size is not None and max(arr.shape[:2]) != size:
        im = Image.fromarray((arr * 255 + 0.5).astype(np.uint8), "RGB")
        return prepare(im, size)
    return arr
