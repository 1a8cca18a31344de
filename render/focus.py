"""Focus maps: per-pixel loss weights, so a fit spends its triangles where a person cares.

A focus map is an (H, W) array of weights in [0, 1] over a fit's working frame (white = 1, black
= 0). It multiplies each pixel's loss term, and the loss a fit reports is the weighted mean,
``sum(w * l) / (3 sum(w))`` (docs/MODEL.md, section 5): with every weight 1 it is the plain mean,
and a half-black map gives the other half's own mean error, so PSNR-based stops keep their
meaning. Growth and respawn place triangles in proportion to the weighted error, and pruning
ranks triangles by their weighted removal cost.

The GPU kernels take the weights pre-scaled by ``N / sum(w)`` (:func:`scaled`), so the weighted
mean needs no per-image divisor of its own: the loss record's ``1 / (3 N)`` stays as it is, and
a map of ones is scaled by exactly 1 -- a weighted fit with every weight 1 gives the same bits as
an unweighted one.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from .errors import ImageError


def check_weights(weights, shape: tuple[int, ...]) -> np.ndarray:
    """``weights`` as float64 (H, W) for a frame of ``shape`` (H, W), or ImageError: the map must
    have that shape, finite weights in [0, 1], and some weight above 0 (an all-black map would
    make every pixel count for nothing)."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 2 or w.shape != tuple(shape):
        raise ImageError(f"a focus map must be {shape[1]}x{shape[0]} (the frame), got shape {w.shape}")
    if not np.all(np.isfinite(w)) or w.min() < 0 or w.max() > 1:
        raise ImageError("focus weights must be finite and in [0, 1]")
    if not w.sum() > 0:
        raise ImageError("the focus map is all black: no pixel would count")
    return w


def check_batch(weights, targets: np.ndarray) -> np.ndarray | None:
    """(B, H, W) float64 weights for targets (B, H, W, 3): one map (H, W) for every image or a
    stack (B, H, W); None stays None."""
    if weights is None:
        return None
    B, H, W = targets.shape[:3]
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim == 2:
        w = np.broadcast_to(w, (B, H, W))
    if w.ndim != 3 or w.shape[0] != B:
        raise ImageError(f"focus weights must be (H, W) or (B={B}, H, W), got shape {w.shape}")
    return np.stack([check_weights(m, (H, W)) for m in w])


def scaled(weights: np.ndarray) -> np.ndarray:
    """float32 (B, H, W): each image's weights times ``N / sum(w)``, what the kernels multiply
    the loss terms by (their mean over the frame is then the weighted mean; ones stay ones)."""
    w = np.asarray(weights, dtype=np.float64)
    n = w.shape[-1] * w.shape[-2]
    return (w * (n / w.sum(axis=(-2, -1), keepdims=True))).astype(np.float32)


def focus_map(source, shape: tuple[int, int]) -> np.ndarray:
    """A focus map for a frame of ``shape`` (H, W): from a path (a grey image; any mode taken as
    its grey levels), a PIL image or an array (float in [0, 1] or uint8) of the frame's aspect,
    resized to the frame exactly (bilinear: a weight is an average of the weights it covers).
    A map of another aspect ratio, or all black, is an ImageError."""
    from PIL import Image

    from .imageio import grey_levels, load_grey

    H, W = shape
    if isinstance(source, (str, os.PathLike)):
        grey = load_grey(source, max(W, H))
        name = str(source)
    elif isinstance(source, Image.Image):
        grey = grey_levels(source)
        name = "the focus image"
    else:
        arr = np.asarray(source)
        grey = arr.astype(np.float32) / 255.0 if arr.dtype == np.uint8 else arr.astype(np.float64)
        name = "the focus array"
        if grey.ndim != 2:
            raise ImageError(f"{name} must be (H, W), got shape {grey.shape}")
    try:
        grey = check_weights(grey, grey.shape)  # (before resizing hides a bad value)
    except ImageError as exc:
        raise ImageError(f"{name}: {exc}") from None
    h, w = grey.shape
    if (h, w) == (H, W):
        return grey
    _check_aspect(name, w, h, W, H)
    resized = Image.fromarray(grey.astype(np.float32), "F").resize((W, H), Image.Resampling.BILINEAR)
    return np.clip(np.asarray(resized, dtype=np.float64), 0.0, 1.0)


def _check_aspect(name: str, w: int, h: int, W: int, H: int) -> None:
    """Refuse a map whose aspect ratio is not the frame's: scaled to the frame's longer side it
    must land within one pixel of the frame in both directions."""
    s = max(W, H) / max(w, h)
    if abs(w * s - W) > 1 or abs(h * s - H) > 1:
        raise ImageError(f"{name}: a focus map of {w}x{h} does not have the aspect ratio of the {W}x{H} frame")


def half_size(weights: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """(B, h, w) maps for the half-size stage's frame ``shape`` (h, w): box averages -- a weight
    is the mean of the pixels it covers, and every pixel is covered, so a map with some weight
    keeps some."""
    from PIL import Image

    h, w = shape
    out = [np.asarray(Image.fromarray(np.asarray(m, dtype=np.float32), "F").resize((w, h), Image.Resampling.BOX),
                      dtype=np.float64) for m in weights]
    return np.clip(np.stack(out), 0.0, 1.0)


def digest(weights: np.ndarray) -> str:
    """SHA-256 of the map as the fit uses it (float32, the working frame): what a scene's meta
    records to name its focus map (the pixels stay out of the scene file)."""
    return hashlib.sha256(np.ascontiguousarray(weights, dtype=np.float32).tobytes()).hexdigest()
