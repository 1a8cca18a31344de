"""Property-based fuzzing of the two readers of untrusted input (issue #7).

- ``Scene.from_json`` / ``Scene.from_dict`` / ``Scene.load``: random bytes, random text, and
  valid documents mutated by hypothesis (keys dropped or replaced, wrong types, NaN / inf /
  1e999 / huge integers, random nesting). The answer is always a SceneError, or a Scene that
  satisfies every rule of docs/MODEL.md and round-trips through save / load exactly.
- ``load_image``: random bytes, random bytes behind real PNG / JPEG / GIF / ... magic, and real
  small images with flipped, cut or spliced bytes. The answer is always an ImageError or a
  float32 (H, W, 3) array in [0, 1], never another exception.

Kept fast (a busy 2-core machine): ~150 examples per property, tiny inputs, and the image pixel
cap lowered to 4 MP so that a mutated header cannot make one example decode 100 MP (the cap
itself is tested in test_bad_input.py).
"""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st
from PIL import Image

from trifit import ImageError, Scene, SceneError, imageio, load_image, scene as scene_mod

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


# ====================================================================== scenes: strategies
scalars = (st.none() | st.booleans() | st.integers()
           | st.integers(min_value=10**300, max_value=10**400)  # beyond the float range
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=6))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=4), inner, max_size=4), max_leaves=10)
finite_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                           | st.text(max_size=6),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                           max_leaves=8)
unit = st.floats(min_value=0.0, max_value=1.0)
coord = st.floats(min_value=-1e6, max_value=1e6) | st.integers(-10, 10)
triangle = st.tuples(*[coord] * 6, *[unit] * 4).map(list)
valid_docs = st.fixed_dictionaries(
    {
        "format": st.just(scene_mod.FORMAT),
        "version": st.just(scene_mod.VERSION),
        "width": st.integers(1, scene_mod.MAX_FRAME_SIDE),
        "height": st.integers(1, scene_mod.MAX_FRAME_SIDE),
        "sigma": st.floats(min_value=1e-12, max_value=1e6, exclude_min=False) | st.integers(1, 5),
        "background": st.lists(unit | st.sampled_from([0, 1]), min_size=3, max_size=3),
        "triangles": st.lists(triangle, max_size=4),
    },
    optional={"meta": st.dictionaries(st.text(max_size=5), finite_json, max_size=3), "x-extra": finite_json},
)


@st.composite
def mutated_docs(draw):
    """A valid document, then 1-3 mutations; sometimes wrapped so it is no longer an object."""
    doc = draw(valid_docs)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["drop", "replace", "item", "cell", "add", "number", "rows"]))
        keys = sorted(doc)
        if op == "drop" and keys:
            del doc[draw(st.sampled_from(keys))]
        elif op == "replace" and keys:
            doc[draw(st.sampled_from(keys))] = draw(json_values)
        elif op == "item" and isinstance(doc.get("background"), list) and doc["background"]:
            doc["background"][draw(st.integers(0, len(doc["background"]) - 1))] = draw(json_values)
        elif op == "cell" and isinstance(doc.get("triangles"), list) and doc["triangles"]:
            row = doc["triangles"][draw(st.integers(0, len(doc["triangles"]) - 1))]
            if isinstance(row, list) and row:
                row[draw(st.integers(0, len(row) - 1))] = draw(
                    json_values | st.floats() | st.sampled_from([-0.0, 1.0000001, -1e-300, 1e308]))
        elif op == "add":
            doc[draw(st.text(max_size=8))] = draw(json_values)
        elif op == "number":
            key = draw(st.sampled_from(["width", "height", "sigma", "version"]))
            doc[key] = draw(st.integers() | st.floats() | st.integers(min_value=10**300, max_value=10**400)
                            | st.sampled_from([True, 0, -1, 1.0, 2.5, scene_mod.MAX_FRAME_SIDE + 1]))
        elif op == "rows" and isinstance(doc.get("triangles"), list):
            doc["triangles"].append(draw(st.lists(json_values, max_size=11)))
    if draw(st.integers(0, 9)) == 0:
        doc = draw(st.sampled_from([[doc], {"scene": doc}, json.dumps(doc, default=str)]))
    return doc


# ====================================================================== scenes: the rules, re-checked
def _walk(v):
    stack = [v]
    while stack:
        x = stack.pop()
        yield x
        if isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)


def assert_obeys_rules(s: Scene) -> None:
    for side in (s.width, s.height):
        assert type(side) is int and 1 <= side <= scene_mod.MAX_FRAME_SIDE
    assert isinstance(s.sigma, float) and math.isfinite(s.sigma) and s.sigma > 0
    assert s.background.dtype == np.float64 and s.background.shape == (3,)
    assert np.all(np.isfinite(s.background)) and np.all((s.background >= 0) & (s.background <= 1))
    t = s.triangles
    assert t.dtype == np.float64 and t.ndim == 2 and t.shape[1] == 10 and t.shape[0] <= scene_mod.MAX_TRIANGLES
    assert np.all(np.isfinite(t)) and np.all((t[:, 6:] >= 0) & (t[:, 6:] <= 1))
    assert not set(s.extra) & set(scene_mod.REQUIRED_KEYS)
    for x in _walk(s.extra):
        assert not (isinstance(x, float) and not math.isfinite(x)), s.extra


def assert_round_trip(s: Scene, path) -> None:
    s.save(path)
    t = Scene.load(path)
    assert (t.width, t.height) == (s.width, s.height) and t.sigma == s.sigma
    assert t.background.tobytes() == s.background.tobytes()  # bit-exact, -0.0 included
    assert t.triangles.shape == s.triangles.shape and t.triangles.tobytes() == s.triangles.tobytes()
    assert t.extra == s.extra
    assert t.to_json() == s.to_json()


def assert_matches_document(s: Scene, doc: dict) -> None:
    """Never half-loaded: a Scene holds exactly what the document said."""
    assert s.triangles.tobytes() == np.array(doc["triangles"], dtype=np.float64).reshape(-1, 10).tobytes()
    assert s.background.tobytes() == np.array(doc["background"], dtype=np.float64).tobytes()
    assert s.extra == {k: v for k, v in doc.items() if k not in scene_mod.REQUIRED_KEYS}


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


# ====================================================================== scenes: properties
@FUZZ
@given(data=st.binary(max_size=300) | st.text(max_size=300)
       | st.text(alphabet='{}[]",:0123456789.eE-+ aflnrstuIifNy\\', max_size=120)
       | st.binary(max_size=100).map(lambda b: b'{"format": "trifit-scene", "version": 1, ' + b))
def test_from_json_random_input(data, scratch):
    try:
        s = Scene.from_json(data)
    except SceneError as exc:
        assert "\n" not in str(exc)
        return
    assert_obeys_rules(s)


@FUZZ
@given(data=st.binary(max_size=200))
def test_load_random_file(data, scratch):
    p = scratch / "random.json"
    p.write_bytes(data)
    try:
        assert_obeys_rules(Scene.load(p))
    except SceneError as exc:
        assert "\n" not in str(exc) and str(p) in str(exc)


@settings(FUZZ, max_examples=100)
@given(doc=valid_docs)
def test_valid_documents_load_and_round_trip(doc, scratch):
    s = Scene.from_dict(doc)
    assert_obeys_rules(s)
    assert_matches_document(s, doc)
    assert_round_trip(s, scratch / "valid.json")
    assert_round_trip(Scene.from_json(json.dumps(doc)), scratch / "valid2.json")


@settings(FUZZ, max_examples=150)
@given(doc=mutated_docs())
def test_mutated_documents_from_dict(doc, scratch):
    try:
        s = Scene.from_dict(doc)
    except SceneError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 400
        return
    assert_obeys_rules(s)
    assert_matches_document(s, doc)
    assert_round_trip(s, scratch / "mutated.json")


@settings(FUZZ, max_examples=150)
@given(doc=mutated_docs(), overflow=st.booleans())
def test_mutated_documents_from_json(doc, overflow, scratch):
    text = json.dumps(doc, allow_nan=True)  # writes NaN / Infinity / -Infinity tokens
    if overflow:  # the same, spelled as numbers Python's json reads as +-inf
        text = text.replace("-Infinity", "-1e999").replace("Infinity", "1e999")
    try:
        s = Scene.from_json(text)
    except SceneError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 400
        return
    assert_obeys_rules(s)
    assert_round_trip(s, scratch / "mutated-json.json")


@settings(FUZZ, max_examples=60)
@given(n=st.integers(0, 40), w=st.integers(1, 300), h=st.integers(1, 300), seed=st.integers(0, 2**32 - 1))
def test_random_scenes_round_trip(n, w, h, seed, scratch):
    s = Scene.random(n, w, h, seed=seed)
    assert_obeys_rules(s)
    assert_round_trip(s, scratch / "random-scene.json")


# ====================================================================== images
@pytest.fixture
def small_cap(monkeypatch):
    monkeypatch.setattr(imageio, "MAX_PIXELS", 4_000_000)


def _encode(im: Image.Image, fmt: str, **kw) -> bytes:
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    return b.getvalue()


def _seed_images() -> list[bytes]:
    rng = np.random.default_rng(0)
    rgb = Image.fromarray((rng.uniform(0, 1, (9, 13, 3)) * 255).astype(np.uint8))
    rgba = Image.fromarray((rng.uniform(0, 1, (9, 13, 4)) * 255).astype(np.uint8), "RGBA")
    grey = rgb.convert("L")
    exif = Image.Exif()
    exif[0x0112] = 6
    out = [
        _encode(rgb, "PNG"), _encode(rgba, "PNG"), _encode(rgb.convert("P"), "PNG", transparency=3),
        _encode(grey.convert("LA"), "PNG"), _encode(Image.fromarray(np.asarray(grey, np.uint16) * 257), "PNG"),
        _encode(rgb, "JPEG", quality=90), _encode(rgb, "JPEG", exif=exif), _encode(rgb.convert("CMYK"), "JPEG"),
        _encode(rgb, "GIF"), _encode(rgb, "BMP"), _encode(rgb, "TIFF"), _encode(grey.convert("F"), "TIFF"),
        _encode(grey.convert("I"), "TIFF"), _encode(rgb, "TIFF", compression="tiff_deflate"),
        _encode(rgba, "WEBP", lossless=True), _encode(rgb, "PPM"), _encode(rgba, "TGA"), _encode(rgba, "ICO"),
        _encode(grey.convert("1"), "PNG"),
    ]
    return out


SEEDS = _seed_images()
MAGIC = [b"\x89PNG\r\n\x1a\n", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", b"\xff\xd8\xff\xe0", b"\xff\xd8\xff\xdb",
         b"GIF89a", b"GIF87a", b"BM", b"II*\0", b"MM\0*", b"RIFF\0\0\0\0WEBPVP8 ", b"P6\n", b"\0\0\1\0"]


@st.composite
def mutated_images(draw):
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "flip", "cut", "splice", "byte"]))
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        if op == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "byte":
            data[i] = draw(st.sampled_from([0, 1, 0x7F, 0x80, 0xFF, draw(st.integers(0, 255))]))
        elif op == "cut":
            del data[i:]
        else:
            data[i:i + draw(st.integers(0, 16))] = draw(st.binary(max_size=16))
    return bytes(data)


def assert_image_or_error(path, size) -> None:
    try:
        a = load_image(path, size)
    except ImageError as exc:
        assert "\n" not in str(exc)
        return
    assert isinstance(a, np.ndarray) and a.dtype == np.float32
    assert a.ndim == 3 and a.shape[2] == 3 and a.shape[0] >= 1 and a.shape[1] >= 1
    assert np.all(np.isfinite(a)) and a.min() >= 0 and a.max() <= 1
    if size is not None:
        assert max(a.shape[:2]) == size


sizes = st.sampled_from([None, 1, 7, 16])


def test_seed_images_all_load():
    for data in SEEDS:
        b = io.BytesIO(data)
        assert Image.open(b).size[0] > 0  # the seeds are real images


@FUZZ
@given(data=st.binary(min_size=1, max_size=2000), size=sizes)
def test_load_image_random_bytes(data, size, scratch, small_cap):
    p = scratch / "random.img"
    p.write_bytes(data)
    assert_image_or_error(p, size)


@FUZZ
@given(magic=st.sampled_from(MAGIC), tail=st.binary(max_size=600), size=sizes)
def test_load_image_magic_then_random_bytes(magic, tail, size, scratch, small_cap):
    p = scratch / "magic.img"
    p.write_bytes(magic + tail)
    assert_image_or_error(p, size)


@settings(FUZZ, max_examples=200)
@given(data=mutated_images(), size=sizes)
def test_load_image_mutated_real_images(data, size, scratch, small_cap):
    assume(data)
    p = scratch / "mutated.img"
    p.write_bytes(data)
    assert_image_or_error(p, size)
