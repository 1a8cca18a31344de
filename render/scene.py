"""The scene: N soft triangles over a background, and its JSON file format (version 1).

The contract is ``docs/MODEL.md``. A scene is plain data: a frame size, an edge softness
``sigma`` (a fraction of the frame's shorter side), a background rgb triple and a (T, 10) float64
array of triangles ``[x0, y0, x1, y1, x2, y2, r, g, b, a]`` in normalized image coordinates.
Unknown top-level keys of a loaded file (``meta`` among them) are kept in :attr:`Scene.extra`
and written back on save; so is the optional ``locked`` key (the indices of triangles a fit must
keep as they are), which a reader checks: whole numbers, each a triangle's index, none twice.
"""

from __future__ import annotations

import json
import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import SceneError
from .fileutil import atomic_write_bytes
from .limits import is_whole

FORMAT = "trifit-scene"
VERSION = 1
#: Largest triangle count a scene file may hold. A cap keeps a hostile file from asking the
#: engine for gigabytes; 65536 triangles is far beyond any useful fit.
MAX_TRIANGLES = 65536
#: Largest frame side a scene file may declare (renders may still be asked for at other sizes).
MAX_FRAME_SIDE = 16384
#: Largest scene file :meth:`Scene.load` reads (a full 65536-triangle scene is about 15 MB).
MAX_FILE_BYTES = 64 * 1024 * 1024  # a full 65536-triangle scene is ~15 MB
REQUIRED_KEYS = ("format", "version", "width", "height", "sigma", "background", "triangles")


@dataclass
class Scene:
    """A frame of ``width`` x ``height`` pixels holding soft triangles over a background."""

    width: int
    height: int
    sigma: float
    background: np.ndarray  # (3,) float64 in [0, 1]
    triangles: np.ndarray  # (T, 10) float64
    extra: dict[str, Any] = field(default_factory=dict)  # unknown keys, "meta" among them

    def __post_init__(self) -> None:
        self.background = np.asarray(self.background, dtype=np.float64).reshape(3)
        self.triangles = np.asarray(self.triangles, dtype=np.float64).reshape(-1, 10)

    # ------------------------------------------------------------------ properties
    @property
    def n_triangles(self) -> int:
        return int(self.triangles.shape[0])

    @property
    def locked(self) -> list[int]:
        """The optional ``locked`` key: indices of the triangles a fit keeps as they are, sorted
        (empty when the file has none)."""
        return [int(i) for i in self.extra.get("locked", [])]

    @property
    def meta(self) -> dict[str, Any]:
        """The free-form ``meta`` record (seed, source image, iterations, software version)."""
        return self.extra.setdefault("meta", {})

    def copy(self) -> Scene:
        return Scene(
            self.width,
            self.height,
            float(self.sigma),
            self.background.copy(),
            self.triangles.copy(),
            plain_extra(self.extra),
        )

    # ------------------------------------------------------------------ construction
    @classmethod
    def random(
        cls,
        n: int,
        width: int,
        height: int,
        seed: int = 0,
        *,
        size: tuple[float, float] = (0.1, 0.4),
        opacity: tuple[float, float] = (0.2, 0.95),
        sigma_px: float = 1.5,
    ) -> Scene:
        """A reproducible random scene: triangles whose extent is ``size`` of the frame.

        Each triangle is a centre in [0, 1]^2 plus three vertices at random angles and radii of
        ``size/2`` of the frame; colours uniform, opacity uniform in ``opacity``; sigma is
        ``sigma_px`` pixels of the frame's shorter side. This is the scene family the
        benchmarks use (docs/PERFORMANCE.md).
        """
        _check_frame(width, height)
        if max(width, height) > MAX_FRAME_SIDE:
            raise SceneError(f"frame sides must be at most {MAX_FRAME_SIDE}, got {width} x {height}")
        if not is_whole(n) or not 0 <= n <= MAX_TRIANGLES:
            raise SceneError(f"the triangle count must be a whole number in [0, {MAX_TRIANGLES}], got {_show(n)}")
        if not is_whole(seed) or seed < 0:
            raise SceneError(f"the seed must be a whole number >= 0, got {_show(seed)}")
        if not (np.isfinite(sigma_px) and sigma_px > 0):
            raise SceneError(f"sigma_px must be a positive number, got {_show(sigma_px)}")
        if not (0 <= opacity[0] <= opacity[1] <= 1 and 0 < size[0] <= size[1] and np.isfinite(size[1])):
            raise SceneError(f"need 0 <= opacity low <= high <= 1 and 0 < size low <= high, got {opacity}, {size}")
        rng = np.random.default_rng(seed)
        centres = rng.uniform(0.0, 1.0, size=(n, 1, 2))
        radius = rng.uniform(size[0] / 2, size[1] / 2, size=(n, 3, 1))
        angles = rng.uniform(0.0, 2 * np.pi, size=(n, 3))
        offsets = np.stack([np.cos(angles), np.sin(angles)], axis=-1) * radius
        verts = (centres + offsets).reshape(n, 6)
        rgb = rng.uniform(0.0, 1.0, size=(n, 3))
        alpha = rng.uniform(opacity[0], opacity[1], size=(n, 1))
        tris = np.concatenate([verts, rgb, alpha], axis=1)
        bg = rng.uniform(0.0, 1.0, size=3)
        sigma = sigma_px / min(width, height)
        return cls(width, height, sigma, bg, tris, {"meta": {"generator": "Scene.random", "seed": seed}})

    # ------------------------------------------------------------------ file format
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "width": int(self.width),
            "height": int(self.height),
            "sigma": float(self.sigma),
            "background": [float(v) for v in self.background],
            "triangles": [[float(v) for v in row] for row in self.triangles],
        }
        for key, value in plain_extra(self.extra).items():
            if key not in out:
                out[key] = value
        return out

    def to_json(self) -> str:
        # repr-exact floats (json uses repr), so a save/load round trip is bit-exact.
        return json.dumps(self.to_dict(), indent=1, allow_nan=False)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the scene file atomically (a temporary file renamed over the target), once the
        scene passes the rules :meth:`load` applies (a :class:`SceneError` naming the rule and the
        entry): what save writes, load reads."""
        atomic_write_bytes(Path(path), self.checked_json().encode("utf-8"))

    def checked_json(self) -> str:
        """:meth:`to_json` of a scene that passes the file's rules, else :class:`SceneError`."""
        for key in ("width", "height"):
            value = getattr(self, key)
            if not is_whole(value):
                raise SceneError(f"'{key}' must be a whole number, got {_show(value)}")
        try:
            doc = self.to_dict()
        except SceneError:
            raise
        except (TypeError, ValueError) as exc:  # a field of the wrong shape or type
            raise SceneError(f"the scene cannot be written: {exc}") from None
        Scene.from_dict(doc)  # (the rules, naming the entry that breaks one)
        return json.dumps(doc, indent=1, allow_nan=False)

    @classmethod
    def from_dict(cls, data: Any) -> Scene:
        """Validate a decoded scene document; raise :class:`SceneError` naming rule and entry."""
        if not isinstance(data, dict):
            raise SceneError("the document must be a JSON object, got " + type(data).__name__)
        missing = [k for k in REQUIRED_KEYS if k not in data]
        if missing:
            raise SceneError(f"missing required key(s): {', '.join(missing)}")
        if data["format"] != FORMAT:
            raise SceneError(f"'format' must be \"{FORMAT}\", got {_show(data['format'])}")
        version = data["version"]
        if not _is_int(version):
            raise SceneError(f"'version' must be an integer, got {_show(version)}")
        if version != VERSION:
            raise SceneError(f"unsupported 'version' {_show(version)} (this software reads version {VERSION})")
        width = _positive_int(data["width"], "width")
        height = _positive_int(data["height"], "height")
        sigma = _finite_number(data["sigma"], "sigma")
        if not sigma > 0:
            raise SceneError(f"'sigma' must be > 0, got {sigma!r}")
        background = _number_list(data["background"], "background", 3)
        for k, v in enumerate(background):
            if not 0.0 <= v <= 1.0:
                raise SceneError(f"'background[{k}]' must be in [0, 1], got {v!r}")
        raw = data["triangles"]
        if not isinstance(raw, list):
            raise SceneError(f"'triangles' must be a list, got {type(raw).__name__}")
        if len(raw) > MAX_TRIANGLES:
            raise SceneError(f"'triangles' holds {len(raw)} entries, more than the cap of {MAX_TRIANGLES}")
        tris = np.empty((len(raw), 10), dtype=np.float64)
        for i, row in enumerate(raw):
            values = _number_list(row, f"triangles[{i}]", 10)
            for k in range(6, 10):
                if not 0.0 <= values[k] <= 1.0:
                    name = "rgba"[k - 6]
                    raise SceneError(
                        f"'triangles[{i}][{k}]' ({name}) must be in [0, 1], got {values[k]!r}"
                    )
            tris[i] = values
        extra = {k: v for k, v in data.items() if k not in REQUIRED_KEYS}
        _check_finite_everywhere(extra)  # "every number finite" holds for meta too (or save fails)
        if "locked" in extra:
            extra["locked"] = locked_indices(extra["locked"], len(tris))
        return cls(width, height, sigma, np.array(background), tris, extra)

    @classmethod
    def from_json(cls, text: str | bytes) -> Scene:
        try:
            data = json.loads(text, parse_constant=_reject_constant)
        except SceneError:
            raise
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise SceneError(f"not valid JSON: {exc}") from None
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Scene:
        """Read and validate a scene file; raise :class:`SceneError` on any broken rule."""
        p = Path(path)
        try:
            st = p.stat()
            if stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode):  # (opening a pipe waits for a writer)
                raise SceneError(f"{p}: a pipe or socket, not a scene file")
            size = st.st_size
            if size > MAX_FILE_BYTES:
                raise SceneError(f"{p}: file is {size} bytes, larger than a scene file can be")
            with open(p, "rb") as f:  # bounded: a device such as /dev/zero reports size 0
                raw = f.read(MAX_FILE_BYTES + 1)
            if len(raw) > MAX_FILE_BYTES:
                raise SceneError(f"{p}: more than {MAX_FILE_BYTES} bytes, larger than a scene file can be")
        except SceneError:
            raise
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
            raise SceneError(f"{p}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
        if not raw.strip():
            raise SceneError(f"{p}: empty file, not a scene")
        try:
            return cls.from_json(raw)
        except SceneError as exc:
            raise SceneError(f"{p}: {exc}") from None


# ---------------------------------------------------------------------- validation helpers
def _reject_constant(name: str) -> Any:
    raise SceneError(f"every number must be finite, found {name}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (isinstance(v, (int, float))) and not isinstance(v, bool)


def _finite_number(v: Any, name: str) -> float:
    if not _is_number(v):
        raise SceneError(f"'{name}' must be a number, got {type(v).__name__}")
    try:
        f = float(v)
    except OverflowError:  # an integer literal beyond the float range, e.g. 1 followed by 400 zeros
        raise SceneError(f"'{name}' must be finite, got {_show(v)} (beyond the float range)") from None
    if not math.isfinite(f):
        raise SceneError(f"'{name}' must be finite, got {v!r}")
    return f


def _positive_int(v: Any, name: str) -> int:
    if not _is_int(v):
        raise SceneError(f"'{name}' must be a positive integer, got {_show(v)}")
    if v <= 0:
        raise SceneError(f"'{name}' must be a positive integer, got {_show(v)}")
    if v > MAX_FRAME_SIDE:
        raise SceneError(f"'{name}' is {_show(v)}, above the cap of {MAX_FRAME_SIDE}")
    return int(v)


def _number_list(v: Any, name: str, length: int) -> list[float]:
    if not isinstance(v, list) or len(v) != length:
        got = f"a list of {len(v)}" if isinstance(v, list) else type(v).__name__
        raise SceneError(f"'{name}' must be a list of {length} numbers, got {got}")
    return [_finite_number(x, f"{name}[{k}]") for k, x in enumerate(v)]


def _show(v: Any) -> str:
    """A short, safe rendering of a value from a file for a one-line message."""
    if isinstance(v, (list, dict)):
        return f"{'a list' if isinstance(v, list) else 'an object'} of {len(v)}"
    if isinstance(v, str):
        return repr(v[:40]) + ("..." if len(v) > 40 else "")
    if isinstance(v, int) and v.bit_length() > 128:  # repr() of a huge int is slow or refused
        return f"an integer of {v.bit_length()} bits"
    return f"{v!r:.60}"


def _json_value(v: Any) -> Any:
    """json's hook for what it cannot write itself: numpy's scalars and arrays as the numbers and
    lists they hold (a fit's meta is often computed with numpy)."""
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    raise TypeError(f"{type(v).__name__} is not a JSON value")


def plain_extra(extra: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a scene's unknown keys as plain JSON values (numpy's turned into Python's),
    or :class:`SceneError` saying what cannot be written."""
    if not isinstance(extra, dict):
        raise SceneError(f"the scene's extra keys must be a dict, got {type(extra).__name__}")
    try:
        return json.loads(json.dumps(extra, default=_json_value))
    except (TypeError, ValueError, RecursionError) as exc:
        raise SceneError(f"the scene's extra keys (meta among them) cannot be written as JSON: {exc}") from None


def _check_finite_everywhere(extra: dict[str, Any]) -> None:
    """Refuse NaN / inf anywhere in the unknown keys (JSON "1e999" decodes to inf, and the file
    could not be saved again). Iterative, so a deeply nested document costs no recursion."""
    stack: list[tuple[Any, Any]] = [((None, k), v) for k, v in extra.items()]
    while stack:
        where, v = stack.pop()  # where: (parent, key) links, spelled out only for the message
        if isinstance(v, float) and not math.isfinite(v):
            keys = []
            while where is not None:
                where, key = where
                keys.append(key)
            path = keys.pop() + "".join(f"[{k!r}]" for k in reversed(keys))
            raise SceneError(f"every number must be finite, found {v!r} in '{path:.80}'")
        if isinstance(v, dict):
            stack.extend(((where, k), x) for k, x in v.items())
        elif isinstance(v, list):
            stack.extend(((where, i), x) for i, x in enumerate(v))


def locked_indices(v: Any, n_triangles: int) -> list[int]:
    """A ``locked`` list, checked and sorted: whole numbers in [0, n_triangles), none twice."""
    if not isinstance(v, list):
        raise SceneError(f"'locked' must be a list of triangle indices, got {type(v).__name__}")
    for k, i in enumerate(v):
        if not _is_int(i) or not 0 <= i < n_triangles:
            raise SceneError(f"'locked[{k}]' must be a triangle index in [0, {n_triangles}), got {_show(i)}")
    if len(set(v)) != len(v):
        raise SceneError("'locked' must not name a triangle twice")
    return sorted(int(i) for i in v)


def _check_frame(width: int, height: int) -> None:
    if not (_is_int(width) or isinstance(width, np.integer)) or not (_is_int(height) or isinstance(height, np.integer)) \
            or width <= 0 or height <= 0:
        raise SceneError(f"frame size must be positive integers, got {width!r} x {height!r}")
