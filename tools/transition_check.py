"""Where render/shots.py starts shots in synthetic clips made from photographs: steady pans and
zooms (which should start none) and dissolves between two photographs, the second panning (which
should start one where the dissolve ends). Prints each clip's shot starts; no fitting, CPU only.

  .venv/bin/python tools/transition_check.py --photos .untuned            # the photographs not tuned on
  .venv/bin/python tools/transition_check.py --photos .untuned --size 96 --frames 60
  .venv/bin/python tools/transition_check.py --photos .untuned --first-pans    # both shots of a dissolve panning
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from trifit.imageio import as_target
from trifit.shots import TransitionWatch, find_cuts, frame_change, frame_content, measured


def _load(path: Path, width: int) -> Image.Image:
    im = Image.open(path).convert("RGB")
    return im.resize((width, max(1, round(width * im.height / im.width))), Image.Resampling.LANCZOS)


def pan(path: Path, n: int, w: int, h: int, speed: float) -> list[np.ndarray]:
    """A horizontal pan across the photograph at ``speed`` px a frame."""
    big = _load(path, int(w + speed * n) + 2)
    big = big if big.height >= h else big.resize((big.width, h))
    return [np.asarray(big.transform((w, h), Image.Transform.AFFINE, (1, 0, speed * k, 0, 1, 0),
                                     Image.Resampling.BICUBIC), np.float64) for k in range(n)]


def zoom(path: Path, n: int, w: int, h: int, rate: float) -> list[np.ndarray]:
    """A zoom into the photograph's centre, the scale growing by ``rate`` a frame."""
    im = _load(path, w).resize((w, h))
    out = []
    for k in range(n):
        s = 1.0 / (1 + rate * k)
        out.append(np.asarray(im.transform((w, h), Image.Transform.AFFINE,
                                           (s, 0, w / 2 * (1 - s), 0, s, h / 2 * (1 - s)), Image.Resampling.BICUBIC),
                              np.float64))
    return out


def dissolve(a: list, b: list, start: int, length: int) -> list[np.ndarray]:
    ramp = np.clip((np.arange(len(a)) - start) / length, 0.0, 1.0)
    return [x * (1 - r) + y * r for x, y, r in zip(a, b, ramp)]


def starts(frames, size: int, rng) -> list[int]:
    """The shot starts of ``frames`` (float 0-255, with 2/255 noise added) by render/shots.py's rules."""
    targets = [as_target(np.clip(f + rng.normal(0, 2.0, f.shape) + 0.5, 0, 255).astype(np.uint8), size) for f in frames]
    watch = TransitionWatch()
    for m in measured(targets):
        watch.push(m.thumb, m.content)
    return find_cuts([frame_change(a, b) for a, b in zip(targets, targets[1:])],
                     [frame_content(t) for t in targets], watch.finish())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--photos", required=True, help="a folder of photographs (PNG or JPEG)")
    p.add_argument("--size", type=int, default=176)
    p.add_argument("--frames", type=int, default=48)
    p.add_argument("--first-pans", action="store_true",
                   help="a dissolve's first photograph pans too (1.5 px a frame; the second the other way in every "
                        "other pair), not still")
    a = p.parse_args(argv)
    photos = sorted(q for q in Path(a.photos).iterdir() if q.suffix.lower() in (".png", ".jpg", ".jpeg"))
    if len(photos) < 2:
        print(f"{a.photos}: two photographs at least", file=sys.stderr)
        return 2
    w, h, n, rng = a.size, round(a.size * 3 / 4), a.frames, np.random.default_rng(0)
    false_starts, found, near, dissolves = 0, 0, 0, 0
    for q in photos:
        for name, frames in ((f"pan 2 px {q.stem}", pan(q, n, w, h, 2.0)), (f"pan 4 px {q.stem}", pan(q, n, w, h, 4.0)),
                             (f"zoom {q.stem}", zoom(q, n, w, h, 0.02))):
            got = starts(frames, a.size, rng)
            false_starts += bool(got)
            print(f"{name:40s} {got}")
    for i, q in enumerate(photos):
        r = photos[(i + 3) % len(photos)]
        first = pan(q, n, w, h, 1.5) if a.first_pans else [np.asarray(_load(q, w).resize((w, h)), np.float64)] * n
        second = pan(r, n, w, h, -1.5 if a.first_pans and i % 2 else 1.5)
        for length in (8, 16):
            start = n // 3
            got = starts(dissolve(first, second, start, length), a.size, rng)
            dissolves += 1
            found += any(start + length - 1 <= k <= start + length for k in got)
            near += any(start + length - 4 <= k <= start + length + 4 for k in got)
            print(f"{f'dissolve {length} {q.stem} > {r.stem}':40s} {got} (ends at {start + length})")
    print(f"# motion clips with a shot start: {false_starts} of {3 * len(photos)}; "
          f"dissolves with one where they end (or a frame before): {found} of {dissolves}, "
          f"within 4 frames of it: {near}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
