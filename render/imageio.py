"""Reading target images: any Pillow format, EXIF orientation applied, grey / palette / 16-bit /
CMYK converted to 8-bit RGB, alpha composited over white, resized so the longer side is ``size``
(Pillow LANCZOS). Returns float32 (H, W, 3) in [0, 1]. Every failure is an :class:`ImageError`
with a one-line reason.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from .errors import ImageError

#: Images with more pixels than this are refused before decoding (decompression bombs).
MAX_PIXELS = 120_000_000
#: Working sizes beyond this are refused (the fit and the GUI would be unusable anyway).
MAX_WORKING_SIZE = 4096


def load_image(path: str | os.PathLike[str], size: int | None = None) -> np.ndarray:
    p = Path(path)
    if size is not None and not (1 <= int(size) <= MAX_WORKING_SIZE):
        raise ImageError(f"working size must be between 1 and {MAX_WORKING_SIZE} px, got {size}")
    if not p.exists():
        raise ImageError(f"{p}: no such file")
    if p.is_dir():
        raise ImageError(f"{p}: is a folder, not an image")
    if p.stat().st_size == 0:
        raise ImageError(f"{p}: empty file")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(p) as im:
                w, h = im.size
                if w * h > MAX_PIXELS:
                    raise ImageError(f"{p}: {w}x{h} pixels is more than the {MAX_PIXELS // 1_000_000} MP cap")
                if size is not None and hasattr(im, "draft") and im.format == "JPEG":
                    im.draft("RGB", (int(size), int(size)))  # decode JPEGs at a reduced scale
                im.load()
                return prepare(im, size)
    except ImageError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise ImageError(f"{p}: image is too large (decompression bomb guard)") from None
    except UnidentifiedImageError:
        raise ImageError(f"{p}: not an image Pillow can read") from None
    except (OSError, ValueError, SyntaxError, EOFError, MemoryError) as exc:
        raise ImageError(f"{p}: cannot decode image: {exc}") from None


def prepare(im: Image.Image, size: int | None = None) -> np.ndarray:
    """Orientation, mode conversion, alpha compositing and resizing of an opened image."""
    im = ImageOps.exif_transpose(im)
    im = to_rgb(im)
    if size is not None:
        w, h = im.size
        scale = int(size) / max(w, h)
        nw, nh = max(1, round(w * scale)), max(1, round(h * scale))
        if (nw, nh) != (w, h):
            im = im.resize((nw, nh), Image.Resampling.LANCZOS)
    return np.asarray(im, dtype=np.float32) / 255.0


def to_rgb(im: Image.Image) -> Image.Image:
    if im.mode in ("I;16", "I;16B", "I;16L", "I"):
        arr = np.asarray(im, dtype=np.float64)
        top = 65535.0 if arr.max() > 255 else 255.0
        im = Image.fromarray(np.clip(arr / top * 255.0 + 0.5, 0, 255).astype(np.uint8), "L")
    if im.mode == "F":
        arr = np.nan_to_num(np.asarray(im, dtype=np.float64))
        im = Image.fromarray(np.clip(arr * (255.0 if arr.max() <= 1.0 else 1.0), 0, 255).astype(np.uint8), "L")
    if im.mode == "P":
        im = im.convert("RGBA")
    if im.mode in ("LA", "PA", "RGBa", "La"):
        im = im.convert("RGBA")
    if im.mode == "RGBA":
        white = Image.new("RGBA", im.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, im).convert("RGB")
    return im.convert("RGB")


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
