"""The trifit command line: exit codes, one-line errors, outputs, the report."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from trifit import Scene, reference as R
from trifit.cli import main


def _run(args):
    """Run the CLI in a subprocess (what a user sees: status, stdout, stderr)."""
    p = subprocess.run([sys.executable, "-m", "trifit.cli", *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


@pytest.fixture
def small_png(tmp_path):
    rng = np.random.default_rng(0)
    arr = (rng.uniform(0, 1, (30, 40, 3)) * 255).astype(np.uint8)
    arr[:15] //= 3
    p = tmp_path / "in.png"
    Image.fromarray(arr).save(p)
    return p


@pytest.mark.gpu
def test_fit_writes_scene_and_report(tmp_path, small_png, gpu_ctx):
    out, rep = tmp_path / "s.json", tmp_path / "r.json"
    code, _, err = _run(["fit", str(small_png), "--tris", "8", "--size", "32", "--iters", "30",
                         "--seed", "3", "-o", str(out), "--report", str(rep), "--quiet"])
    assert code == 0, err
    scene = Scene.load(out)
    assert scene.n_triangles == 8 and (scene.width, scene.height) == (32, 24)
    assert scene.meta["seed"] == 3 and scene.meta["iterations"] == 30
    r = json.loads(rep.read_text())
    for key in ("iterations", "wall_s", "submissions", "readback_bytes", "upload_bytes", "pool",
                "phases_ms", "adapter", "final"):
        assert key in r, key
    assert r["iterations"] == 30 and r["submissions"] >= 2
    assert {"hits", "misses", "bytes"} <= set(r["pool"]) and {"name", "backend", "type"} <= set(r["adapter"])
    assert r["final"]["psnr"] > 10 and r["engine_backend"] == "gpu"


def test_reference_backend_fit_and_render(tmp_path, small_png):
    out = tmp_path / "s.json"
    assert main(["fit", str(small_png), "--tris", "3", "--size", "12", "--iters", "4",
                 "--backend", "reference", "-o", str(out), "--quiet"]) == 0
    npy = tmp_path / "r.npy"
    assert main(["render", str(out), "--size", "24x18", "--backend", "reference", "-o", str(npy)]) == 0
    img = np.load(npy)
    assert img.shape == (18, 24, 3) and img.dtype == np.float32
    np.testing.assert_allclose(img, R.render(Scene.load(out), 24, 18), atol=1e-6)


@pytest.mark.gpu
def test_render_png(tmp_path, gpu_ctx):
    s = Scene.random(10, 20, 10, seed=1)
    s.save(tmp_path / "s.json")
    code, _, err = _run(["render", str(tmp_path / "s.json"), "-o", str(tmp_path / "o.png")])
    assert code == 0, err
    assert Image.open(tmp_path / "o.png").size == (20, 10)


@pytest.mark.parametrize("args, words", [
    (["fit", "MISSING.png"], "no such file"),
    (["fit", "{txt}"], "not an image"),
    (["fit", "{empty}"], "empty"),
    (["fit", "{png}", "--tris", "0"], "--tris"),
    (["fit", "{png}", "--size", "abc"], "--size"),
    (["fit", "{png}", "--time-limit", "nan"], "--time-limit"),
    (["fit", "{png}", "-o", "/nonexistent-dir/x.json"], "does not exist"),
    (["render", "{badscene}", "-o", "{tmp}/o.png"], "version"),
    (["render", "MISSING.json", "-o", "{tmp}/o.png"], "cannot read"),
    (["render", "{goodscene}", "--size", "0x5", "-o", "{tmp}/o.png"], "--size"),
    (["render", "{goodscene}", "-o", "{tmp}/o.xyz"], "unknown output format"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_input_is_one_line_and_status_2(tmp_path, small_png, args, words):
    (tmp_path / "t.png").write_text("this is not a png")
    (tmp_path / "e.png").write_bytes(b"")
    (tmp_path / "bad.json").write_text(json.dumps({**Scene.random(1, 4, 4).to_dict(), "version": 9}))
    Scene.random(1, 4, 4).save(tmp_path / "good.json")
    subst = {"{txt}": str(tmp_path / "t.png"), "{empty}": str(tmp_path / "e.png"), "{png}": str(small_png),
             "{badscene}": str(tmp_path / "bad.json"), "{goodscene}": str(tmp_path / "good.json"),
             "{tmp}": str(tmp_path)}
    argv = []
    for a in args:
        for k, v in subst.items():
            a = a.replace(k, v)
        argv.append(a)
    code, out, err = _run(argv)
    assert code == 2, (code, err)
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert words in lines[0] and "Traceback" not in err
    assert not (tmp_path / "o.png").exists() and not (tmp_path / "o.xyz").exists()


def test_help_everywhere():
    for args in (["-h"], ["fit", "-h"], ["render", "-h"], ["bench", "-h"], ["gui", "-h"]):
        code, out, err = _run(args)
        assert code == 0 and "usage" in out.lower(), args
    code, out, _ = _run(["--version"])
    assert code == 0 and out.startswith("trifit ")


# a folder that exists and takes no new file, even for root (the CI user): procfs
UNWRITABLE = "/proc"


@pytest.mark.parametrize("option", [["-o", f"{UNWRITABLE}/s.json"], ["--report", f"{UNWRITABLE}/r.html"],
                                    ["--animation", f"{UNWRITABLE}/a.gif"]], ids=["scene", "report", "animation"])
def test_an_unwritable_output_is_refused_before_any_work(small_png, tmp_path, option):
    import time

    t0 = time.perf_counter()
    code, _, err = _run(["fit", str(small_png), "--iters", "100000", "--size", "24", "--tris", "4",
                         "-o", str(tmp_path / "ok.json"), *option])
    assert code == 2 and err.count("\n") == 1 and option[1] in err and "cannot write" in err, err
    assert time.perf_counter() - t0 < 30  # refused at once, not after 100,000 iterations
    assert not (tmp_path / "ok.json").exists()


def test_batch_refuses_an_unwritable_output_folder(small_png):
    code, _, err = _run(["batch", str(small_png), "-o", f"{UNWRITABLE}/trifit-out", "--iters", "5"])
    assert code == 2 and err.count("\n") == 1 and "trifit-out" in err, err


@pytest.mark.gpu
def test_ctrl_c_ends_the_fit_and_keeps_the_scene_so_far(small_png, tmp_path, gpu_ctx):
    import signal
    import threading
    import time

    from conftest import terminal_sigint

    out = tmp_path / "s.json"
    p = subprocess.Popen([sys.executable, "-m", "trifit.cli", "fit", str(small_png), "--iters", "1000000",
                          "--size", "24", "--tris", "6", "--backend", "gpu", "-o", str(out)],
                         stderr=subprocess.PIPE, text=True, preexec_fn=terminal_sigint)
    seen = []
    reader = threading.Thread(target=lambda: seen.extend(iter(lambda: p.stderr.read(1), "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    # the fit is under way: its bar counts iterations done (it shows 0/1000000 before the first chunk)
    while not re.search(r"[1-9][0-9]*/1000000", "".join(seen)) and time.monotonic() < deadline:
        time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=120) == 130
    reader.join(timeout=10)
    err = "".join(seen)
    assert "interrupted after" in err and str(out) in err, err[-500:]
    scene = Scene.load(out)  # a valid scene file, written atomically
    assert 0 < scene.meta["iterations"] < 1_000_000 and scene.n_triangles >= 1
    assert scene.meta["interrupted"] is True


@pytest.mark.gpu
def test_fit_writes_what_the_extension_names_and_keeps_the_scene(small_png, tmp_path, gpu_ctx):
    pic, svg = tmp_path / "pic.png", tmp_path / "vec.svg"
    code, _, err = _run(["fit", str(small_png), "--iters", "10", "--size", "24", "--tris", "5", "--backend", "gpu",
                         "-o", str(pic)])
    assert code == 0 and str(pic) in err and str(tmp_path / "pic.trifit.json") in err, err
    assert Image.open(pic).size == Image.open(small_png).size == (40, 30)  # the source image's size
    assert Scene.load(tmp_path / "pic.trifit.json").n_triangles == 5     # the fit is never lost
    assert main(["fit", str(small_png), "--iters", "5", "--size", "24", "--tris", "4", "--width", "200",
                 "--backend", "gpu", "--quiet", "-o", str(pic)]) == 0
    assert Image.open(pic).size == (200, 150)
    assert main(["fit", str(small_png), "--iters", "5", "--size", "24", "--tris", "4", "--quiet",
                 "--backend", "gpu", "-o", str(svg)]) == 0
    assert svg.read_text().startswith("<?xml") and (tmp_path / "vec.trifit.json").exists()
    code, _, err = _run(["fit", str(small_png), "--iters", "5", "-o", str(tmp_path / "x.xyz")])
    assert code == 2 and "unknown output format" in err and err.count("\n") == 1


def test_render_keeps_the_aspect_unless_told(tmp_path):
    s = Scene.random(3, 40, 30, seed=0)
    s.save(tmp_path / "s.json")
    code, _, err = _run(["render", str(tmp_path / "s.json"), "--size", "100x100", "-o", str(tmp_path / "o.svg")])
    assert code == 2 and "aspect" in err and err.count("\n") == 1
    assert main(["render", str(tmp_path / "s.json"), "--size", "100x100", "--stretch", "-o", str(tmp_path / "o.svg")]) == 0
    assert main(["render", str(tmp_path / "s.json"), "--width", "120", "-o", str(tmp_path / "w.svg")]) == 0
    assert 'width="120" height="90"' in (tmp_path / "w.svg").read_text()


@pytest.mark.gpu
def test_progress_says_the_time_left_and_which_image(small_png, tmp_path, gpu_ctx):
    code, _, err = _run(["fit", str(small_png), "--size", "16", "--tris", "3", "--time-limit", "1", "--backend", "gpu",
                         "-o", str(tmp_path / "t.json")])
    assert code == 0 and " of 1 s" in err and "left" in err, err[-400:]
    other = tmp_path / "b.png"
    Image.open(small_png).transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(other)
    code, _, err = _run(["batch", str(small_png), str(other), "-o", str(tmp_path / "out"), "--size", "16",
                         "--tris", "3", "--time-limit", "0.3", "--backend", "gpu"])
    assert code == 0 and "image 1 of 2: in.png" in err and "image 2 of 2: b.png" in err, err[-600:]


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["fit", "--help"], ["batch", "--help"]])
def test_version_and_help_load_neither_numpy_nor_the_engine(args):
    """`trifit --version` / `--help` answer at once: the engine, numpy and wgpu load on first use."""
    code = ("import sys\nfrom trifit.cli import main\n"
            f"try:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
            "heavy = sorted(m for m in ('numpy', 'wgpu', 'PIL', 'trifit.engine', 'trifit.fitter') if m in sys.modules)\n"
            "print('LOADED', heavy)")
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60)
    assert "LOADED []" in out.stdout, out.stdout[-500:] + out.stderr[-500:]


def test_a_logged_exception_is_one_line_without_its_traceback_unless_verbose():
    """A library that logs an exception (tornado's failed callback as Ctrl+C stops a Dask cluster)
    shows the user one line, "trifit: message (Type: text)"; -v keeps the traceback."""
    import logging

    from trifit.cli import LogLines

    try:
        raise NameError("cannot access free variable 'future'")
    except NameError:
        record = logging.LogRecord("tornado.application", logging.ERROR, __file__, 1, "Exception in callback %s",
                                   ("cancel",), sys.exc_info())
    quiet = LogLines(verbose=False).format(record)
    assert quiet == "trifit: Exception in callback cancel (NameError: cannot access free variable 'future')"
    assert "Traceback" in LogLines(verbose=True).format(record)
    plain = logging.LogRecord("trifit", logging.WARNING, __file__, 1, "a note", (), None)
    assert LogLines().format(plain) == "trifit: a note"


class _Left(Exception):
    """What the patched os._exit raises: the process would have left here, without teardown."""


def _entry(monkeypatch, argv):
    """trifit.cli.entry with ``argv``: ("fast", code) where it leaves through os._exit, else
    ("normal", code) where it leaves through sys.exit."""
    import os

    from trifit import cli

    def leave(code):
        raise _Left(code)

    monkeypatch.setattr(os, "_exit", leave)
    monkeypatch.setattr(sys, "argv", ["trifit", *map(str, argv)])
    try:
        cli.entry()
    except _Left as left:
        return "fast", left.args[0]
    except SystemExit as exc:
        return "normal", exc.code
    raise AssertionError("entry() returned")


def test_entry_leaves_without_teardown_only_after_a_command_whose_outputs_are_closed(tmp_path, small_png,
                                                                                      monkeypatch):
    import threading

    out = tmp_path / "s.json"
    fit = ["fit", small_png, "--tris", "4", "--size", "16", "--iters", "3", "--backend", "reference", "--quiet",
           "-o", out]
    assert _entry(monkeypatch, fit) == ("fast", 0)
    assert Scene.load(out).meta["iterations"] == 3  # written and closed before the process leaves
    # a fit or render refused on bad input has written nothing: it leaves the same way (the GPU's
    # warm-up thread done first), not through the driver's teardown under Python's
    assert _entry(monkeypatch, ["fit", tmp_path / "missing.png", "-o", out]) == ("fast", 2)
    assert _entry(monkeypatch, ["render", tmp_path / "missing.json", "-o", tmp_path / "o.png"]) == ("fast", 2)
    # no fit or render ran: --version, another command's bad input
    assert _entry(monkeypatch, ["--version"]) == ("normal", 0)
    assert _entry(monkeypatch, ["batch", tmp_path / "none", "-o", tmp_path / "b"]) == ("normal", 2)
    # a thread Python would wait for at exit keeps the ordinary exit
    release = threading.Event()
    worker = threading.Thread(target=release.wait)
    worker.start()
    try:
        assert _entry(monkeypatch, fit) == ("normal", 0)
    finally:
        release.set()
        worker.join()


def test_entry_asks_for_one_blas_thread_unless_the_user_set_a_count(monkeypatch):
    """numpy's OpenBLAS would start a spinning thread for each core (render/cli.py one_blas_thread),
    so the console script sets one where the environment names no count, and keeps one it names."""
    import os

    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    assert _entry(monkeypatch, ["--version"]) == ("normal", 0)
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "6")
    assert _entry(monkeypatch, ["--version"]) == ("normal", 0)
    assert os.environ["OPENBLAS_NUM_THREADS"] == "6"


@pytest.mark.gpu
def test_sharp_fits_end_as_soft_as_a_crisp_picture_and_replay(small_png, tmp_path, gpu_ctx):
    from trifit.export import CRISP_SIGMA_PX

    out = tmp_path / "sharp.trifit.json"
    assert main(["fit", str(small_png), "--iters", "60", "--size", "24", "--tris", "5", "--backend", "gpu", "--quiet",
                 "--sharp", "-o", str(out)]) == 0
    scene = Scene.load(out)
    assert scene.sigma * min(scene.width, scene.height) == pytest.approx(CRISP_SIGMA_PX, rel=1e-6)
    assert scene.meta["settings"]["sigma_probes"] == 0
    again = tmp_path / "again.trifit.json"
    assert main(["fit", str(small_png), "--replay", str(out), "--backend", "gpu", "--quiet", "-o", str(again)]) == 0
    assert Scene.load(again).triangles.tobytes() == scene.triangles.tobytes()
    default = tmp_path / "default.trifit.json"
    assert main(["fit", str(small_png), "--iters", "60", "--size", "24", "--tris", "5", "--backend", "gpu", "--quiet",
                 "-o", str(default)]) == 0
    assert Scene.load(default).meta["settings"]["sigma_probes"] > 0


@pytest.mark.gpu
@pytest.mark.parametrize("output, options, sharp", [
    ("pic.png", [], True),                 # a crisp picture: fitted for it
    ("pic.svg", [], True),                 # polygons: crisp too
    ("pic.png", ["--no-sharp"], False),    # ... unless asked not to
    ("pic.png", ["--edges", "fit"], False),  # the fit's own edges: the probes choose them
    ("pic.npy", [], False),                # the scene's own render, as data
    ("pic.trifit.json", ["--sharp"], True),  # a scene, asked for
])
def test_a_fit_whose_output_is_a_crisp_picture_is_fitted_for_it(small_png, tmp_path, gpu_ctx, output, options, sharp):
    out = tmp_path / output
    assert main(["fit", str(small_png), "--iters", "10", "--size", "24", "--tris", "3", "--backend", "gpu", "--quiet",
                 *options, "-o", str(out)]) == 0
    settings = Scene.load(tmp_path / "pic.trifit.json").meta["settings"]
    assert (settings["sigma_probes"] == 0 and settings["sigma_end_px"] == 0.25) is sharp, settings
