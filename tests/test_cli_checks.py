"""What the command line refuses before any work (exit 2, one line, nothing written), and how
Ctrl+C ends a batch: settings from a hand-edited scene's record, outputs that would overwrite an
input or each other, a picture too big to render, option values out of range or meant for another
mode, a pipe named as a scene, a file name that is not UTF-8 in an HTML report."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from trifit import Scene, SceneError
from trifit.cli import main

FAST = ["--tris", "3", "--size", "16", "--iters", "2", "--backend", "reference", "--quiet"]


@pytest.fixture
def png(tmp_path):
    rng = np.random.default_rng(0)
    p = tmp_path / "in.png"
    Image.fromarray((rng.uniform(0, 1, (24, 32, 3)) * 255).astype(np.uint8)).save(p)
    return p


def _refused(args, capsys, needle: str) -> str:
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err
    return err


@pytest.fixture
def recorded(png, tmp_path):
    """A scene whose meta records its fit (what --replay re-runs)."""
    out = tmp_path / "base.json"
    assert main(["fit", str(png), "-o", str(out), *FAST]) == 0
    return json.loads(out.read_text())


@pytest.mark.parametrize("edit, needle", [
    ({"settings": {"chunk": 0}}, "'chunk' is 0"),
    ({"settings": {"chunk": -1}}, "'chunk' is -1"),
    ({"settings": {"loss": "foo"}}, "'loss' is 'foo'"),
    ({"settings": {"insert_shape": "x"}}, "'insert_shape'"),
    ({"settings": {"lr_vertex": "fast"}}, "'lr_vertex'"),
    ({"settings": {"sigma_start_px": 0}}, "'sigma_start_px'"),
    ({"settings": {"beta1": 5.0}}, "'beta1'"),
    ({"settings": {"seed": -1}}, "'seed'"),
    ({"settings": {"growth_waits": 1}}, "'growth_waits'"),
    ({"changes": [[0, "bogus", 1]]}, "meta.changes"),
    ({"changes": [["a"]]}, "meta.changes"),
    ({"iterations": -1}, "meta.iterations"),
])
def test_replay_refuses_a_record_it_cannot_run(recorded, png, tmp_path, capsys, edit, needle):
    doc = json.loads(json.dumps(recorded))
    for key, value in edit.items():
        if isinstance(value, dict):
            doc["meta"][key].update(value)
        else:
            doc["meta"][key] = value
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    out = tmp_path / "again.json"
    _refused(["fit", str(png), "--replay", str(edited), "-o", str(out), "--backend", "reference", "--quiet"],
             capsys, needle)
    assert not out.exists()


def test_replay_takes_its_settings_from_the_scene(recorded, png, tmp_path, capsys):
    base = tmp_path / "base.json"
    out = tmp_path / "again.json"
    for option in (["--tris", "50"], ["--size", "96"], ["--seed", "7"], ["--loss", "l1"], ["--strategy", "fixed"]):
        _refused(["fit", str(png), "--replay", str(base), "-o", str(out), "--backend", "reference", "--quiet",
                  *option], capsys, option[0])
    assert main(["fit", str(png), "--replay", str(base), "-o", str(out), "--backend", "reference", "--quiet"]) == 0
    assert Scene.load(out).to_dict()["triangles"] == Scene.load(base).to_dict()["triangles"]


def test_outputs_never_overwrite_an_input_or_each_other(png, tmp_path, capsys):
    before = png.read_bytes()
    _refused(["fit", str(png), "-o", str(png), *FAST], capsys, "is an input")
    assert png.read_bytes() == before
    same = tmp_path / "same.json"
    _refused(["fit", str(png), "-o", str(same), "--report", str(same), *FAST], capsys, "would be both")
    # an HTML report writes its JSON beside it: q.json would be the scene and that JSON
    _refused(["fit", str(png), "-o", str(tmp_path / "q.json"), "--report", str(tmp_path / "q.html"), *FAST],
             capsys, "the report's JSON")
    _refused(["fit", str(png), "-o", str(tmp_path / "p.png"), "--animation", str(tmp_path / "p.png"), *FAST],
             capsys, "would be both")
    assert sorted(q.name for q in tmp_path.iterdir()) == ["in.png"]


def test_picture_options_are_checked_before_the_fit(png, tmp_path, capsys):
    _refused(["fit", str(png), "-o", str(tmp_path / "s.json"), "--scale", "3", *FAST], capsys, "--scale")
    _refused(["fit", str(png), "-o", str(tmp_path / "big.png"), "--scale", "5000", *FAST], capsys, "render size")
    assert sorted(q.name for q in tmp_path.iterdir()) == ["in.png"]  # not even the scene: no fit ran


def test_seeds_frame_rates_and_bench_options(png, tmp_path, capsys):
    _refused(["fit", str(png), "--seed", "-1", "-o", str(tmp_path / "s.json"), *FAST], capsys, "--seed")
    _refused(["batch", str(png), "--seed", "-2", "-o", str(tmp_path / "b")], capsys, "--seed")
    _refused(["batch", str(png), "--scale", "2", "-o", str(tmp_path / "b")], capsys, "--png")
    _refused(["video", str(tmp_path), "--fps", "1e-9", "-o", str(tmp_path / "v.gif")], capsys, "--fps")
    _refused(["bench", "--quality", "--tris", "a,b"], capsys, "--tris")
    _refused(["bench", "--quality", "--tris", "4,,5"], capsys, "--tris")
    _refused(["bench", "--tris", "4"], capsys, "for --quality")
    _refused(["bench", "--quick", "--json", str(tmp_path)], capsys, "is a folder")
    _refused(["bench", "--quality", "--out", str(png), "--images", str(png)], capsys, "is an input")
    _refused(["bench", "--quality", "--out", str(png)], capsys, "not a folder")
    assert sorted(q.name for q in tmp_path.iterdir()) == ["in.png"]


def test_empty_paths_and_report_formats_are_refused_with_the_command_named_once(png, tmp_path, capsys):
    for args in (["fit", str(png), "-o", "", *FAST], ["fit", str(png), "--report", " ", *FAST],
                 ["render", str(png), "-o", ""], ["batch", str(png), "-o", ""], ["bench", "--json", ""]):
        err = _refused(args, capsys, "expected a file name")
        assert err.startswith(f"trifit: error: {args[0]}: argument ") and err.count("trifit") == 1, err
    _refused(["fit", str(png), "--report", str(tmp_path / "r.txt"), *FAST], capsys, "use .json or .html")
    err = _refused(["fit", str(png), "--tris", "x", *FAST], capsys, "whole number")
    assert err.startswith("trifit: error: fit: argument --tris: "), err
    err = _refused(["--frobnicate"], capsys, "unrecognized")
    assert err.startswith("trifit: error: unrecognized"), err
    assert sorted(q.name for q in tmp_path.iterdir()) == ["in.png"]


def test_render_and_bench_refuse_before_any_work(recorded, png, tmp_path, capsys):
    scene = tmp_path / "scene.png"  # a scene file whose name looks like the picture asked for
    scene.write_text(json.dumps(recorded))
    _refused(["render", str(scene), "-o", str(scene), "--backend", "reference"], capsys, "is an input")
    assert json.loads(scene.read_text()) == recorded
    s = tmp_path / "base.json"
    _refused(["render", str(s), "--scale", "1e308", "-o", str(tmp_path / "a.png")], capsys, "no render size")
    _refused(["render", str(s), "--size", "16384x1", "--stretch", "-o", str(tmp_path / "a.webp")], capsys,
             "at most 16383 px")
    err = _refused(["render", str(s), "--size", "65536x65536", "-o", str(tmp_path / "a.png")], capsys, "aspect")
    assert "would keep it" not in err  # (no picture within the cap keeps it there)
    bench = ["bench", "--quality", "--iters", "1", "--tris", "1", "--seeds", "1", "--size", "16",
             "--backend", "reference"]
    _refused([*bench, "--images", str(png), "--json", str(png)], capsys, "is an input")
    _refused([*bench, "--images", str(png), "--out", str(tmp_path / "q"), "--json", str(tmp_path / "q")], capsys,
             "would be both")
    _refused([*bench, "--images", str(png), str(tmp_path / "missing.png")], capsys, "missing.png: no such file")
    _refused(["bench", "--quality", "--tris", "1,99999"], capsys, "at most 20000")
    _refused(["bench", "--size", "32"], capsys, "--size is for --quality")
    _refused(["bench", "--seeds", "2"], capsys, "--seeds is for --quality")
    _refused(["bench", "--replicas", "2"], capsys, "--replicas is for --quality")
    _refused(["bench", "--quality", "--replicas", "9"], capsys, "expected 0 (chosen for the adapter) to 8")
    _refused(["fit", str(png), "--size", "5000"], capsys, "at most 4096")
    assert Image.open(png).size == (32, 24)
    assert sorted(q.name for q in tmp_path.iterdir()) == ["base.json", "in.png", "scene.png"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this platform")
def test_a_pipe_is_not_a_scene(tmp_path, capsys):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    with pytest.raises(SceneError, match="pipe"):
        Scene.load(fifo)  # (opening it would wait for a writer)
    _refused(["render", str(fifo), "-o", str(tmp_path / "r.png")], capsys, "pipe")


@pytest.mark.skipif(sys.platform != "linux", reason="a file name of bytes that are not UTF-8")
def test_an_html_report_names_an_image_whose_name_is_not_utf8(png, tmp_path):
    odd = Path(os.fsdecode(bytes(tmp_path) + b"/n\xff\xfe.png"))
    odd.write_bytes(png.read_bytes())
    report = tmp_path / "r.html"
    assert main(["fit", str(odd), "-o", str(tmp_path / "s.json"), "--report", str(report), *FAST]) == 0
    assert "\\udcff" in report.read_text(encoding="utf-8") and (tmp_path / "r.json").exists()


@pytest.mark.gpu
@pytest.mark.parametrize("mode", [["--time-limit", "600"], ["--iters", "10000000"]], ids=["one-by-one", "batched"])
def test_ctrl_c_ends_a_batch_and_keeps_the_scenes_so_far(tmp_path, gpu_ctx, mode):
    """The first Ctrl+C ends the images being fitted at their next chunk, writes their scenes and
    starts no other; the command says so and exits 130."""
    import signal

    from conftest import terminal_sigint

    rng = np.random.default_rng(1)
    for name in ("a", "b", "c"):
        Image.fromarray((rng.uniform(0, 1, (24, 32, 3)) * 255).astype(np.uint8)).save(tmp_path / f"{name}.png")
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-m", "trifit.cli", "batch", str(tmp_path / "*.png"), "-o", str(out),
                          "--size", "24", "--tris", "6", "--backend", "gpu", *mode],
                         stderr=subprocess.PIPE, text=True, preexec_fn=terminal_sigint)
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(iter(lambda: p.stderr.read(1), "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120

    def counting() -> bool:  # (the bar shows "it N psnr ..." once a chunk is done, a batched fit's "it N]")
        return re.search(r"it [1-9][0-9]*[ \]]", "".join(seen)) is not None

    while not counting() and time.monotonic() < deadline:
        time.sleep(0.1)
    if not counting():  # (so that a new wording of the bar fails here rather than waiting out the deadline)
        p.kill()
        pytest.fail("the bar never counted an iteration: " + "".join(seen)[-800:])
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=120) == 130
    reader.join(timeout=10)
    err = "".join(seen)
    assert "trifit: batch: interrupted" in err and "stopped early" in err and "Traceback" not in err, err[-800:]
    summary = json.loads((out / "batch-summary.json").read_text())
    stopped = [r for r in summary["images"] if r["status"] == "interrupted"]
    assert summary["interrupted"] and stopped
    if mode[0] == "--time-limit":  # one image at a time: the first was under way, the others never started
        assert [r["status"] for r in summary["images"]] == ["interrupted"]
    else:  # the three in one batched fit, all ended together
        assert len(stopped) == 3
    for r in stopped:
        scene = Scene.load(r["scene"])  # written whole, holding the iterations it ran
        assert 0 < scene.meta["iterations"] == r["iterations"] and scene.meta["interrupted"] is True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="DISPLAY is how Linux names a display")
def test_the_app_needs_a_display_and_a_readable_image(tmp_path, monkeypatch, capsys):
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        monkeypatch.delenv(name, raising=False)
    _refused(["gui"], capsys, "no display")  # (Qt would abort the process)
    monkeypatch.setenv("DISPLAY", ":99")
    _refused(["gui", str(tmp_path / "missing.png")], capsys, "missing.png")  # before Qt starts
    _refused(["gui", str(tmp_path / "missing.mp4")], capsys, "missing.mp4")  # a clip's name too


def test_the_app_opens_what_its_own_dialog_opens(tmp_path, png, monkeypatch):
    """`trifit gui` takes a folder of frames or a video as File > Open does (the window decodes a
    clip and shows its errors), and passes --start and --backend on."""
    from conftest import import_or_fail

    app_main = import_or_fail("trifit.app.main", "gui")

    monkeypatch.setenv("DISPLAY", ":99")
    opened = []
    monkeypatch.setattr(app_main, "run_gui", lambda path, start, backend: opened.append((path, start, backend)) or 0)
    frames = tmp_path / "frames"
    frames.mkdir()
    (frames / "0001.png").write_bytes(png.read_bytes())
    assert main(["gui", str(frames), "--start", "--backend", "reference"]) == 0
    assert main(["gui", str(png), "--backend", "reference"]) == 0
    assert main([]) == 0 and main(["-v"]) == 0  # the README's first command: a bare `trifit` is `trifit gui`
    assert opened == [(str(frames), True, "reference"), (str(png), False, "reference"), (None, False, "auto"),
                      (None, False, "auto")]
