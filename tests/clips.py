"""Small clips the video tests make themselves (tests/test_video.py, tests/test_gui_video.py): a
still photograph (the bundled sample) with sensor-like noise and a red disc crossing it, written
with PyAV. Tests that need PyAV fail under CI=true when it is missing."""

from __future__ import annotations

import numpy as np
from conftest import import_or_fail
from PIL import Image


def av_or_fail():
    return import_or_fail("av", "video")


def moving_disc(n: int, w: int, h: int, seed: int = 0):
    """(frames uint8 (n, h, w, 3), mask of the still background (h, w)): the disc's path and a
    margin around it are not still."""
    from trifit.resources import sample_path

    photo = np.asarray(Image.open(sample_path("astronaut.png")).convert("RGB").resize((w, h), Image.Resampling.LANCZOS),
                       np.float64)
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w] + 0.5
    r, frames, moving = 0.14 * h, [], np.zeros((h, w), bool)
    for k in range(n):
        d = np.hypot(xx - (r + (w - 2 * r) * k / (n - 1)), yy - h / 2)
        a = np.clip(r - d + 0.5, 0, 1)[..., None]
        f = photo * (1 - a) + np.array([230.0, 40.0, 30.0]) * a + rng.normal(0, 2.0, (h, w, 3))
        frames.append(np.clip(f + 0.5, 0, 255).astype(np.uint8))
        moving |= d < r + 6
    return np.stack(frames), ~moving


def two_shots(cut: int, n: int, w: int, h: int, seed: int):
    """(frames uint8 (n, h, w, 3)): the disc clip's first ``cut`` frames (:func:`moving_disc` over
    ``n``), then ``n - cut`` frames of the other sample with noise of its own (``seed``): a cut at ``cut``."""
    from trifit.resources import sample_path

    cat = np.asarray(Image.open(sample_path("chelsea.png")).convert("RGB").resize((w, h), Image.Resampling.LANCZOS),
                     np.float64)
    rng = np.random.default_rng(seed)
    later = [np.clip(cat + rng.normal(0, 2.0, cat.shape) + 0.5, 0, 255).astype(np.uint8) for _ in range(n - cut)]
    return np.concatenate([moving_disc(n, w, h)[0][:cut], np.stack(later)])


def dissolve(start: int, length: int, n: int, w: int, h: int, seed: int):
    """(frames uint8 (n, h, w, 3)): the disc clip (:func:`moving_disc`) cross-dissolving into the
    other sample (:func:`two_shots`' later frames) over ``length`` frames from ``start``."""
    a = moving_disc(n, w, h)[0].astype(np.float64)
    b = two_shots(0, n, w, h, seed).astype(np.float64)
    ramp = np.clip((np.arange(n) - start) / length, 0.0, 1.0)[:, None, None, None]
    return np.clip(a * (1 - ramp) + b * ramp + 0.5, 0, 255).astype(np.uint8)


def fade_in(fade: int, n: int, w: int, h: int):
    """(frames uint8 (n, h, w, 3)): the disc clip (:func:`moving_disc`) faded in from black over its
    first ``fade`` frames (frame 0 black)."""
    frames = moving_disc(n, w, h)[0].astype(np.float64)
    ramp = np.clip(np.arange(n) / fade, 0.0, 1.0)[:, None, None, None]
    return np.clip(frames * ramp + 0.5, 0, 255).astype(np.uint8)


def write_video(av, path, frames, rate: int, audio: bool = True, options=None) -> None:
    """Lossless H.264 (the noise is kept) at ``rate`` frames/s, with an AAC tone when ``audio``."""
    h, w = frames.shape[1:3]
    with av.open(str(path), "w", options=options or {}) as c:
        v = c.add_stream("libx264", rate=rate)
        v.width, v.height, v.pix_fmt, v.options = w, h, "yuv444p", {"crf": "0"}
        a = c.add_stream("aac", rate=16000) if audio else None
        for k, f in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(f, format="rgb24")
            frame.pts = k
            c.mux(v.encode(frame))
        c.mux(v.encode(None))
        if a is not None:
            t = np.arange(16000 * len(frames) // rate) / 16000
            tone = (0.2 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)[None]
            for i in range(0, tone.shape[1], 1024):
                af = av.AudioFrame.from_ndarray(np.ascontiguousarray(tone[:, i:i + 1024]), format="fltp", layout="mono")
                af.sample_rate, af.pts = 16000, i
                c.mux(a.encode(af))
            c.mux(a.encode(None))


def read_video(av, path):
    """(frames uint8, rate, audio codec names)."""
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        frames = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(s)])
        return frames, s.average_rate, [a.codec_context.name for a in c.streams.audio]


def _boxes(data: bytes) -> list[tuple[str, int]]:
    """An MP4's top-level boxes (type, size)."""
    out, at = [], 0
    while at + 8 <= len(data):
        size = int.from_bytes(data[at:at + 4], "big")
        kind = data[at + 4:at + 8].decode("latin-1")
        if size == 1 and at + 16 <= len(data):
            size = int.from_bytes(data[at + 8:at + 16], "big")
        out.append((kind, size))
        if size < 8:
            break
        at += size
    return out


def _packets(av, path) -> dict[str, list[tuple]]:
    """Each stream's packets as (pts, dts, size, a hash of the bytes)."""
    import hashlib

    with av.open(str(path)) as c:
        got: dict[str, list[tuple]] = {}
        for p in c.demux():
            if p.size:
                got.setdefault(p.stream.type, []).append((p.pts, p.dts, p.size, hashlib.sha1(bytes(p)).hexdigest()[:8]))
        return got


def assert_same_video(av, got, want) -> None:
    """``got`` and ``want`` are the same bytes; if not, say where they part: top-level boxes, then
    each stream's first differing packet (the two files are kept beside the test's tmp files)."""
    a, b = got.read_bytes(), want.read_bytes()
    if a == b:
        return
    where = [f"{got.name}: {len(a)} B, {want.name}: {len(b)} B; boxes {_boxes(a)} vs {_boxes(b)}"]
    pa, pb = _packets(av, got), _packets(av, want)
    for kind in sorted(set(pa) | set(pb)):
        x, y = pa.get(kind, []), pb.get(kind, [])
        first = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), None)
        where.append(f"{kind}: {len(x)} vs {len(y)} packets; first difference at "
                     f"{first if first is not None else 'none in the common part'}"
                     + (f": {x[first]} vs {y[first]}" if first is not None else ""))
    raise AssertionError("the videos differ -- " + "; ".join(where))
