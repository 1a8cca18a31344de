"""Data layouts that Python and WGSL share, each declared once, here.

A :class:`Struct` is an ordered list of ``(field, WGSL type[, comment])``. From it come the byte
offsets, alignment and size by WGSL's rules (uniform or storage use), the bytes of a value by field
name (:meth:`Struct.pack`), and the WGSL ``struct`` text, which render/gpu/shaders.py puts in front
of every kernel, so no .wgsl file spells these structs (the assembly refuses one that does).
:data:`SCENE` is the per-image scene record in the flat scene buffer: its offsets, its packing and
the WGSL constants and index functions the kernels read it with.

WGSL alignment (https://www.w3.org/TR/WGSL/#alignment-and-size): a scalar aligns to 4, a vec2 to 8,
a vec3 and a vec4 to 16 (a vec3 is 12 bytes: a scalar may follow in its last 4); each member sits at
the next multiple of its alignment; a struct aligns to its largest member, and its size is the end
of its last member rounded up to that. In the uniform address space a struct's alignment is also
rounded up to 16, so a uniform's size here is a multiple of 16 (std140, as the host writes it). The
generated text spells every gap as ``_padN: u32`` members, so its WGSL size is this size exactly.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

USAGES = ("uniform", "storage")


@dataclass(frozen=True)
class WgslType:
    align: int
    size: int
    component: str  # numpy dtype of one component
    count: int      # components

    @property
    def integer(self) -> bool:
        return self.component[1] in "iu"


def _types() -> dict[str, WgslType]:
    out = {}
    for scalar, comp in (("f32", "<f4"), ("u32", "<u4"), ("i32", "<i4")):
        out[scalar] = WgslType(4, 4, comp, 1)
        for n, align in ((2, 8), (3, 16), (4, 16)):
            out[f"vec{n}{scalar[0]}"] = out[f"vec{n}<{scalar}>"] = WgslType(align, 4 * n, comp, n)
    return out


TYPES = _types()


def _round_up(value: int, multiple: int) -> int:
    return (value + multiple - 1) // multiple * multiple


@dataclass(frozen=True)
class Field:
    name: str
    wgsl: str    # the WGSL type as declared
    offset: int  # bytes
    size: int    # bytes
    doc: str = ""

    @property
    def type(self) -> WgslType:
        return TYPES[self.wgsl]


class Struct:
    """One WGSL struct shared with Python: ``Struct("Frame", [("width", "u32"), ...], "uniform")``."""

    def __init__(self, name: str, fields, usage: str = "uniform"):
        if usage not in USAGES:
            raise ValueError(f"struct {name}: usage must be one of {USAGES}, got {usage!r}")
        if not fields:
            raise ValueError(f"struct {name} has no fields")
        self.name, self.usage = name, usage
        laid: list[Field] = []
        offset, align = 0, 4
        for entry in fields:
            fname, wtype, *doc = entry
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", fname) or fname.startswith("_pad"):
                raise ValueError(f"struct {name}: bad field name {fname!r}")
            if any(f.name == fname for f in laid):
                raise ValueError(f"struct {name}: field {fname!r} declared twice")
            t = TYPES.get(wtype)
            if t is None:
                raise ValueError(f"struct {name}.{fname}: unsupported WGSL type {wtype!r} "
                                 f"(one of {', '.join(sorted(TYPES))})")
            offset = _round_up(offset, t.align)
            laid.append(Field(fname, wtype, offset, t.size, doc[0] if doc else ""))
            offset += t.size
            align = max(align, t.align)
        self.fields = tuple(laid)
        self.align = _round_up(align, 16) if usage == "uniform" else align
        self.size = _round_up(offset, self.align)
        self._by_name = {f.name: f for f in self.fields}
        self.dtype = np.dtype({
            "names": [f.name for f in self.fields],
            "formats": [np.dtype(f.type.component) if f.type.count == 1 else np.dtype((f.type.component, f.type.count))
                        for f in self.fields],
            "offsets": [f.offset for f in self.fields],
            "itemsize": self.size,
        })

    def __repr__(self) -> str:
        return f"Struct({self.name!r}, {len(self.fields)} fields, {self.usage}, {self.size} bytes)"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def field(self, name: str) -> Field:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"struct {self.name} has no field {name!r} (fields: {', '.join(self.names)})") from None

    def offset(self, name: str) -> int:
        return self.field(name).offset

    # ------------------------------------------------------------------ packing
    def _check_names(self, values: Mapping, complete: bool) -> None:
        unknown = [k for k in values if k not in self._by_name]
        missing = [f.name for f in self.fields if f.name not in values] if complete else []
        if unknown or missing:
            parts = ([f"unknown {', '.join(map(repr, unknown))}"] if unknown else []) + \
                    ([f"missing {', '.join(map(repr, missing))}"] if missing else [])
            raise KeyError(f"struct {self.name}: {'; '.join(parts)}")

    def _value(self, f: Field, value):
        arr = np.asarray(value)
        if arr.shape != (() if f.type.count == 1 else (f.type.count,)):
            raise ValueError(f"struct {self.name}.{f.name} is {f.wgsl}: got a value of shape {arr.shape}")
        if f.type.integer:  # no silent truncation of a float into a u32 / i32 field
            try:
                items = [operator.index(v) for v in (arr.ravel().tolist() if arr.ndim else [arr.item()])]
            except TypeError:
                raise TypeError(f"struct {self.name}.{f.name} is {f.wgsl}: got {value!r}, not an integer") from None
            return items[0] if f.type.count == 1 else items
        return arr

    def pack(self, values: Mapping | None = None, /, **named) -> bytes:
        """The bytes of one value (``size`` bytes, padding zero); every field by name, no others."""
        vals = {**(values or {}), **named}
        self._check_names(vals, complete=True)
        rec = np.zeros((), self.dtype)
        for f in self.fields:
            rec[f.name] = self._value(f, vals[f.name])
        return rec.tobytes()

    def pack_at(self, **values) -> tuple[int, bytes]:
        """(byte offset, bytes) of some fields, consecutive in declaration order, to write into a
        buffer that holds this struct (the other fields keep their values there)."""
        self._check_names(values, complete=False)
        idx = sorted(self.fields.index(self._by_name[k]) for k in values)
        if not idx or idx != list(range(idx[0], idx[-1] + 1)):
            raise ValueError(f"struct {self.name}: pack_at needs consecutive fields, got {', '.join(values)}")
        rec = np.zeros((), self.dtype)
        for k, v in values.items():
            rec[k] = self._value(self._by_name[k], v)
        first, last = self.fields[idx[0]], self.fields[idx[-1]]
        return first.offset, rec.tobytes()[first.offset:last.offset + last.size]

    def unpack(self, data) -> dict:
        """Field values of packed bytes (Python numbers; tuples for vectors)."""
        rec = np.frombuffer(bytes(data[: self.size]), self.dtype)[0]
        return {f.name: (rec[f.name].item() if f.type.count == 1 else tuple(rec[f.name].tolist()))
                for f in self.fields}

    # ------------------------------------------------------------------ WGSL
    def members(self) -> list[tuple[str, str, str]]:
        """(name, type, comment) of the WGSL struct, the padding spelled out as u32 members."""
        out, at, pads = [], 0, 0
        for f in [*self.fields, None]:
            end = self.size if f is None else f.offset
            while at < end:
                out.append((f"_pad{pads}", "u32", ""))
                pads, at = pads + 1, at + 4
            if f is not None:
                out.append((f.name, f.wgsl, f.doc))
                at = f.offset + f.size
        return out

    def wgsl(self) -> str:
        members = self.members()
        width = max(len(f"{n}: {t},") for n, t, _ in members)
        lines = [f"// {self.name} ({self.usage}, {self.size} bytes): generated by render/gpu/layouts.py from its "
                 "one declaration", f"struct {self.name} {{"]
        for n, t, doc in members:
            decl = f"{n}: {t},"
            lines.append(f"    {decl:<{width}}  // {doc}" if doc else f"    {decl}")
        return "\n".join(lines) + "\n}\n"


def declared_structs(wgsl: str) -> list[str]:
    """Names of the structs a WGSL text declares (a line starting with ``struct Name``)."""
    return re.findall(r"^[ \t]*struct[ \t]+([A-Za-z_][A-Za-z0-9_]*)", wgsl, flags=re.M)


class SceneRecord:
    """Image b's scene record in the scene buffer (array<f32>), at ``b * stride(n_tris)`` floats:
    n_tris triangles of ``TRI_FIELDS`` (the model's triangle row), then the ``TAIL`` parts."""

    TRI_FIELDS = ("x0", "y0", "x1", "y1", "x2", "y2", "r", "g", "b", "a")
    TAIL = (("background", 3), ("sigma", 1))

    @property
    def tri_floats(self) -> int:
        return len(self.TRI_FIELDS)

    @property
    def tail_floats(self) -> int:
        return sum(n for _, n in self.TAIL)

    def stride(self, n_tris: int) -> int:
        """Floats per image (the Frame's scene_stride)."""
        return n_tris * self.tri_floats + self.tail_floats

    def tail_offset(self, part: str) -> int:
        """Where ``part`` starts after the triangles (floats)."""
        at = 0
        for name, n in self.TAIL:
            if name == part:
                return at
            at += n
        raise KeyError(f"the scene record has no part {part!r} (parts: {', '.join(n for n, _ in self.TAIL)})")

    def at(self, part: str, n_tris: int) -> int:
        """Float offset of ``part`` within one image's record."""
        return n_tris * self.tri_floats + self.tail_offset(part)

    def pack(self, tris, background, sigma) -> np.ndarray:
        """(B, stride) float32 records from triangles (B, T, 10), backgrounds (B, 3), sigmas (B,)."""
        tris = np.asarray(tris)
        B, T = tris.shape[:2]
        out = np.empty((B, self.stride(T)), dtype=np.float32)
        out[:, : T * self.tri_floats] = tris.reshape(B, T * self.tri_floats)
        parts = {"background": background, "sigma": sigma}
        for name, n in self.TAIL:
            at = self.at(name, T)
            out[:, at:at + n] = np.asarray(parts[name], dtype=np.float32).reshape(B, n)
        return out

    def unpack(self, records, n_tris: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(triangles (B, T, 10), backgrounds (B, 3), sigmas (B,)) of (B, stride) records."""
        rec = np.asarray(records).reshape(-1, self.stride(n_tris))
        B, T = rec.shape[0], n_tris
        bg, sig = (self.at(p, T) for p in ("background", "sigma"))
        return rec[:, : T * self.tri_floats].reshape(B, T, self.tri_floats), rec[:, bg:bg + 3], rec[:, sig]

    def wgsl(self) -> str:
        lines = [
            "// The scene record (generated by render/gpu/layouts.py SceneRecord): image b's starts at",
            f"// b * frame.scene_stride: frame.n_tris triangles of TRI_FLOATS floats ({', '.join(self.TRI_FIELDS)}),",
            "// then " + ", ".join(f"{name} ({n})" for name, n in self.TAIL) + "; record_* give their indices.",
            f"const TRI_FLOATS: u32 = {self.tri_floats}u;",
            f"const RECORD_TAIL: u32 = {self.tail_floats}u;",
            "",
            "fn record_tri(b: u32, i: u32, frame: Frame) -> u32 {",
            "    return b * frame.scene_stride + i * TRI_FLOATS;",
            "}",
        ]
        for name, _ in self.TAIL:
            lines += ["", f"fn record_{name}(b: u32, frame: Frame) -> u32 {{",
                      f"    return b * frame.scene_stride + frame.n_tris * TRI_FLOATS + {self.tail_offset(name)}u;", "}"]
        return "\n".join(lines) + "\n"


SCENE = SceneRecord()

FRAME = Struct("Frame", [
    ("width", "u32"),
    ("height", "u32"),
    ("n_tris", "u32"),
    ("batch", "u32"),
    ("tiles_x", "u32"),
    ("tiles_y", "u32"),
    ("n_tiles", "u32"),
    ("scene_stride", "u32", "floats per image in the scene buffer: SCENE.stride(n_tris)"),
    ("mask_words", "u32", "u32 words of the per-tile membership bitmask: ceil(n_tris / 32)"),
    ("loss_kind", "u32", "0 = mse, 1 = l1"),
    ("inv_values", "f32", "1 / (W H 3): losses are means over pixels and channels"),
    ("stop_t", "f32", "front-to-back walks stop once transmittance falls below this"),
    ("cull_k", "f32", "a triangle farther than cull_k * sigma_px from a tile is skipped"),
    ("recompute_below", "f32", "backward: un-composite by division only while 1 - alpha >= this"),
    ("ring_len", "u32", "entries per image in the loss ring (1 outside the fitter)"),
    ("with_loss", "u32", "forward also evaluates the loss (dL/dC and per-tile partials)"),
    ("n_seg", "u32", "backward: a tile's list is split into up to n_seg segments of seg_len"),
    ("seg_len", "u32", "entries, counted from the top, each its own workgroup"),
    ("removal_costs", "u32", "backward: 1 = each triangle's removal cost (slot 0) instead of its gradient"),
    ("tile_spread", "u32", "where SPREAD_CELLS, workgroup w takes tile w x tile_spread mod n_tiles (shaders.spread_stride)"),
    ("super_spread", "u32", "... and super-tile w x super_spread mod the super-tiles (two-pass binning's coarse pass)"),
], "uniform")

STATE = Struct("State", [  # device-side loop state (the fitter advances it; one-shot calls leave iter at 0)
    ("iter", "u32"),
    ("sigma", "f32", "no kernel reads it: sigma travels in each image's scene record"),
    ("lr_scale", "f32"),
], "storage")

SCHEDULE = Struct("Schedule", [  # render/fitloop.py Schedule (its pack() gives these by name)
    ("sigma_start", "f32", "fraction of the shorter side"),
    ("sigma_end", "f32"),
    ("sigma_iters", "f32", "geometric anneal from start to end over this many iterations"),
    ("lr_decay_iters", "f32", "learning-rate scale: cosine from lr_start down to lr_final over these"),
    ("lr_final", "f32"),
    ("iter_offset", "f32", "the sigma anneal starts at this iteration"),
    ("lr_offset", "f32", "... and the learning-rate cosine at this one"),
    ("lr_start", "f32"),
], "uniform")

OPTIM = Struct("Optim", [  # Adam's constants (adam.wgsl), from render/fitloop.py FitSettings
    ("lr_vertex", "f32"),
    ("lr_colour", "f32"),
    ("lr_alpha", "f32"),
    ("lr_background", "f32"),
    ("beta1", "f32"),
    ("beta2", "f32"),
    ("eps", "f32"),
    ("small_px", "f32", "FitSettings.small_triangle_px: smaller triangles' vertices step in proportion (0: off)"),
], "uniform")

PLACE = Struct("Place", [  # placement on the device (events.wgsl, render/gpu/events.py)
    ("width", "u32"),
    ("height", "u32"),
    ("tiles_x", "u32", "16 x 16 px tiles of the error sums"),
    ("tiles_y", "u32"),
    ("weighted", "u32", "1: each pixel's error times its weight (the weights buffer)"),
    ("n_new", "u32", "new triangles in new_in / new_out (placed_rows)"),
    ("alpha_raw", "f32", "the new triangles' opacity as a logit (placed_rows)"),
], "uniform")

#: what every kernel is given ahead of common.wgsl (render/gpu/shaders.py)
KERNEL_STRUCTS = (FRAME, STATE, SCHEDULE, OPTIM, PLACE)


def kernel_layouts() -> str:
    """The generated WGSL every trifit kernel starts with: the shared structs and the scene record."""
    return "\n".join([s.wgsl() for s in KERNEL_STRUCTS] + [SCENE.wgsl()])
