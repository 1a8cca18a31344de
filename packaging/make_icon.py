"""Draw trifit's icon (resources/trifit.png): translucent triangles on a rounded dark tile.

Deterministic; run from the repository root: ``python packaging/make_icon.py [OUT.png] [SIZE]``.
Drawn at 4x and reduced with a box filter, so the edges are anti-aliased.
"""

from __future__ import annotations

import sys
from pathlib import Path

from PIL import Image, ImageDraw

# (vertices in [0, 1], rgb, opacity): back to front, the last on top
TRIANGLES = [
    (((0.10, 0.80), (0.50, 0.12), (0.90, 0.80)), (0x2b, 0x8c, 0xbe), 0.85),
    (((0.18, 0.30), (0.78, 0.22), (0.44, 0.88)), (0xf4, 0xa2, 0x3c), 0.70),
    (((0.30, 0.62), (0.86, 0.46), (0.70, 0.92)), (0xe0, 0x3e, 0x5a), 0.65),
    (((0.12, 0.52), (0.40, 0.18), (0.58, 0.60)), (0x7b, 0xd3, 0x89), 0.55),
]


def draw_icon(size: int = 256) -> Image.Image:
    s = size * 4
    img = Image.new("RGBA", (s, s), (0, 0, 0, 0))
    tile = Image.new("RGBA", (s, s), (0, 0, 0, 0))
    ImageDraw.Draw(tile).rounded_rectangle((0, 0, s - 1, s - 1), radius=s // 6, fill=(0x1d, 0x21, 0x2b, 255))
    img = Image.alpha_composite(img, tile)
    inset = 0.08 * s
    span = s - 2 * inset
    for verts, rgb, a in TRIANGLES:
        layer = Image.new("RGBA", (s, s), (0, 0, 0, 0))
        pts = [(inset + x * span, inset + y * span) for x, y in verts]
        ImageDraw.Draw(layer).polygon(pts, fill=rgb + (round(255 * a),))
        img = Image.alpha_composite(img, layer)
    # keep the triangles inside the rounded tile
    mask = tile.getchannel("A")
    img.putalpha(Image.composite(img.getchannel("A"), Image.new("L", (s, s), 0), mask))
    return img.resize((size, size), Image.Resampling.BOX)


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path("resources/trifit.png")
    size = int(argv[1]) if len(argv) > 1 else 256
    draw_icon(size).save(out, optimize=True)
    print(f"{out}: {size}x{size}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
