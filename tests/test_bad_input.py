"""Bad input is refused cleanly (issue #7): images through ``load_image`` and ``trifit fit``,
scene files through ``Scene.load`` and ``trifit render``.

Refused means: an ImageError / SceneError in the library; in the command line exit status 2,
exactly one line on stderr naming what is wrong, no traceback, and no output file (nor a stray
temporary file) in the output folder. Every test file is made here, in tmp_path, and is tiny
unless its size is the point.

The command line runs in separate processes. Starting ~40 interpreters would cost more than this
whole file may (a busy 2-core machine), so most cases are forked from one driver process that
has imported trifit once: each case is still its own process with its own stderr (fd 2) and exit
status, as ``python -m trifit.cli`` would be; a few cases also run as a genuine
``python -m trifit.cli`` to keep the driver honest.
"""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from trifit import ImageError, Scene, SceneError, imageio, load_image, scene as scene_mod

ROOT = Path(__file__).resolve().parents[1]
FIT = ["--tris", "3", "--size", "16", "--iters", "2", "--backend", "reference", "--quiet"]


# ====================================================================== image makers
def _noise(h: int, w: int, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).uniform(0, 1, (h, w, 3)) * 255).astype(np.uint8)


def _encode(im: Image.Image, fmt: str, **kw) -> bytes:
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    return b.getvalue()


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_header_bomb(w: int = 30000, h: int = 30000) -> bytes:
    """A ~70-byte PNG whose IHDR declares w x h 1-bit grey pixels (a valid CRC, bogus data)."""
    ihdr = struct.pack(">IIBBBBB", w, h, 1, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr)
            + _png_chunk(b"IDAT", zlib.compress(b"\0" * 64)) + _png_chunk(b"IEND", b""))


def png_deflate_bomb(side: int = 30000) -> bytes:
    """A *valid* 1-bit side x side PNG, all black: ~110 kB on disk, 900 MB once decoded by Pillow
    (one byte per pixel in mode "1")."""
    row = b"\0" * (1 + (side + 7) // 8)  # filter byte + packed bits
    z = zlib.compressobj(9)
    block = row * 1000
    idat = b"".join(z.compress(block) for _ in range(side // 1000)) + z.compress(row * (side % 1000)) + z.flush()
    ihdr = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", idat) + _png_chunk(b"IEND", b"")


def jpeg_sof_bomb(w: int = 65000, h: int = 65000) -> bytes:
    """A tiny JPEG whose SOF0 frame header is patched to declare w x h pixels."""
    data = bytearray(_encode(Image.new("RGB", (8, 8), (10, 20, 30)), "JPEG"))
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = struct.pack(">HH", h, w)
    return bytes(data)


def _tiff(entries: list[tuple[int, int, int]], pixels: bytes) -> bytes:
    """A little-endian single-strip TIFF from (tag, type, value) entries (value fits 4 bytes).
    The strip offset (tag 273) is filled in."""
    n = len(entries)
    ifd_off = 8
    data_off = ifd_off + 2 + 12 * n + 4
    out = bytearray(b"II*\0" + struct.pack("<I", ifd_off) + struct.pack("<H", n))
    for tag, typ, value in sorted(entries):
        value = data_off if tag == 273 else value
        packed = struct.pack("<H", value) + b"\0\0" if typ == 3 else struct.pack("<I", value)
        out += struct.pack("<HHI", tag, typ, 1) + packed
    out += struct.pack("<I", 0) + pixels
    return bytes(out)


def tiff_many_samples() -> bytes:
    """SamplesPerPixel = 100000: Pillow logs an ERROR record ("More samples per pixel than can be
    decoded"), then refuses the file; the record used to be a second stderr line in the CLI."""
    return _tiff([(256, 4, 4), (257, 4, 4), (258, 3, 8), (259, 3, 1), (262, 3, 1), (273, 4, 0),
                  (277, 4, 100000), (278, 4, 4), (279, 4, 16)], bytes(range(16)))


def tiff_rational_strip_offset() -> bytes:
    """Found by fuzzing: a 32-bit TIFF whose StripOffsets entry has type RATIONAL; Pillow raises
    TypeError ('IFDRational' object cannot be interpreted as an integer) in load()."""
    im = Image.fromarray(_noise(12, 17)).convert("L").convert("I")
    data = bytearray(_encode(im, "TIFF"))
    ifd = struct.unpack("<I", data[4:8])[0]
    for k in range(struct.unpack("<H", data[ifd:ifd + 2])[0]):
        e = ifd + 2 + 12 * k
        if struct.unpack("<H", data[e:e + 2])[0] == 273:
            data[e + 2:e + 4] = struct.pack("<H", 5)
    return bytes(data)


def tiff_bad_deflate() -> bytes:
    """A deflate-compressed TIFF with scrambled strip data: libtiff prints "ZIPDecode: Decoding
    error ..." straight to file descriptor 2 (which used to be a second stderr line)."""
    data = bytearray(_encode(Image.fromarray(_noise(16, 16)), "TIFF", compression="tiff_deflate"))
    ifd = struct.unpack("<I", data[4:8])[0]
    tags = {}
    for k in range(struct.unpack("<H", data[ifd:ifd + 2])[0]):
        tag, _, _, value = struct.unpack("<HHII", data[ifd + 2 + 12 * k:ifd + 14 + 12 * k])
        tags[tag] = value
    offset, count = tags[273], tags[279]
    for j in range(offset + 2, offset + count - 4, 3):
        data[j] ^= 0x55
    return bytes(data)


def _truncated(fmt: str) -> bytes:
    data = _encode(Image.fromarray(_noise(64, 64)), fmt)
    return data[: len(data) // 2]


BAD_IMAGES = {  # name -> (bytes, words expected in the one-line message)
    "truncated.png": (lambda: _truncated("PNG"), ["cannot decode"]),
    "truncated.jpg": (lambda: _truncated("JPEG"), ["cannot decode", "truncated"]),
    "empty.png": (lambda: b"", ["empty file"]),
    "text.png": (lambda: b"this is not a png, just text\n", ["not an image"]),
    "bomb-header.png": (png_header_bomb, ["too large", "120 MP"]),
    "bomb-deflate.png": (png_deflate_bomb, ["too large"]),
    "bomb-sof.jpg": (jpeg_sof_bomb, ["too large"]),
    "over-cap.png": (lambda: png_header_bomb(11000, 11000), ["11000x11000", "120 MP cap"]),
    "samples.tif": (tiff_many_samples, ["not an image"]),
    "rational.tif": (tiff_rational_strip_offset, ["cannot decode"]),
    "bad-deflate.tif": (tiff_bad_deflate, ["cannot decode"]),
}


@pytest.fixture(scope="module")
def bad_images(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bad-images")
    out = {}
    for name, (make, _) in BAD_IMAGES.items():
        out[name] = folder / name
        out[name].write_bytes(make())
    return out


def _reset_peak() -> None:
    """Reset this process's peak-RSS mark (Linux >= 4.0); elsewhere the peak stays as it is."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _peak_mb() -> float:
    """Peak RSS in MB: VmHWM (which clear_refs resets), else ru_maxrss (Linux: kB). ru_maxrss
    alone would not do in a child process: Linux carries it over from the parent across exec."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ====================================================================== images: the library
@pytest.mark.parametrize("name", list(BAD_IMAGES))
def test_bad_image_refused_by_loader(bad_images, name):
    _reset_peak()
    rss0, t0 = _peak_mb(), time.perf_counter()
    with pytest.raises(ImageError) as e:
        load_image(bad_images[name], 16)
    msg = str(e.value)
    assert "\n" not in msg and str(bad_images[name]) in msg
    for w in BAD_IMAGES[name][1]:
        assert w.lower() in msg.lower(), msg
    # bombs are refused from the header: no decode (1-bit 30000^2 would be 900 MB in Pillow)
    assert time.perf_counter() - t0 < 5
    assert _peak_mb() - rss0 < 100


def test_bomb_files_are_small_on_disk(bad_images):
    assert bad_images["bomb-header.png"].stat().st_size < 200
    assert bad_images["bomb-deflate.png"].stat().st_size < 200_000
    assert bad_images["bomb-sof.jpg"].stat().st_size < 2000


def test_truncated_image_with_size_none(bad_images):
    with pytest.raises(ImageError, match="cannot decode"):
        load_image(bad_images["truncated.png"])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX only")
def test_paths_that_are_not_image_files(tmp_path):
    with pytest.raises(ImageError, match="no such file"):
        load_image(tmp_path / "missing.png")
    with pytest.raises(ImageError, match="folder"):
        load_image(tmp_path)
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    t0 = time.perf_counter()
    with pytest.raises(ImageError, match="not a regular file"):  # refused without blocking on it
        load_image(fifo)
    assert time.perf_counter() - t0 < 2
    with pytest.raises(ImageError, match="cannot read"):
        load_image(str(tmp_path / "nul\0byte.png"))


def test_unreadable_file(tmp_path, monkeypatch):
    # chmod 0 does not stop root (CI runs as root), so the refusal is simulated where the OS
    # would raise it: opening the file
    p = tmp_path / "secret.png"
    Image.new("RGB", (2, 2)).save(p)

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(p))

    monkeypatch.setattr(imageio.Image, "open", denied)
    with pytest.raises(ImageError, match="cannot read|ermission"):
        load_image(p)


@pytest.mark.parametrize("size", [0, -1, imageio.MAX_WORKING_SIZE + 1, 2.5, "abc", True, None])
def test_working_size_checked(tmp_path, size):
    p = tmp_path / "a.png"
    Image.new("RGB", (3, 2), (255, 0, 0)).save(p)
    if size is None:
        assert load_image(p, size).shape == (2, 3, 3)
        return
    with pytest.raises(ImageError, match="working size"):
        load_image(p, size)


# ---------------------------------------------------------------------- odd but valid images
def _save(tmp_path, name, im: Image.Image, **kw) -> Path:
    p = tmp_path / name
    im.save(p, **kw)
    return p


def _check_array(a: np.ndarray, shape) -> None:
    assert a.dtype == np.float32 and a.shape == shape
    assert np.all(np.isfinite(a)) and a.min() >= 0 and a.max() <= 1


def test_one_pixel(tmp_path):
    p = _save(tmp_path, "one.png", Image.new("RGB", (1, 1), (255, 0, 51)))
    a = load_image(p)
    _check_array(a, (1, 1, 3))
    np.testing.assert_allclose(a[0, 0], [1, 0, 0.2], atol=1e-6)
    b = load_image(p, 16)  # upscaled to the working size
    _check_array(b, (16, 16, 3))
    np.testing.assert_allclose(b, np.broadcast_to([1, 0, 0.2], b.shape), atol=1 / 255)


def test_grey_L(tmp_path):
    p = _save(tmp_path, "g.png", Image.fromarray(np.array([[0, 128, 255]], np.uint8), "L"))
    a = load_image(p)
    _check_array(a, (1, 3, 3))
    np.testing.assert_allclose(a[0, :, 0], [0, 128 / 255, 1], atol=1e-6)
    assert np.array_equal(a[..., 0], a[..., 1]) and np.array_equal(a[..., 0], a[..., 2])


def test_grey_alpha_LA_over_white(tmp_path):
    arr = np.array([[[0, 255], [0, 0], [100, 128]]], np.uint8)  # opaque black, transparent, half
    a = load_image(_save(tmp_path, "la.png", Image.fromarray(arr, "LA")))
    _check_array(a, (1, 3, 3))
    np.testing.assert_allclose(a[0, 0], 0, atol=1e-6)
    np.testing.assert_allclose(a[0, 1], 1, atol=1e-6)  # fully transparent -> white
    np.testing.assert_allclose(a[0, 2], (100 * 128 + 255 * 127) / 255 / 255, atol=2 / 255)


def test_palette_without_and_with_transparency(tmp_path):
    im = Image.new("P", (3, 1))
    im.putpalette([255, 0, 0, 0, 255, 0, 0, 0, 255] + [0] * 759)
    im.putdata([0, 1, 2])
    a = load_image(_save(tmp_path, "p.png", im))
    np.testing.assert_allclose(a[0], np.eye(3), atol=1e-6)
    b = load_image(_save(tmp_path, "pt.png", im, transparency=1))  # green is the transparent index
    np.testing.assert_allclose(b[0], [[1, 0, 0], [1, 1, 1], [0, 0, 1]], atol=1e-6)
    c = load_image(_save(tmp_path, "pt.gif", im, transparency=1))
    np.testing.assert_allclose(c[0], [[1, 0, 0], [1, 1, 1], [0, 0, 1]], atol=1e-6)


def test_cmyk_jpeg(tmp_path):
    p = _save(tmp_path, "c.jpg", Image.new("CMYK", (16, 8), (0, 255, 0, 0)), quality=95)  # magenta
    assert Image.open(p).mode == "CMYK"
    a = load_image(p, 8)
    _check_array(a, (4, 8, 3))
    np.testing.assert_allclose(a.mean(axis=(0, 1)), [1, 0, 1], atol=0.03)


def test_16bit_grey_png(tmp_path):
    p = _save(tmp_path, "g16.png", Image.fromarray(np.array([[0, 65535, 32768, 200]], np.uint16)))
    assert Image.open(p).mode == "I;16"
    a = load_image(p)
    _check_array(a, (1, 4, 3))
    np.testing.assert_allclose(a[0, :, 0], [0, 1, 128 / 255, 1 / 255], atol=1e-6)


def test_dark_16bit_png_stays_dark(tmp_path):
    """Regression: 16-bit data whose maximum is <= 255 was read as 8-bit (200/65535 -> 200/255)."""
    p = _save(tmp_path, "dark16.png", Image.fromarray(np.array([[0, 100, 200]], np.uint16)))
    assert load_image(p).max() < 0.01


def test_32bit_int_tiff(tmp_path):
    small = _save(tmp_path, "i8.tif", Image.fromarray(np.array([[-5, 0, 128, 255]], np.int32)))
    assert Image.open(small).mode == "I"
    a = load_image(small)  # max <= 255: taken as 8-bit, negatives clipped
    np.testing.assert_allclose(a[0, :, 1], [0, 0, 128 / 255, 1], atol=1e-6)
    big = _save(tmp_path, "i16.tif", Image.fromarray(np.array([[0, 65535, 70000, -1]], np.int32)))
    b = load_image(big)  # max > 255: taken as 16-bit, clipped
    np.testing.assert_allclose(b[0, :, 2], [0, 1, 1, 0], atol=1e-6)


def test_float_tiff(tmp_path):
    unit = _save(tmp_path, "f1.tif", Image.fromarray(np.array([[0.0, 0.5, 1.0, np.nan]], np.float32)))
    assert Image.open(unit).mode == "F"
    a = load_image(unit)  # max <= 1: [0, 1] data; NaN -> 0
    _check_array(a, (1, 4, 3))
    np.testing.assert_allclose(a[0, :, 0], [0, 127 / 255, 1, 0], atol=1e-6)
    wide = _save(tmp_path, "f255.tif", Image.fromarray(np.array([[0.0, 127.9, 300.0, -7.0]], np.float32)))
    b = load_image(wide)  # max > 1: [0, 255] data, clipped
    np.testing.assert_allclose(b[0, :, 0], [0, 127 / 255, 1, 0], atol=1e-6)


def test_rgba_composited_over_white(tmp_path):
    arr = np.zeros((2, 2, 4), np.uint8)
    arr[0, 0] = (255, 0, 0, 255)  # opaque red
    arr[0, 1] = (0, 0, 0, 0)  # fully transparent black -> white
    arr[1, 0] = (0, 0, 0, 128)  # half-transparent black -> mid grey
    arr[1, 1] = (0, 0, 255, 0)  # transparent blue -> white
    a = load_image(_save(tmp_path, "rgba.png", Image.fromarray(arr, "RGBA")))
    _check_array(a, (2, 2, 3))
    np.testing.assert_allclose(a[0, 0], [1, 0, 0], atol=1e-6)
    np.testing.assert_allclose(a[0, 1], [1, 1, 1], atol=1e-6)
    np.testing.assert_allclose(a[1, 1], [1, 1, 1], atol=1e-6)
    np.testing.assert_allclose(a[1, 0], 127 / 255, atol=1.5 / 255)


def _exif_jpeg(tmp_path, name, orientation) -> Path:
    """40 wide x 20 tall as stored, a red 8x8 marker in the stored top-left corner."""
    arr = np.full((20, 40, 3), 40, np.uint8)
    arr[:8, :8] = (255, 0, 0)
    exif = Image.Exif()
    exif[0x0112] = orientation
    return _save(tmp_path, name, Image.fromarray(arr), quality=95, exif=exif)


def test_exif_orientation_6_is_applied(tmp_path):
    a = load_image(_exif_jpeg(tmp_path, "rot.jpg", 6))
    # orientation 6: the stored picture is shown turned 90 degrees clockwise
    _check_array(a, (40, 20, 3))  # height and width swap
    red = (a[..., 0] > 0.8) & (a[..., 1] < 0.2)
    ys, xs = np.nonzero(red)
    assert ys.max() < 8 and xs.min() >= 12  # the top-left marker is now top-right
    b = load_image(tmp_path / "rot.jpg", 16)  # also through JPEG draft decoding
    _check_array(b, (16, 8, 3))
    assert b[1, 6, 0] > 0.7 and b[1, 6, 1] < 0.3 and b[14, 1, 0] < 0.3


def broken_exif_jpeg(entry_type: int) -> bytes:
    """A JPEG with EXIF orientation 6 whose IFD entry type is patched (2: ASCII, 12: DOUBLE at a
    bogus offset, which makes Pillow warn "Truncated File Read")."""
    exif = Image.Exif()
    exif[0x0112] = 6
    data = bytearray(_encode(Image.fromarray(np.full((20, 40, 3), 40, np.uint8)), "JPEG", exif=exif))
    i = data.index(b"\x01\x12\x00\x03")  # Pillow writes big-endian EXIF: tag 0x0112, type SHORT
    data[i + 3] = entry_type
    return bytes(data)


@pytest.mark.parametrize("entry_type", [2, 12])
def test_broken_exif_orientation_ignored(tmp_path, recwarn, entry_type):
    p = tmp_path / "bad-exif.jpg"
    p.write_bytes(broken_exif_jpeg(entry_type))
    a = load_image(p)
    _check_array(a, (20, 40, 3))  # not rotated, and not refused
    assert len(recwarn) == 0, [str(w.message) for w in recwarn]  # Pillow's warnings are not shown


def test_tiny_file_declaring_a_tall_image_is_bounded(tmp_path):
    """Found by fuzzing: a few hundred bytes of TIFF declaring 17 x 400000 32-bit pixels. Within
    the pixel cap, so it loads, but the 32-bit conversion works a block of rows at a time (it
    used to make several full-size float64 copies: 2 GB and 15 s for 17 x 4.5 M)."""
    data = _tiff([(256, 4, 17), (257, 4, 400_000), (258, 3, 32), (259, 3, 1), (262, 3, 1),
                  (273, 4, 0), (278, 4, 12), (279, 4, 17 * 12 * 4), (339, 3, 2)], bytes(17 * 12 * 4))
    p = tmp_path / "tall.tif"
    p.write_bytes(data)
    assert Image.open(p).mode == "I" and p.stat().st_size < 1000
    t0 = time.perf_counter()
    a = load_image(p, 16)
    _check_array(a, (16, 1, 3))
    assert time.perf_counter() - t0 < 10


_RSS_PROBE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from test_bad_input import _peak_mb, _reset_peak
from trifit.imageio import load_image
load_image(sys.argv[2], 16)  # warm up: imports, first decode
out = []
for path in sys.argv[3:]:
    _reset_peak()
    before = _peak_mb()
    a = load_image(path, 64)
    out.append({"path": path, "delta_mb": _peak_mb() - before, "shape": a.shape})
print(json.dumps(out))
"""


def test_huge_images_memory(tmp_path):
    """A 6000 x 4000 JPEG (72 MB of RGB once decoded in full) costs ~2 MB: JPEG draft mode.
    PNG has no reduced decode in Pillow: a 3000 x 2000 PNG (18 MB of RGB) is decoded in full,
    but with no full-size copies beyond the decoded image (~1.3x; it used to be ~3.8x)."""
    big = Image.new("RGB", (6000, 4000), (30, 90, 200))
    big.paste((250, 250, 20), (0, 0, 3000, 2000))
    big.save(tmp_path / "big.jpg", quality=80)
    big.resize((3000, 2000), Image.Resampling.NEAREST).save(tmp_path / "big.png", compress_level=1)
    del big
    Image.new("RGB", (8, 8), (1, 2, 3)).save(tmp_path / "warm.jpg")
    files = [str(tmp_path / n) for n in ("warm.jpg", "big.jpg", "big.png")]
    p = subprocess.run([sys.executable, "-c", _RSS_PROBE, str(Path(__file__).parent), *files],
                       capture_output=True, text=True, timeout=120, cwd=ROOT, env=_env())
    assert p.returncode == 0, p.stderr
    jpeg, png = json.loads(p.stdout)
    assert jpeg["shape"] == [43, 64, 3] and png["shape"] == [43, 64, 3]
    assert jpeg["delta_mb"] < 6000 * 4000 * 3 / 2**20 / 4, jpeg  # measured: ~1.5 MB of 69 MB
    assert png["delta_mb"] < 2 * 3000 * 2000 * 3 / 2**20, png  # measured: ~23 MB for 17 MB of RGB


# ====================================================================== scene files
def _doc(**over) -> dict:
    d = {"format": "trifit-scene", "version": 1, "width": 20, "height": 10, "sigma": 0.01,
         "background": [0.1, 0.2, 0.3], "triangles": [[0.1, 0.2, 0.5, 0.9, 0.8, 0.1, 0.9, 0.3, 0.2, 0.7]]}
    d.update(over)
    return d


def _text(**over) -> bytes:
    return json.dumps(_doc(**over)).encode()


def _raw(replace: str, by: str) -> bytes:
    """The valid document's JSON with one piece of text replaced (NaN, 1e999, ... as written)."""
    text = json.dumps(_doc())
    assert replace in text
    return text.replace(replace, by, 1).encode()


_TRI = "[0.1, 0.2, 0.5, 0.9, 0.8, 0.1, 0.9, 0.3, 0.2, 0.7]"
_missing = _doc()
del _missing["sigma"], _missing["background"]

BAD_SCENES = {  # name -> (file bytes, words expected in the message)
    "broken.json": (b'{"format": "trifit-scene", "version": 1,', ["not valid JSON"]),
    "format.json": (_text(format="svg"), ["'format'", "trifit-scene", "svg"]),
    "version.json": (_text(version=2), ["unsupported 'version' 2"]),
    "version-str.json": (_text(version="1"), ["'version'", "integer"]),
    "missing.json": (json.dumps(_missing).encode(), ["missing required key", "sigma", "background"]),
    "list.json": (b"[1, 2, 3]", ["JSON object", "list"]),
    "width-str.json": (_text(width="20"), ["'width'", "positive integer"]),
    "width-float.json": (_text(width=20.5), ["'width'", "positive integer"]),
    "width-bool.json": (_text(width=True), ["'width'", "positive integer"]),
    "width-zero.json": (_text(width=0), ["'width'", "positive integer"]),
    "height-neg.json": (_text(height=-3), ["'height'", "positive integer"]),
    "width-huge.json": (_text(width=10**30), ["'width'", "cap"]),
    "sigma-zero.json": (_text(sigma=0), ["'sigma'", "> 0"]),
    "sigma-neg.json": (_text(sigma=-0.5), ["'sigma'", "> 0"]),
    "sigma-str.json": (_text(sigma="0.01"), ["'sigma'", "number"]),
    "background-short.json": (_text(background=[0.1, 0.2]), ["'background'", "3 numbers"]),
    "background-str.json": (_text(background="white"), ["'background'", "3 numbers"]),
    "background-range.json": (_text(background=[0.1, 0.2, 1.5]), ["'background[2]'", "[0, 1]"]),
    "triangles-dict.json": (_text(triangles={}), ["'triangles'", "list"]),
    "triangle-short.json": (_text(triangles=[[0.1] * 9]), ["'triangles[0]'", "10 numbers"]),
    "triangle-str.json": (_text(triangles=[[0.1] * 10, [0.1] * 6 + ["x", 0.5, 0.5, 0.5]]),
                          ["'triangles[1][6]'", "number"]),
    "alpha-range.json": (_text(triangles=[[0.1] * 6 + [0.5, 0.5, 0.5, 1.2]]), ["'triangles[0][9]'", "(a)", "[0, 1]"]),
    "red-negative.json": (_text(triangles=[[0.1] * 6 + [-0.1, 0.5, 0.5, 0.5]]), ["'triangles[0][6]'", "(r)"]),
    "nan.json": (_raw("0.7]]", "NaN]]"), ["finite", "NaN"]),
    "infinity.json": (_raw('"sigma": 0.01', '"sigma": Infinity'), ["finite", "Infinity"]),
    "minus-infinity.json": (_raw("[0.1, 0.2, 0.3]", "[0.1, -Infinity, 0.3]"), ["finite", "-Infinity"]),
    "1e999-sigma.json": (_raw('"sigma": 0.01', '"sigma": 1e999'), ["'sigma'", "finite", "inf"]),
    "1e999-vertex.json": (_raw(_TRI, _TRI.replace("0.9, 0.8", "1e999, 0.8")), ["'triangles[0][3]'", "finite"]),
    "1e999-background.json": (_raw("[0.1, 0.2, 0.3]", "[0.1, -1e999, 0.3]"), ["'background[1]'", "finite"]),
    "1e999-meta.json": (_raw('"width"', '"meta": {"loss": [1, 1e999]}, "width"'), ["finite", "meta", "inf"]),
    "bigint-vertex.json": (_raw(_TRI, _TRI.replace("0.1, 0.2", "1" + "0" * 400 + ", 0.2")),
                           ["'triangles[0][0]'", "finite"]),
    "too-many.json": (_text(triangles=[[0.5] * 10] * (scene_mod.MAX_TRIANGLES + 1)),
                      ["'triangles'", str(scene_mod.MAX_TRIANGLES + 1), f"cap of {scene_mod.MAX_TRIANGLES}"]),
    "deep.json": (b"[" * 100_000 + b"]" * 100_000, ["not valid JSON", "recursion"]),
    "deep-meta.json": (_raw('"width"', '"meta": ' + "[" * 50_000 + "]" * 50_000 + ', "width"'),
                       ["not valid JSON", "recursion"]),
    "latin1.json": ('{"format": "trifit-scène"}'.encode("latin-1"), ["not valid JSON", "utf-8"]),
    "empty.json": (b"", ["empty file"]),
    "blank.json": (b"  \n\t ", ["empty file"]),
}


@pytest.fixture(scope="module")
def bad_scenes(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bad-scenes")
    out = {}
    for name, (data, _) in BAD_SCENES.items():
        out[name] = folder / name
        out[name].write_bytes(data)
    (folder / "a-folder.json").mkdir()
    out["a-folder.json"] = folder / "a-folder.json"
    return out


SCENE_WORDS = {**{k: v[1] for k, v in BAD_SCENES.items()}, "a-folder.json": ["cannot read", "directory"]}


@pytest.mark.parametrize("name", list(SCENE_WORDS))
def test_bad_scene_refused_by_load(bad_scenes, name):
    with pytest.raises(SceneError) as e:
        Scene.load(bad_scenes[name])
    msg = str(e.value)
    assert "\n" not in msg and len(msg) < 400 and str(bad_scenes[name]) in msg
    for w in SCENE_WORDS[name]:
        assert w.lower() in msg.lower(), msg


def test_scene_from_a_device_is_bounded(monkeypatch):
    """/dev/zero reports size 0: the read is capped, not endless."""
    monkeypatch.setattr(scene_mod, "MAX_FILE_BYTES", 1 << 16)
    with pytest.raises(SceneError, match="larger than a scene file"):
        Scene.load("/dev/zero")


def test_valid_scene_with_meta_loads(tmp_path):
    p = tmp_path / "ok.json"
    p.write_bytes(_raw('"width"', '"meta": {"seed": 3, "loss": [1e300, -0.0, 12345678901234567890]}, "width"'))
    s = Scene.load(p)
    assert s.meta["seed"] == 3 and s.n_triangles == 1


# ====================================================================== the command line
def _env() -> dict:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)  # (kept: trifit may come from it)
    env = dict(os.environ, PYTHONPATH=path, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.pop("PYTHONWARNINGS", None)
    return env


_DRIVER = r"""
import json, os, signal, sys, time, traceback
import tqdm  # noqa: F401  (imported once here, so that each forked case starts fast)
import trifit, trifit.cli, trifit.engine, trifit.export, trifit.fitter, trifit.imageio, trifit.scene  # noqa
cases, capture = json.load(sys.stdin), sys.argv[1]
results = {}
for name, argv in cases:
    out_p, err_p = os.path.join(capture, name + ".out"), os.path.join(capture, name + ".err")
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the case: like "python -m trifit.cli ARGV", with fds 1 and 2 in files
        code = 1
        try:
            os.dup2(os.open(out_p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
            os.dup2(os.open(err_p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
            try:
                code = trifit.cli.main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:
                traceback.print_exc()
                code = 1
        finally:
            try:
                sys.stdout.flush(); sys.stderr.flush()
            finally:
                os._exit(code)
    deadline = time.monotonic() + 120
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL); os.waitpid(pid, 0); code = "timeout"
            break
        time.sleep(0.005)
    with open(out_p, errors="replace") as f1, open(err_p, errors="replace") as f2:
        results[name] = [code, f1.read(), f2.read()]
print(json.dumps(results))
"""


def _run_cli_cases(cases: list[tuple[str, list[str]]], capture: Path) -> dict[str, tuple]:
    p = subprocess.run([sys.executable, "-c", _DRIVER, str(capture)], input=json.dumps(cases),
                       capture_output=True, text=True, timeout=600, cwd=ROOT, env=_env())
    assert p.returncode == 0, p.stderr[-3000:]
    return {k: tuple(v) for k, v in json.loads(p.stdout.splitlines()[-1]).items()}


def _run_cli(args: list[str]) -> tuple:
    """A genuine ``python -m trifit.cli``."""
    p = subprocess.run([sys.executable, "-m", "trifit.cli", *args], capture_output=True, text=True,
                       timeout=300, cwd=ROOT, env=_env())
    return p.returncode, p.stdout, p.stderr


def _good_images(folder: Path) -> dict[str, tuple[Path, tuple[int, int]]]:
    """Odd but valid images -> (path, expected scene frame at --size 16)."""
    folder.mkdir()
    pal = Image.new("P", (6, 3))
    pal.putpalette([255, 0, 0, 0, 255, 0, 0, 0, 255] + [0] * 759)
    pal.putdata([0, 1, 2] * 6)
    la = np.dstack([np.full((5, 10), 90, np.uint8), np.tile(np.array([0, 255], np.uint8), (5, 5))])
    made = {
        "one.png": (Image.new("RGB", (1, 1), (200, 10, 10)), {}, (16, 16)),
        "grey-alpha.png": (Image.fromarray(la, "LA"), {}, (16, 8)),
        "palette-transparent.png": (pal, {"transparency": 1}, (16, 8)),
        "cmyk.jpg": (Image.new("CMYK", (20, 10), (0, 255, 0, 0)), {}, (16, 8)),
        "grey16.png": (Image.fromarray((np.arange(40, dtype=np.uint16) * 1600).reshape(5, 8)), {}, (16, 10)),
        "float.tif": (Image.fromarray(np.linspace(0, 1, 32, dtype=np.float32).reshape(4, 8)), {}, (16, 8)),
        "rgba.webp": (Image.fromarray(np.dstack([_noise(6, 12), np.full((6, 12), 100, np.uint8)]), "RGBA"),
                      {"lossless": True}, (16, 8)),
    }
    out = {}
    for name, (im, kw, frame) in made.items():
        im.save(folder / name, **kw)
        out[name] = (folder / name, frame)
    rotated = np.zeros((10, 20, 3), np.uint8)
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(rotated).save(folder / "rotated.jpg", exif=exif)
    out["rotated.jpg"] = (folder / "rotated.jpg", (8, 16))  # stored 20x10, shown 10x20
    (folder / "bad-exif.jpg").write_bytes(broken_exif_jpeg(12))  # Pillow warns while reading it
    out["bad-exif.jpg"] = (folder / "bad-exif.jpg", (16, 8))
    return out


@pytest.fixture(scope="module")
def cli(tmp_path_factory, bad_images, bad_scenes):
    """Run every command-line case once (forked from one driver); results by case name."""
    if not hasattr(os, "fork") or not hasattr(os, "mkfifo"):
        pytest.skip("the command-line driver forks (POSIX only)")
    root = tmp_path_factory.mktemp("cli")
    capture = root / "capture"
    capture.mkdir()
    cases, outdirs, expect = [], {}, {}

    def case(name, argv_of_out, words=None, out_name="out.json"):
        outdirs[name] = root / ("out-" + name)
        outdirs[name].mkdir()
        cases.append((name, argv_of_out(str(outdirs[name] / out_name))))
        expect[name] = words

    for name, path in bad_images.items():
        case("img:" + name, lambda o, p=path: ["fit", str(p), *FIT, "-o", o], BAD_IMAGES[name][1])
    missing = root / "missing.png"
    case("img:missing", lambda o: ["fit", str(missing), *FIT, "-o", o], ["no such file"])
    case("img:folder", lambda o: ["fit", str(root), *FIT, "-o", o], ["is a folder"])
    fifo = root / "fifo.png"
    os.mkfifo(fifo)
    case("img:fifo", lambda o: ["fit", str(fifo), *FIT, "-o", o], ["not a regular file"])
    for name, path in bad_scenes.items():
        case("scene:" + name, lambda o, p=path: ["render", str(p), "--backend", "reference", "-o", o],
             SCENE_WORDS[name], out_name="out.png")
    for name, (path, frame) in _good_images(root / "good").items():
        case("good:" + name, lambda o, p=path: ["fit", str(p), *FIT, "-o", o])
        expect["good:" + name] = frame
    results = _run_cli_cases(cases, capture)
    return results, outdirs, expect


def _assert_refused(result, words, outdir: Path | None):
    code, out, err = result
    assert code == 2, (code, err)
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("trifit: error: "), err
    for w in words:
        assert w.lower() in lines[0].lower(), lines[0]
    if outdir is not None:
        assert list(outdir.iterdir()) == [], "an output or temporary file was left behind"


_IMG_CASES = [*BAD_IMAGES, "missing", "folder", "fifo"]


@pytest.mark.parametrize("name", _IMG_CASES)
def test_cli_fit_refuses_bad_image(cli, name):
    results, outdirs, expect = cli
    _assert_refused(results["img:" + name], expect["img:" + name], outdirs["img:" + name])


@pytest.mark.parametrize("name", list(SCENE_WORDS))
def test_cli_render_refuses_bad_scene(cli, name):
    results, outdirs, expect = cli
    _assert_refused(results["scene:" + name], expect["scene:" + name], outdirs["scene:" + name])


@pytest.mark.parametrize("name", ["one.png", "grey-alpha.png", "palette-transparent.png", "cmyk.jpg",
                                  "grey16.png", "float.tif", "rgba.webp", "rotated.jpg",
                                  "bad-exif.jpg"])
def test_cli_fits_odd_valid_images(cli, name):
    results, outdirs, expect = cli
    code, out, err = results["good:" + name]
    assert code == 0, err
    assert err.strip() == "", err  # --quiet: nothing on stderr (no Pillow warnings either)
    s = Scene.load(outdirs["good:" + name] / "out.json")
    assert (s.width, s.height) == expect["good:" + name] and s.n_triangles == 3
    assert [f.name for f in outdirs["good:" + name].iterdir()] == ["out.json"]


def test_cli_genuine_subprocess(tmp_path, bad_images, bad_scenes):
    """Three cases as real ``python -m trifit.cli`` runs (the driver above forks instead)."""
    for n, (args, words) in enumerate([
        (["fit", str(bad_images["bomb-deflate.png"]), *FIT], ["too large"]),
        (["fit", str(bad_images["samples.tif"]), *FIT], ["not an image"]),
        (["render", str(bad_scenes["1e999-meta.json"]), "--backend", "reference"], ["finite", "meta"]),
    ]):
        outdir = tmp_path / f"out{n}"
        outdir.mkdir()
        out = outdir / ("o.png" if args[0] == "render" else "o.json")
        t0 = time.perf_counter()
        _assert_refused(_run_cli([*args, "-o", str(out)]), words, outdir)
        assert time.perf_counter() - t0 < 30
