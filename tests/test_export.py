"""Exports: tiled renders equal untiled ones, PNG at any size, SVG against an independent
renderer (Qt's QtSvg), every raster format, atomic writes, and the fit animation."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from PIL import Image

# Qt (pytest-qt's qapp, the SVG rasteriser, report plots) needs a display: offscreen without one
if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from trifit import Scene, reference as R
from trifit.cli import main
from trifit.errors import AdapterError, TrifitError
from trifit.export import (
    SUFFIXES,
    TILE_MAX_PIXELS,
    TILE_MAX_WORKSPACE_BYTES,
    AnimationRecorder,
    plan_tiles,
    render_large,
    save_png,
    save_render,
    save_svg,
    svg_text,
    tile_scene,
)


def psnr(a, b) -> float:
    mse = float(np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(1 / mse)


def scene(n=14, w=48, h=32, seed=2, sigma_px=1.0) -> Scene:
    return Scene.random(n, w, h, seed=seed, sigma_px=sigma_px)


# ---------------------------------------------------------------------- tiling
def test_tile_scene_is_the_full_render_cropped_in_float64():
    """The remapped scene of a tile renders exactly the full render's pixels (reference oracle)."""
    s = scene(10, 30, 20, seed=7)
    W, H = 75, 50  # not the frame size, not the frame's multiple
    full = R.render(s, W, H)
    for ox, oy, w, h in [(0, 0, 25, 10), (40, 30, 35, 20), (10, 5, 16, 40), (60, 44, 30, 30)]:
        tile = R.render(tile_scene(s, W, H, ox, oy, w, h), w, h)
        crop = full[oy:oy + h, ox:ox + w]
        np.testing.assert_allclose(tile[: crop.shape[0], : crop.shape[1]], crop, atol=1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize("max_tile", [(40, 24), 32, (96, 10)])
def test_tiled_gpu_render_equals_untiled(gpu_engine, max_tile):
    s = scene(40, 96, 64, seed=3)
    full = gpu_engine.render(s, 96, 64)
    tiled = render_large(s, 96, 64, gpu_engine, max_tile=max_tile)
    assert tiled.dtype == np.float32 and tiled.shape == (64, 96, 3)
    assert np.abs(tiled - full).max() <= 1e-5


def test_tiled_reference_render_equals_oracle(ref_engine):
    s = scene(6, 20, 14, seed=4)
    tiled = render_large(s, 30, 21, ref_engine, max_tile=(16, 8))
    np.testing.assert_allclose(tiled, R.render(s, 30, 21), atol=1e-6)


@pytest.mark.gpu
def test_plan_tiles_splits_what_one_buffer_cannot_hold(gpu_engine, gpu_ctx):
    from trifit.gpu.workspace import Shape, check_limits

    assert plan_tiles(176, 132, 150, gpu_engine) == (176, 132)
    tw, th = plan_tiles(8192, 8192, 150, gpu_engine)
    assert (tw, th) != (8192, 8192) and tw >= 16 and th >= 16
    check_limits(gpu_ctx, Shape(1, tw, th, 150))  # the chosen tile fits the adapter
    whole = Shape(1, 8192, 8192, 150)  # while the whole frame does not fit, or is over the budget
    try:
        check_limits(gpu_ctx, whole)
    except AdapterError:
        return
    assert sum(whole.buffer_sizes().values()) > TILE_MAX_WORKSPACE_BYTES or 8192 * 8192 > TILE_MAX_PIXELS


# ---------------------------------------------------------------------- PNG at any size
@pytest.mark.gpu
def test_png_at_4x_box_averaged_matches_1x(tmp_path, gpu_engine):
    s = scene(20, 48, 32, seed=5, sigma_px=1.5)
    path = save_png(s, tmp_path / "big.png", 192, 128, engine=gpu_engine)
    big = np.asarray(Image.open(path).convert("RGB"), dtype=np.float64) / 255
    assert big.shape == (128, 192, 3)
    small = big.reshape(32, 4, 48, 4, 3).mean(axis=(1, 3))
    assert psnr(small, gpu_engine.render(s, 48, 32)) >= 40


@pytest.mark.gpu
def test_save_png_tiles_large_sizes(tmp_path, gpu_engine, monkeypatch):
    """Force tiny tiles: the tiled uint8 export equals the single-pass render's quantisation."""
    import trifit.export as ex

    s = scene(12, 40, 30, seed=9)
    monkeypatch.setattr(ex, "TILE_MAX_PIXELS", 24 * 24)
    assert ex.plan_tiles(100, 75, s.n_triangles, gpu_engine)[0] < 100
    save_png(s, tmp_path / "t.png", 100, 75, engine=gpu_engine)
    got = np.asarray(Image.open(tmp_path / "t.png"), dtype=np.int16)
    want = ex.to_uint8(gpu_engine.render(s, 100, 75)).astype(np.int16)
    assert np.abs(got - want).max() <= 1


# ---------------------------------------------------------------------- formats and dispatch
@pytest.mark.gpu
@pytest.mark.parametrize("suffix", SUFFIXES)
def test_save_render_every_format(tmp_path, gpu_engine, suffix):
    s = scene(8, 24, 16, seed=1)
    out = save_render(s, tmp_path / f"o{suffix}", 36, 24, engine=gpu_engine)
    assert out.exists() and out.stat().st_size > 0
    if suffix == ".npy":
        img = np.load(out)
        assert img.dtype == np.float32 and img.shape == (24, 36, 3)
        assert np.abs(img - R.render(s, 36, 24)).max() < 1e-4
    elif suffix == ".svg":
        root = ET.parse(out).getroot()
        assert root.get("width") == "36" and root.get("height") == "24"
    else:
        with Image.open(out) as im:
            assert im.size == (36, 24)
            img = np.asarray(im.convert("RGB"), dtype=np.float64) / 255
        assert psnr(img, R.render(s, 36, 24)) > (30 if suffix in (".jpg", ".jpeg", ".webp") else 45)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".part")]


def test_unknown_suffix_is_refused_before_writing(tmp_path):
    with pytest.raises(TrifitError, match="unknown output format"):
        save_render(scene(), tmp_path / "o.xyz")
    assert os.listdir(tmp_path) == []


def test_failed_export_leaves_no_file(tmp_path, ref_engine, monkeypatch):
    """A writer that dies half-way leaves neither the target nor a temporary file."""
    def boom(self, fp, *a, **k):
        fp.write(b"half a png")
        raise OSError("disk full")

    monkeypatch.setattr(Image.Image, "save", boom)
    with pytest.raises(OSError, match="disk full"):
        save_png(scene(3, 8, 8), tmp_path / "o.png", engine=ref_engine)
    assert os.listdir(tmp_path) == []


@pytest.mark.gpu
def test_cli_render_dispatch(tmp_path, gpu_ctx):
    s = scene(6, 32, 24)
    s.save(tmp_path / "s.json")
    for name, size in (("o.svg", "64x48"), ("o.webp", "40x30"), ("o.tif", "16x12")):
        assert main(["render", str(tmp_path / "s.json"), "--size", size, "-o", str(tmp_path / name)]) == 0
        assert (tmp_path / name).stat().st_size > 0


# ---------------------------------------------------------------------- SVG
def test_svg_structure_and_painting_order():
    s = scene(5, 40, 20, seed=11)
    root = ET.fromstring(svg_text(s))
    ns = {"s": "http://www.w3.org/2000/svg"}
    assert root.get("viewBox") == "0 0 40 20"
    rect = root.find("s:rect", ns)
    bg = tuple(int(round(v * 255)) for v in s.background)
    assert rect.get("fill") == "#{:02x}{:02x}{:02x}".format(*bg)
    polys = root.findall(".//s:polygon", ns)
    assert len(polys) == 5
    for poly, t in zip(polys, s.triangles, strict=True):  # document order = painting order
        pts = [tuple(map(float, p.split(","))) for p in poly.get("points").split()]
        np.testing.assert_allclose(pts, [(t[0] * 40, t[1] * 20), (t[2] * 40, t[3] * 20), (t[4] * 40, t[5] * 20)],
                                   atol=1e-3)
        assert abs(float(poly.get("fill-opacity")) - t[9]) < 1e-3


def _rasterise_svg(path, width, height) -> np.ndarray:
    """Qt's SVG renderer (independent of trifit), antialiased, on a QImage. Callers take
    pytest-qt's ``qapp`` fixture: one QApplication for the whole suite."""
    from PySide6.QtCore import QRectF
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(path))
    assert renderer.isValid()
    img = QImage(width, height, QImage.Format.Format_RGB888)
    img.fill(0)
    painter = QPainter(img)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter, QRectF(0, 0, width, height))
    painter.end()
    raw = np.frombuffer(img.constBits(), np.uint8, count=img.sizeInBytes()).reshape(height, img.bytesPerLine())
    return raw[:, : width * 3].reshape(height, width, 3).astype(np.float64) / 255


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_svg_rasterised_independently_matches_reference(tmp_path, qapp, seed):
    s = scene(12, 64, 48, seed=seed, sigma_px=0.4)  # a sharp sigma: SVG edges are hard
    save_svg(s, tmp_path / "s.svg")
    img = _rasterise_svg(tmp_path / "s.svg", 64, 48)
    assert psnr(img, R.render(s, 64, 48)) >= 28


def test_svg_scales_with_the_document_size(tmp_path, qapp):
    s = scene(8, 32, 24, seed=3, sigma_px=0.4)
    save_svg(s, tmp_path / "s.svg", 64, 48)
    img = _rasterise_svg(tmp_path / "s.svg", 64, 48)
    assert psnr(img, R.render(s, 64, 48)) >= 28


# ---------------------------------------------------------------------- animation
def test_animation_memory_is_bounded(tmp_path):
    rec = AnimationRecorder(tmp_path / "a.gif", every=1, max_frames=10, max_side=32)
    rng = np.random.default_rng(0)
    for it in range(500):
        if rec.due(it):
            rec.add_frame(rng.uniform(0, 1, (60, 90, 3)), it)
    assert 2 <= len(rec.frames) <= 11
    assert rec.every >= 32  # doubled each time the store filled
    assert all(f.shape == (21, 32, 3) and f.dtype == np.uint8 for f in rec.frames)
    assert rec.nbytes <= 11 * 32 * 32 * 3
    its = rec.iterations
    assert its[0] == 0 and its == sorted(its)
    gaps = np.diff(its)
    assert gaps.max() <= 2 * rec.every
    rec.save()
    with Image.open(tmp_path / "a.gif") as im:
        assert im.n_frames == len(rec.frames) and im.size == (32, 21) and im.info.get("loop") == 0


def test_animation_formats(tmp_path):
    for name in ("a.webp", "a.png"):
        rec = AnimationRecorder(tmp_path / name, every=1, max_side=16)
        for it in range(3):
            rec.add_frame(np.full((8, 16, 3), it / 3), it)
        rec.save()
        with Image.open(tmp_path / name) as im:
            assert getattr(im, "n_frames", 1) == 3
    with pytest.raises(TrifitError):
        AnimationRecorder(tmp_path / "a.mp4")
    with pytest.raises(TrifitError, match="no frames"):
        AnimationRecorder(tmp_path / "b.gif").save()


def _polygons_rasterised(svg: str, width: int, height: int, supersample: int = 4) -> np.ndarray:
    """An independent renderer of trifit's SVG: Pillow polygons, composited in document order at
    ``supersample`` x the size, then box-filtered down (float (H, W, 3) in [0, 1])."""
    import xml.etree.ElementTree as ET

    from PIL import ImageDraw

    root = ET.fromstring(svg)
    ns = {"s": "http://www.w3.org/2000/svg"}
    vx, vy, vw, vh = (float(v) for v in root.get("viewBox").split())
    k = supersample
    sx, sy = width * k / vw, height * k / vh
    hexrgb = lambda h: np.array([int(h[i:i + 2], 16) for i in (1, 3, 5)], float) / 255  # noqa: E731
    canvas = np.empty((height * k, width * k, 3))
    canvas[:] = hexrgb(root.find("s:rect", ns).get("fill"))
    for poly in root.iter(f"{{{ns['s']}}}polygon"):
        pts = [tuple(float(v) for v in p.split(",")) for p in poly.get("points").split()]
        mask = Image.new("L", (width * k, height * k), 0)
        ImageDraw.Draw(mask).polygon([((x - vx) * sx, (y - vy) * sy) for x, y in pts], fill=255)
        a = np.asarray(mask, float)[..., None] / 255 * float(poly.get("fill-opacity"))
        canvas = canvas * (1 - a) + hexrgb(poly.get("fill")) * a
    return canvas.reshape(height, k, width, k, 3).mean(axis=(1, 3))


@pytest.mark.gpu
@pytest.mark.parametrize("scale", [4, 8])
def test_crisp_picture_exports_agree_with_the_svg(gpu_engine, tmp_path, scale):
    # a scene as a fit leaves it: a soft sigma at its own 48x36 frame, which a picture at 4x or
    # 8x must not blow up into blur (--edges crisp, the default of `trifit render` and `fit -o`)
    from trifit.cli import main
    from trifit.export import svg_text

    s = Scene.random(25, 48, 36, seed=3, sigma_px=1.0)
    s.save(tmp_path / "s.json")
    W, H = 48 * scale, 36 * scale
    reference = _polygons_rasterised(svg_text(s, W, H), W, H)
    psnr = {}
    for edges in ("crisp", "fit"):
        out = tmp_path / f"{edges}.png"
        assert main(["render", str(tmp_path / "s.json"), "--scale", str(scale), "--edges", edges,
                     "--backend", "gpu", "-o", str(out)]) == 0
        img = np.asarray(Image.open(out), float) / 255
        assert img.shape == (H, W, 3)
        psnr[edges] = 10 * np.log10(1 / np.mean((img - reference) ** 2))
    assert psnr["crisp"] > 30.0, psnr                 # the picture is the vector file, rasterised
    assert psnr["crisp"] > psnr["fit"] + 3.0, psnr    # and far sharper than the fit's own edges


def test_picture_sizes_keep_the_aspect():
    from trifit.errors import TrifitError
    from trifit.export import picture_size

    assert picture_size((176, 132)) == (176, 132)
    assert picture_size((176, 132), scale=4) == (704, 528)
    assert picture_size((176, 132), width=1000) == (1000, 750)
    assert picture_size((176, 132), size=(800, 600)) == (800, 600)
    with pytest.raises(TrifitError, match="another aspect"):
        picture_size((176, 132), size=(800, 800))
    assert picture_size((176, 132), size=(800, 800), stretch=True) == (800, 800)
    with pytest.raises(TrifitError, match="one of"):
        picture_size((176, 132), scale=2, width=10)
