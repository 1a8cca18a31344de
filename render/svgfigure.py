"""Text and layout for the report's SVG plots (render/svgplot.py): font metrics estimated from
the font size, labels that know their bounding boxes, a figure that collects shapes and labels
and writes them as ``<svg>`` text (XML-escaped); and the viridis colour map the report's error
image uses. numpy and the standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape as _escape

import numpy as np

FONT = "system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif"
TICK_SIZE = 11.0
LABEL_SIZE = 12.0
TITLE_SIZE = 13.0
AXIS_COLOUR = "#444"
GRID_COLOUR = "#e3e3e3"
TEXT_COLOUR = "#222"
PAD = 8.0

_NARROW = set("il.,:;!|'`ijtf()[]{} ")
_WIDE = set("mwMW@%")
SUPERSCRIPT = str.maketrans("-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079")


_CONTROL = dict.fromkeys(c for c in range(32) if c not in (9, 10, 13))  # not allowed in XML


def xml_text(text: str, quote: bool = True) -> str:
    """``text`` made safe for XML text and attribute values."""
    return _escape(str(text).translate(_CONTROL), quote=quote)


#: viridis (a CC0 colour map) sampled at 17 evenly spaced points; linear in between.
_VIRIDIS = np.array([
    (68, 1, 84), (72, 23, 105), (71, 44, 122), (66, 63, 133), (59, 81, 139), (51, 98, 141),
    (44, 113, 142), (38, 129, 142), (33, 144, 140), (31, 159, 136), (39, 173, 128), (61, 188, 115),
    (92, 200, 98), (129, 211, 76), (170, 220, 49), (213, 226, 25), (253, 231, 37)], dtype=np.float64)


def viridis(values: np.ndarray) -> np.ndarray:
    """uint8 RGB (shape ``values.shape + (3,)``) of ``values`` in [0, 1] (clipped) on viridis."""
    t = np.clip(np.nan_to_num(np.asarray(values, np.float64)), 0.0, 1.0) * (len(_VIRIDIS) - 1)
    i = np.minimum(t.astype(np.int64), len(_VIRIDIS) - 2)
    f = (t - i)[..., None]
    return (_VIRIDIS[i] * (1.0 - f) + _VIRIDIS[i + 1] * f + 0.5).astype(np.uint8)


# ---------------------------------------------------------------------- text geometry
def text_width(text: str, size: float) -> float:
    """A generous estimate of the advance width of ``text`` in a sans-serif font of ``size`` px."""
    w = 0.0
    for ch in text:
        if ch in _NARROW:
            w += 0.34
        elif ch in _WIDE:
            w += 0.92
        elif ch.isupper() or ch in "\u00d7\u2212":
            w += 0.72
        else:
            w += 0.6
    return w * size


def text_box(text: str, x: float, y: float, size: float, anchor: str = "start",
             rotate: float = 0.0) -> tuple[float, float, float, float]:
    """Bounding box ``(x0, y0, x1, y1)`` of a text drawn at baseline point ``(x, y)`` with
    ``text-anchor`` ``anchor``; ``rotate`` may be 0 or -90 (about the anchor point)."""
    w = text_width(text, size)
    start = {"start": 0.0, "middle": -w / 2, "end": -w}[anchor]
    asc, desc = 0.8 * size, 0.25 * size
    if rotate == 0:
        return (x + start, y - asc, x + start + w, y + desc)
    if rotate == -90:  # the text runs upwards; its top is to the left of the anchor
        return (x - asc, y - start - w, x + desc, y - start)
    raise ValueError(f"unsupported rotation {rotate}")


def fit_text(text: str, size: float, max_width: float) -> str:
    """``text``, shortened with an ellipsis if needed to fit ``max_width`` px."""
    if text_width(text, size) <= max_width:
        return text
    while text and text_width(text + "\u2026", size) > max_width:
        text = text[:-1]
    return text.rstrip() + "\u2026" if text else ""


def boxes_overlap(a, b, gap: float = 0.0) -> bool:
    """Whether boxes ``a`` and ``b`` come closer than ``gap`` on both axes."""
    return a[0] < b[2] + gap and b[0] < a[2] + gap and a[1] < b[3] + gap and b[1] < a[3] + gap


@dataclass
class Label:
    text: str
    x: float
    y: float
    size: float = TICK_SIZE
    anchor: str = "start"
    role: str = ""
    rotate: float = 0.0
    fill: str = TEXT_COLOUR
    bold: bool = False

    def box(self) -> tuple[float, float, float, float]:
        return text_box(self.text, self.x, self.y, self.size, self.anchor, self.rotate)

    def svg(self) -> str:
        attrs = [f'x="{num(self.x)}"', f'y="{num(self.y)}"', f'font-size="{num(self.size)}"']
        if self.anchor != "start":
            attrs.append(f'text-anchor="{self.anchor}"')
        if self.rotate:
            attrs.append(f'transform="rotate({num(self.rotate)} {num(self.x)} {num(self.y)})"')
        if self.fill != TEXT_COLOUR:
            attrs.append(f'fill="{xml_text(self.fill)}"')
        if self.bold:
            attrs.append('font-weight="600"')
        if self.role:
            attrs.append(f'class="{xml_text(self.role)}"')
        return f"<text {' '.join(attrs)}>{xml_text(self.text, quote=False)}</text>"


@dataclass
class Figure:
    """Shapes (SVG element strings) and labels of one plot, in pixel coordinates."""

    width: int
    height: int
    title: str = ""
    shapes: list[str] = field(default_factory=list)
    labels: list[Label] = field(default_factory=list)

    def add(self, shape: str) -> None:
        self.shapes.append(shape)

    def label(self, text: str, x: float, y: float, **kw) -> Label:
        lab = Label(str(text), float(x), float(y), **kw)
        self.labels.append(lab)
        return lab

    def svg(self, css_class: str = "plot") -> str:
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" class="{xml_text(css_class)}" width="{self.width}" '
                f'height="{self.height}" viewBox="0 0 {self.width} {self.height}" role="img" '
                f'aria-label="{xml_text(self.title)}" font-family="{xml_text(FONT)}" fill="{TEXT_COLOUR}">')
        body = [head]
        if self.title:
            body.append(f"<title>{xml_text(self.title, quote=False)}</title>")
        body.append(f'<rect width="{self.width}" height="{self.height}" fill="#fff"/>')
        body += self.shapes
        body += [lab.svg() for lab in self.labels]
        body.append("</svg>")
        return "\n".join(body)


def num(v: float) -> str:
    """A coordinate with at most one decimal and no trailing zeros."""
    s = f"{v:.1f}"
    s = s[:-2] if s.endswith(".0") else s
    return "0" if s == "-0" else s
