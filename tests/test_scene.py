"""Scene model and file format v1: round trips, validation naming rule and entry."""

import json

import numpy as np
import pytest

from trifit import Scene, SceneError


def _doc(**over):
    d = {"format": "trifit-scene", "version": 1, "width": 20, "height": 10, "sigma": 0.01,
         "background": [0.1, 0.2, 0.3], "triangles": [[0.1, 0.2, 0.5, 0.9, 0.8, 0.1, 0.9, 0.3, 0.2, 0.7]]}
    d.update(over)
    return d


def test_round_trip_is_exact_and_keeps_unknown_keys(tmp_path):
    s = Scene.random(7, 33, 21, seed=3)
    s.extra["meta"]["seed"] = 3
    s.extra["x-custom"] = {"a": [1, 2]}
    p = tmp_path / "s.json"
    s.save(p)
    t = Scene.load(p)
    assert t.width == 33 and t.height == 21 and t.sigma == s.sigma
    assert np.array_equal(t.triangles, s.triangles) and np.array_equal(t.background, s.background)
    assert t.extra["x-custom"] == {"a": [1, 2]} and t.extra["meta"]["seed"] == 3
    assert json.loads(p.read_text())["format"] == "trifit-scene"


def test_random_is_reproducible_and_valid():
    a, b = Scene.random(50, 64, 48, seed=1), Scene.random(50, 64, 48, seed=1)
    assert np.array_equal(a.triangles, b.triangles)
    Scene.from_dict(a.to_dict())  # passes validation
    assert not np.array_equal(a.triangles, Scene.random(50, 64, 48, seed=2).triangles)


@pytest.mark.parametrize("over, words", [
    ({"format": "svg"}, ["format"]),
    ({"version": 2}, ["version", "2"]),
    ({"version": "1"}, ["version"]),
    ({"width": 0}, ["width"]),
    ({"width": 2.5}, ["width"]),
    ({"height": -3}, ["height"]),
    ({"width": True}, ["width"]),
    ({"sigma": 0}, ["sigma"]),
    ({"sigma": "a"}, ["sigma"]),
    ({"background": [0.1, 0.2]}, ["background"]),
    ({"background": [0.1, 0.2, 1.5]}, ["background[2]"]),
    ({"triangles": {}}, ["triangles"]),
    ({"triangles": [[0.1] * 9]}, ["triangles[0]"]),
    ({"triangles": [[0.1] * 6 + [0.5, 0.5, 0.5, 1.2]]}, ["triangles[0][9]"]),
    ({"triangles": [[0.1] * 10, [0.1] * 6 + ["x", 0.5, 0.5, 0.5]]}, ["triangles[1][6]"]),
])
def test_validation_names_rule_and_entry(over, words):
    with pytest.raises(SceneError) as e:
        Scene.from_dict(_doc(**over))
    for w in words:
        assert w in str(e.value)


def test_missing_keys_named():
    d = _doc()
    del d["sigma"], d["triangles"]
    with pytest.raises(SceneError, match="sigma, triangles"):
        Scene.from_dict(d)


@pytest.mark.parametrize("text", ['{"format": NaN}', "[1, 2", "", "\xff\xfe", '{"sigma": Infinity}'])
def test_broken_json_refused(text):
    with pytest.raises(SceneError):
        Scene.from_json(text)


def test_nan_in_triangles_refused():
    with pytest.raises(SceneError, match="finite"):
        Scene.from_json(json.dumps(_doc()).replace("0.7]]", "NaN]]"))


def test_triangle_cap(monkeypatch):
    import trifit.scene as sc

    monkeypatch.setattr(sc, "MAX_TRIANGLES", 3)
    with pytest.raises(SceneError, match="cap"):
        Scene.from_dict(_doc(triangles=[[0.1] * 10] * 4))


def test_failed_save_leaves_old_file(tmp_path, monkeypatch):
    p = tmp_path / "s.json"
    Scene.random(2, 8, 8).save(p)
    before = p.read_bytes()
    s = Scene.random(3, 8, 8)
    s.triangles[0, 0] = np.nan  # json refuses NaN: the write fails mid-way
    with pytest.raises(ValueError):
        s.save(p)
    assert p.read_bytes() == before
    assert [f.name for f in tmp_path.iterdir()] == ["s.json"]


@pytest.mark.parametrize("failure, storage", [
    (OSError(28, "No space left on device"), True),
    (OSError("147456 requested and 16352 written"), True),  # numpy's short write
    (OSError(13, "Permission denied"), False),
    (OSError("encoder error -2"), False),  # a writer's own failure stays what it is
])
def test_a_full_disk_is_one_line_and_keeps_the_old_file(tmp_path, failure, storage):
    from trifit import TrifitError
    from trifit.fileutil import atomic_write

    p = tmp_path / "out.bin"
    p.write_bytes(b"old")

    def writer(f):
        f.write(b"partial")
        raise failure

    with pytest.raises(TrifitError if storage else OSError) as caught:
        atomic_write(p, writer)
    assert isinstance(caught.value, TrifitError) == storage
    if storage:
        assert str(caught.value).startswith(f"{p}: cannot write (") and "\n" not in str(caught.value)
    assert p.read_bytes() == b"old" and [f.name for f in tmp_path.iterdir()] == ["out.bin"]


def test_numpy_values_in_meta_are_written_as_the_numbers_they_hold(tmp_path):
    s = Scene.random(3, 32, 32, seed=0)
    s.meta.update(psnr=np.float32(24.5), iterations=np.int64(1200), losses=np.array([0.5, 0.25]))
    expected = {"psnr": 24.5, "iterations": 1200, "losses": [0.5, 0.25]}
    copy = s.copy()
    assert {k: copy.meta[k] for k in expected} == expected
    assert type(copy.meta["iterations"]) is int and type(copy.meta["psnr"]) is float
    s.save(tmp_path / "s.json")
    loaded = Scene.load(tmp_path / "s.json")
    assert {k: loaded.meta[k] for k in expected} == expected
    assert loaded.to_json() == copy.to_json()


@pytest.mark.parametrize("bad, words", [(object(), "cannot be written as JSON"),
                                        (np.float32("nan"), "finite"),
                                        ({np.int64(1): 2}, "cannot be written as JSON")],
                         ids=["object", "numpy-nan", "numpy-key"])
def test_meta_that_cannot_be_written_is_a_scene_error_and_no_file(tmp_path, bad, words):
    s = Scene.random(3, 32, 32, seed=0)
    s.meta["bad"] = bad
    with pytest.raises(SceneError, match=words) as e:
        s.save(tmp_path / "s.json")
    assert "\n" not in str(e.value) and str(e.value).count("cannot be written") <= 1
    assert not (tmp_path / "s.json").exists()
    if words != "finite":  # (copy writes no file: it keeps what JSON can hold, the rules are save's)
        with pytest.raises(SceneError, match=words):
            s.copy()
