"""GUI tests (pytest-qt): the whole window on lavapipe under Xvfb.

Run: ``xvfb-run -a pytest tests/test_gui.py`` (QT_QPA_PLATFORM unset: the canvas presents to a
real X11 surface, and the screenshot test reads that surface back through the X server).
Under QT_QPA_PLATFORM=offscreen the screenshot test reads the canvas through ``snapshot()``.
Under CI=true a missing wgpu adapter is a failure, not a skip.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6 import QtCore, QtGui, QtWidgets  # noqa: E402

import trifit  # noqa: E402
import trifit.app  # noqa: E402,F401  (installs the PySide6 refcount guard first)
from trifit.app.canvas import FitCanvas  # noqa: E402
from trifit.app.gpu_gate import GpuGate  # noqa: E402
from trifit.app.main import build_parser  # noqa: E402
from trifit.app.panes import ViewMode, layout_panes  # noqa: E402
from trifit.app.qtcompat import guard_pyside_refcounts  # noqa: E402
from trifit.app.window import MainWindow  # noqa: E402
from trifit.resources import sample_path  # noqa: E402
from trifit.run import ChunkSizer  # noqa: E402

pytestmark = pytest.mark.gui

from conftest import GUI_SIZE as SIZE, GUI_TRIANGLES as TRIANGLES, answer_close, open_window, worker_call  # noqa: E402

WAIT_MS = 20_000   # generous: a cold lavapipe compiles the shaders on the first step


# ---------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def engine(warm_engine):
    return warm_engine


@pytest.fixture
def settings(gui_settings):
    s = gui_settings
    s.setValue("geometry", None)
    s.remove("geometry")
    return s


@pytest.fixture
def window(qtbot, engine, settings):
    yield from open_window(qtbot, engine, settings)


def wait_loaded(qtbot, win: MainWindow, source: str | None = None):
    qtbot.waitUntil(lambda: win.fit_info is not None and (source is None or win.fit_info.source == source),
                    timeout=WAIT_MS)


def iteration(win: MainWindow) -> int:
    return win.last_stats.iteration if win.last_stats is not None else 0


def wait_iterations(qtbot, win: MainWindow, at_least: int):
    qtbot.waitUntil(lambda: iteration(win) >= at_least, timeout=WAIT_MS)


def canvas_pixels(win: MainWindow) -> np.ndarray:
    """What the canvas shows, as H x W x 3 uint8 in physical pixels (saved as PNGs in
    $TRIFIT_TEST_DUMP when set, to look at)."""
    pixels = _read_canvas(win)
    dump = os.environ.get("TRIFIT_TEST_DUMP")
    if dump:
        from PIL import Image

        Path(dump).mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(Path(dump) / f"canvas-{time.monotonic_ns()}.png")
    return pixels


def _read_canvas(win: MainWindow) -> np.ndarray:
    # On X11 the canvas presents straight to its native window, so it is read back from the X
    # server (what a person sees); elsewhere through the canvas's offscreen snapshot.
    canvas = win.canvas
    if QtGui.QGuiApplication.platformName() == "xcb" and canvas.present_method == "screen":
        QtWidgets.QApplication.processEvents()
        image = canvas.screen().grabWindow(canvas.winId()).toImage()
        image = image.convertToFormat(QtGui.QImage.Format.Format_RGB888)
        w, h = image.width(), image.height()
        data = np.frombuffer(image.constBits(), np.uint8, count=image.bytesPerLine() * h)
        return data.reshape(h, image.bytesPerLine())[:, : w * 3].reshape(h, w, 3).copy()
    return canvas.snapshot()[..., :3]


def panes(win: MainWindow, pixels: np.ndarray):
    h, w = pixels.shape[:2]
    ratio = win.canvas.get_pixel_ratio()
    a, b = layout_panes(win.canvas.state.mode, w, h, win.fit_info.width, win.fit_info.height, gap=8 * ratio)
    crop = lambda r: pixels[int(r[1]) + 2:int(r[3]) - 2, int(r[0]) + 2:int(r[2]) - 2].astype(np.float64)  # noqa: E731
    return crop(a), crop(b)


# ---------------------------------------------------------------------- pure helpers
def test_layout_keeps_aspect_and_stacks_when_tall():
    a, b = layout_panes(ViewMode.SIDE_BY_SIDE, 1000, 400, 200, 100)
    for r in (a, b):
        assert abs((r[2] - r[0]) / (r[3] - r[1]) - 2.0) < 0.05
    assert b[0] > a[2]                      # side by side
    a, b = layout_panes(ViewMode.SIDE_BY_SIDE, 300, 900, 200, 100)
    assert b[1] > a[3]                      # stacked in a tall canvas
    one, _ = layout_panes(ViewMode.OVERLAY, 1000, 400, 200, 100)
    assert one[2] - one[0] > a[2] - a[0]


def test_chunk_sizer_targets_chunk_time():
    sizer = ChunkSizer(target_s=0.06, first=1)
    assert sizer.next() == 1
    sizer.observe(1, 0.01)
    assert sizer.next() == 6
    sizer.observe(6, 0.6)                   # got slow: shrink fast
    assert sizer.next() <= 2


def test_gpu_gate_never_makes_the_gui_wait():
    gate = GpuGate()
    held, release = threading.Event(), threading.Event()

    def worker():
        with gate.worker_turn():
            held.set()
            release.wait(5)

    t = threading.Thread(target=worker)
    t.start()
    held.wait(5)
    # The fit holds the GPU: the GUI does not wait (a call that waited would get the turn once the
    # worker let go, and return True; no clock is read, so a loaded machine cannot fail this).
    assert gate.try_gui_turn() is False
    gate.expect_frame()
    assert gate.wait_for_frame(0.01) is False    # the worker's bounded wait for a frame times out
    release.set()
    t.join(5)
    assert gate.try_gui_turn() is True
    gate.end_gui_turn()                          # ends the turn and releases a waiting worker
    assert gate.wait_for_frame(0.01) is True


def test_pyside_refcount_guard_keeps_none_alive(qapp):
    guard_pyside_refcounts()
    label = QtWidgets.QLabel()
    before = sys.getrefcount(None)
    for _ in range(5000):
        label.setText("x")   # PySide6 6.12.0 on Python 3.11 drops a reference to None here
    if before - sys.getrefcount(None) >= 4000:  # this PySide6 leaks: the guard must be on
        assert sys.getrefcount(None) > 1 << 40


def test_cli_arguments():
    args = build_parser().parse_args(["picture.png", "--start"])
    assert args.image == "picture.png" and args.start
    args = build_parser().parse_args([])
    assert args.image is None and not args.start


# ---------------------------------------------------------------------- the window
def test_fit_workflow_live_changes_pause_export_quit(qtbot, window, tmp_path):
    win = window
    assert isinstance(win.canvas, FitCanvas)
    win.open_image(sample_path("astronaut.png"), start=True)
    wait_loaded(qtbot, win)
    assert (win.fit_info.width, win.fit_info.height) == (SIZE, SIZE)
    wait_iterations(qtbot, win, 3)
    first = iteration(win)
    wait_iterations(qtbot, win, first + 5)  # iterations keep advancing
    assert win.running

    # Live changes while running: they reach the fit between chunks.
    win.controls.triangles.setValue(TRIANGLES + 10)
    win.controls.sigma.setValue(1.5)
    qtbot.waitUntil(lambda: win.last_stats.n_triangles == TRIANGLES + 10
                    and abs(win.last_stats.sigma_px - 1.5) < 1e-3, timeout=WAIT_MS)
    win.controls.lr.setValue(0.5)
    after_change = iteration(win)
    wait_iterations(qtbot, win, after_change + 3)

    # Space toggles start/pause (a window shortcut, so the window must be the active one).
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow, timeout=WAIT_MS)
    qtbot.keyClick(win.canvas, QtCore.Qt.Key.Key_Space)
    qtbot.waitUntil(lambda: not win.running, timeout=WAIT_MS)
    paused_at = iteration(win)
    qtbot.wait(400)
    assert iteration(win) == paused_at, "the fit advanced while paused"
    assert win.act_start.text() == "Start"

    # Export the scene while paused; it holds the live triangle count.
    path = tmp_path / "fit.json"
    win.save_scene(path)
    qtbot.waitUntil(lambda: path.exists() and "Saved" in win.last_message, timeout=WAIT_MS)
    scene = trifit.Scene.load(path)
    assert scene.n_triangles == TRIANGLES + 10
    assert scene.meta["iterations"] == paused_at

    # Resume, then quit while running: the fixture checks that the thread is gone.
    win.start_fit()
    wait_iterations(qtbot, win, paused_at + 2)


def test_canvas_shows_both_pictures_and_the_render_changes(qtbot, window):
    win = window
    win.open_image(sample_path("astronaut.png"), start=True)
    wait_loaded(qtbot, win)
    wait_iterations(qtbot, win, 3)
    qtbot.waitUntil(lambda: win.canvas.clock.count > 2, timeout=WAIT_MS)
    qtbot.wait(100)
    before = canvas_pixels(win)
    target, rendered = panes(win, before)
    assert target.std() > 20, "the target pane is uniform"
    assert rendered.std() > 5, "the render pane is uniform"
    assert np.abs(target.mean(axis=(0, 1)) - rendered.mean(axis=(0, 1))).max() < 60  # same picture, roughly

    start = iteration(win)
    wait_iterations(qtbot, win, start + 40)
    qtbot.wait(150)
    after = canvas_pixels(win)
    target2, rendered2 = panes(win, after)
    assert np.abs(rendered2 - rendered).mean() > 0.5, "the render did not change while fitting"
    assert np.abs(target2 - target).mean() < 2.0, "the target pane changed"

    win.set_view_mode(ViewMode.ERROR_HEATMAP)
    qtbot.wait(200)
    _, heat = panes(win, canvas_pixels(win))
    assert heat.std() > 5, "the error heatmap is uniform"
    win.set_view_mode(ViewMode.OVERLAY)
    win.split_slider.setValue(250)
    assert win.split_slider.isVisible() and abs(win.canvas.state.split - 0.25) < 1e-9
    qtbot.wait(200)
    overlay, _ = panes(win, canvas_pixels(win))
    assert overlay.std() > 20


def test_the_render_pane_shows_the_image_the_fit_names_in_its_buffer(qtbot, window):
    # a fit of replicas names where its leading replica's image starts (Fitter.gpu_image): a
    # buffer of two images, the first black and the second white, shown from the second's start
    import wgpu

    win = window
    win.open_image(sample_path("astronaut.png"))
    wait_loaded(qtbot, win)
    w, h = win.fit_info.width, win.fit_info.height
    images = np.concatenate([np.zeros(w * h * 3, np.float32), np.ones(w * h * 3, np.float32)])
    buffer = win.canvas.device.create_buffer_with_data(data=images, usage=wgpu.BufferUsage.STORAGE)
    shown = []
    for first in (w * h * 3, 0):
        win.canvas.set_render_buffer(buffer, w, h, first)
        win.canvas.draw_now()
        qtbot.wait(100)
        shown.append(panes(win, canvas_pixels(win))[1].mean())
    assert shown[0] > 240 and shown[1] < 15, shown


def test_a_fit_of_replicas_runs_shows_and_saves_in_the_window(qtbot, window, tmp_path, monkeypatch):
    # a CPU adapter runs one replica; as a GPU with room would, this fit runs two (render/replicas.py)
    from trifit import fitter as fitter_module

    monkeypatch.setattr(fitter_module, "auto_replicas", lambda *a: 2)
    win = window
    win.open_image(sample_path("astronaut.png"), start=True)
    wait_loaded(qtbot, win)
    wait_iterations(qtbot, win, 40)
    qtbot.wait(100)
    _, rendered = panes(win, canvas_pixels(win))
    assert rendered.std() > 5, "the render pane is uniform"
    path = tmp_path / "fit.json"
    win.save_scene(path)
    qtbot.waitUntil(lambda: path.exists() and "Saved" in win.last_message, timeout=WAIT_MS)
    scene = trifit.Scene.load(path)
    assert scene.meta["settings"]["replicas"] == 2 and scene.n_triangles >= 1


def test_unreadable_image_and_scene_leave_the_fit_alone(qtbot, window, tmp_path):
    win = window
    source = sample_path("astronaut.png")
    win.open_image(source)
    wait_loaded(qtbot, win, source)

    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\nthis is not a picture")
    win.open_image(broken)
    qtbot.waitUntil(lambda: win.last_error is not None, timeout=WAIT_MS)
    title, message = win.last_error
    assert "broken.png" in message
    assert win.fit_info.source == source
    assert any(isinstance(w, QtWidgets.QMessageBox) and w.isVisible() for w in win.findChildren(QtWidgets.QMessageBox))

    win.last_error = None
    bad_scene = tmp_path / "bad.json"
    bad_scene.write_text('{"format": "trifit-scene", "version": 1}')
    assert win.open_scene(bad_scene) is False
    assert win.last_error is not None and "missing" in win.last_error[1]

    # The fit still runs.
    win.start_fit()
    wait_iterations(qtbot, win, 3)


def test_open_scene_refines_and_drop_opens_image(qtbot, window, tmp_path):
    win = window
    win.open_image(sample_path("astronaut.png"))
    wait_loaded(qtbot, win)
    path = tmp_path / "start.json"
    trifit.Scene.random(12, SIZE, SIZE, seed=3).save(path)
    assert win.open_scene(path)
    qtbot.waitUntil(lambda: win.fit_info.triangles == 12, timeout=WAIT_MS)
    assert win.controls.triangles.value() == 12

    # Drag and drop of an image file onto the window.
    other = sample_path("chelsea.png")
    mime = QtCore.QMimeData()
    mime.setUrls([QtCore.QUrl.fromLocalFile(other)])
    pos = QtCore.QPointF(win.width() / 2, win.height() / 2)
    drop = QtGui.QDropEvent(pos, QtCore.Qt.DropAction.CopyAction, mime,
                            QtCore.Qt.MouseButton.LeftButton, QtCore.Qt.KeyboardModifier.NoModifier)
    win.dropEvent(drop)
    wait_loaded(qtbot, win, other)
    assert win.fit_info.width == SIZE  # chelsea is landscape: the longer side is the working size


def test_stop_condition_pauses_the_fit(qtbot, window):
    win = window
    win.controls.stop_iterations.setValue(7)
    win.open_image(sample_path("astronaut.png"), start=True)
    wait_loaded(qtbot, win)
    qtbot.waitUntil(lambda: "Stopped" in win.last_message, timeout=WAIT_MS)
    assert not win.running
    assert iteration(win) == 7


def test_exports_use_the_engine_or_explain(qtbot, window, tmp_path):
    win = window
    win.open_image(sample_path("astronaut.png"))
    wait_loaded(qtbot, win)
    try:
        from trifit import export, report
        have_exports = all(hasattr(m, f) for m, f in ((export, "save_png"), (export, "save_svg"),
                                                      (report, "write_report")))
    except ImportError:
        have_exports = False
    png, svg, html = tmp_path / "out.png", tmp_path / "out.svg", tmp_path / "out.html"
    win.export_png(png, 96)
    win.export_svg(svg)
    win.export_report(html)
    if have_exports:
        qtbot.waitUntil(lambda: png.exists() and svg.exists() and html.exists(), timeout=WAIT_MS)
        from PIL import Image

        assert Image.open(png).size == (96, 96)
        assert win.last_error is None
    else:
        assert win.last_error is not None and win.last_error[0] == "Export not available"
        assert not png.exists()


def test_missing_engine_export_is_explained(qtbot, window, tmp_path, monkeypatch):
    import trifit.app.exports

    real_import = trifit.app.exports.importlib.import_module

    def without_export(name, *args):
        if name in ("trifit.export", "trifit.report"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args)

    monkeypatch.setattr(trifit.app.exports.importlib, "import_module", without_export)
    win = window
    win.open_image(sample_path("astronaut.png"))
    wait_loaded(qtbot, win)
    win.export_png(tmp_path / "out.png", 64)
    assert win.last_error[0] == "Export not available" and "trifit.export" in win.last_error[1]
    assert not (tmp_path / "out.png").exists()


def test_reset_applies_size_and_seed(qtbot, window):
    win = window
    win.open_image(sample_path("astronaut.png"))
    wait_loaded(qtbot, win)
    win.controls.size.setValue(32)
    win.controls.seed.setValue(5)
    win.reset_fit()
    qtbot.waitUntil(lambda: win.fit_info.width == 32, timeout=WAIT_MS)
    assert win.canvas.state.image_size == (32, 32)


def test_reset_applies_the_replicas_box(qtbot, window):
    # "auto" (0) is the fit's own choice; a number is the next fit's (Reset), as `fit --replicas` takes it
    from trifit.replicas import auto_replicas

    win = window
    assert win.controls.replicas.value() == 0 and win.controls.replicas.text() == "auto"
    win.open_image(sample_path("astronaut.png"))
    wait_loaded(qtbot, win)

    def replicas_now():
        return worker_call(qtbot, win, lambda f: (f.replicas, f.settings.replicas))

    auto = auto_replicas(win.worker.engine.adapter.get("type", ""), win.fit_info.width, win.fit_info.height,
                         win.controls.triangles.value(), "default")
    assert replicas_now() == (auto, auto)
    win.controls.replicas.setValue(3)
    assert win.controls.params().replicas == 3
    win.reset_fit()
    qtbot.waitUntil(lambda: replicas_now() == (3, 3), timeout=WAIT_MS)
    win._save_settings()  # (the next session's window starts with it)
    assert win.settings.value("params/replicas", type=int) == 3


def test_sharp_edges_box_fits_the_next_picture_for_crisp_pictures(qtbot, window):
    # unchecked: the probes choose the final sigma; checked (on Reset): `trifit fit --sharp`'s settings
    from trifit.export import SHARP_SETTINGS
    from trifit.fitloop import FitSettings

    win = window
    assert not win.controls.sharp.isChecked() and not win.controls.params().sharp
    win.open_image(sample_path("astronaut.png"))
    wait_loaded(qtbot, win)

    def settings_now():
        return worker_call(qtbot, win, lambda f: {k: getattr(f.settings, k) for k in SHARP_SETTINGS})

    default = FitSettings()
    assert settings_now() == {k: getattr(default, k) for k in SHARP_SETTINGS} != SHARP_SETTINGS
    win.controls.sharp.setChecked(True)
    assert win.controls.params().sharp
    win.reset_fit()
    qtbot.waitUntil(lambda: settings_now() == SHARP_SETTINGS, timeout=WAIT_MS)
    win._save_settings()  # (the next session's window starts with it)
    assert win.settings.value("params/sharp", type=bool) is True


def test_status_says_when_an_overgrown_fit_prunes_back(qtbot, window):
    from trifit.app.worker import Progress
    from trifit.fitter import StepStats

    asked = window.controls.triangles.value()
    for placed, expect in ((asked + 5, f"{asked} triangles (now {asked + 5}, pruning)"),
                           (asked - 3, f"{asked} triangles (now {asked - 3}, growing)"),
                           (asked, f"{asked} triangles")):
        stats = StepStats(iteration=10, iterations=5, loss=0.01, psnr=20.0, wall_s=0.1, it_per_s=50.0,
                          n_triangles=placed, sigma_px=1.0)
        window._on_progress(Progress(stats=stats, iterations=np.arange(6, 11), losses=np.full(5, 0.01), chunk=5))
        assert window.status_triangles.text() == expect


def test_a_gui_fit_writes_the_scene_the_cli_writes(qtbot, window, tmp_path, monkeypatch):
    # one run loop behind both front ends: equal settings and iterations, identical triangles
    from tqdm import tqdm

    from trifit.cli import main

    monkeypatch.setattr(tqdm, "monitor_interval", 0)  # (no tqdm monitor thread for the leak check)
    win = window
    win.controls.stop_iterations.setValue(90)
    win.open_image(sample_path("astronaut.png"), start=True)
    wait_loaded(qtbot, win)
    qtbot.waitUntil(lambda: "Stopped" in win.last_message, timeout=WAIT_MS)
    gui = worker_call(qtbot, win, lambda f: f.scene)
    out = tmp_path / "cli.json"
    assert main(["fit", sample_path("astronaut.png"), "--tris", str(TRIANGLES), "--size", str(SIZE),
                 "--iters", "90", "--seed", "0", "--backend", "gpu", "--quiet", "-o", str(out)]) == 0
    cli = trifit.Scene.load(out)
    assert gui.meta["iterations"] == cli.meta["iterations"] == 90
    assert gui.triangles.tobytes() == cli.triangles.tobytes() and gui.sigma == cli.sigma
    assert gui.background.tobytes() == cli.background.tobytes()


_DEVICE_RESET_SCRIPT = r"""
import sys, time, warnings
warnings.simplefilter("ignore")
import trifit.app  # (the PySide6 refcount guard first)
from PySide6 import QtCore, QtWidgets
import trifit
from trifit.app.window import MainWindow
from trifit.resources import sample_path

qapp = QtWidgets.QApplication([])
engine = trifit.Engine("gpu")
settings = QtCore.QSettings(sys.argv[1], QtCore.QSettings.Format.IniFormat)
settings.setValue("params/size", 48)
settings.setValue("params/triangles", 20)
win = MainWindow(engine, settings=settings)
win.resize(900, 500)
win.show()


def wait(cond, seconds=60.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end and not cond():
        qapp.processEvents()
        time.sleep(0.01)
    return cond()


def it():
    return win.last_stats.iteration if win.last_stats is not None else 0


win.open_image(sample_path("astronaut.png"), start=True)
assert wait(lambda: it() >= 20), "the fit did not start"
old = win.canvas
assert old.device is engine.device
if sys.argv[2] == "running":
    win.worker.submit(lambda f: f.inject_fault("device-lost"))
else:  # lost while paused: the canvas must not draw on it (wgpu-native aborts the process there)
    win.pause_fit()
    assert wait(lambda: not win.running), "the fit did not pause"
    cancelled = old.clock.cancelled
    engine.lose_device()
    assert not old.draw_now() and old.clock.cancelled > cancelled, "a draw on the lost device"
    win.start_fit()
assert wait(lambda: engine.device is not old.device), "the device was not replaced"
at = it()
assert wait(lambda: it() > at + 30), "the fit did not go on after the reset"
assert win.canvas is not old and win.canvas.device is engine.device, "the canvas stayed on the lost device"
pixels = win.canvas.snapshot()[..., :3]
h, w = pixels.shape[:2]
right = pixels[:, w // 2:]  # the render's pane (side by side)
assert right.std() > 5, f"the preview is blank after the reset (std {right.std():.2f})"
print("ok", it(), engine.counters()["submissions"] > 0)
win.close()
"""


@pytest.mark.parametrize("when", ["running", "paused"])
def test_the_preview_survives_a_device_reset(tmp_path, when):
    # in a subprocess: the lost device must not take the other tests' shared device with it
    import subprocess

    p = subprocess.run([sys.executable, "-c", _DEVICE_RESET_SCRIPT, str(tmp_path / "s.ini"), when],
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0 and p.stdout.startswith("ok"), p.stdout[-2000:] + p.stderr[-4000:]


def test_the_title_follows_a_live_count_change(qtbot, window):
    win = window
    win.open_image(sample_path("astronaut.png"))
    wait_loaded(qtbot, win)
    assert f"{TRIANGLES} triangles" in win.windowTitle()
    win.controls.triangles.setValue(TRIANGLES + 7)
    assert f"{TRIANGLES + 7} triangles" in win.windowTitle()


def test_space_starts_and_pauses_even_from_a_spin_box(qtbot, window):
    win = window
    win.open_image(sample_path("astronaut.png"))
    wait_loaded(qtbot, win)
    win.activateWindow()
    qtbot.waitActive(win)
    box = win.controls.triangles
    box.setFocus()
    qtbot.waitUntil(box.hasFocus, timeout=WAIT_MS)
    before = box.value()
    qtbot.keyClick(box, QtCore.Qt.Key.Key_Space)
    qtbot.waitUntil(lambda: win.running, timeout=WAIT_MS)
    qtbot.keyClick(box, QtCore.Qt.Key.Key_Space)
    qtbot.waitUntil(lambda: not win.running, timeout=WAIT_MS)
    assert box.value() == before  # the box took no keystroke


def test_sigma_takes_auto_typed_by_hand(qtbot, window):
    box = window.controls.sigma
    box.setValue(1.5)
    assert window.controls.sigma_px() == 1.5
    for typed in ("auto", "Auto", "a"):
        box.setValue(1.5)
        box.lineEdit().selectAll()
        qtbot.keyClicks(box.lineEdit(), typed)
        qtbot.keyClick(box.lineEdit(), QtCore.Qt.Key.Key_Return)
        assert window.controls.sigma_px() is None, typed  # back to the anneal
    box.lineEdit().selectAll()
    qtbot.keyClicks(box.lineEdit(), "0.7")
    qtbot.keyClick(box.lineEdit(), QtCore.Qt.Key.Key_Return)
    assert window.controls.sigma_px() == pytest.approx(0.7)


def test_growth_and_pruning_are_marked_on_the_plots(qtbot, window):
    from trifit.app.worker import Progress
    from trifit.fitter import StepStats

    plots = window.plots
    plots.clear()
    for it, count in ((10, 20), (20, 20), (30, 35), (40, 28), (50, 28)):
        stats = StepStats(iteration=it, iterations=10, loss=0.01, psnr=20.0, wall_s=0.1, it_per_s=50.0,
                          n_triangles=count, sigma_px=1.0)
        plots.add_progress(Progress(stats=stats, iterations=np.arange(it - 9, it + 1), losses=np.full(10, 0.01),
                                    chunk=10))
    marks = [(a.value(), a.pen.color().name()) for a, _ in plots.count_marks]
    assert marks == [(30, "#5cb85c"), (40, "#d9534f")]  # growth at 30, pruning at 40
    assert all(b in plots.psnr_plot.items for _, b in plots.count_marks)
    plots.clear()
    assert not plots.count_marks


# ---------------------------------------------------------------------- closing a fit not saved
def _fitted_and_paused(qtbot, win: MainWindow) -> int:
    win.open_image(sample_path("astronaut.png"))
    wait_loaded(qtbot, win)
    assert not win.unsaved  # a fresh fit: nothing to lose yet
    win.start_fit()
    wait_iterations(qtbot, win, 3)
    win.pause_fit()
    qtbot.waitUntil(lambda: not win.running, timeout=WAIT_MS)
    return worker_call(qtbot, win, lambda f: f.iteration)


def _saved(qtbot, win: MainWindow, path):
    win.save_scene(path)
    qtbot.waitUntil(lambda: path.exists() and not win.unsaved, timeout=WAIT_MS)
    return path


def test_closing_a_fit_changed_since_it_was_saved_asks_and_save_writes_it_then_closes(qtbot, asking, tmp_path):
    win = asking
    B = QtWidgets.QMessageBox.StandardButton
    at = _fitted_and_paused(qtbot, win)
    assert win.unsaved
    win.close()  # the question, not a close
    assert win.isVisible() and win.worker.alive
    answer_close(qtbot, win, B.Cancel)
    assert win.isVisible() and win.worker.alive and win.question_box is None
    win.scene_path = str(tmp_path / "kept.json")  # (as an earlier Ctrl+S would have set it: no file dialog)
    win.close()
    answer_close(qtbot, win, B.Save)
    qtbot.waitUntil(lambda: not win.isVisible(), timeout=WAIT_MS)
    assert not win.worker.alive
    assert trifit.Scene.load(tmp_path / "kept.json").meta["iterations"] == at


def test_a_saved_fit_closes_at_once_and_discard_drops_what_came_after(qtbot, asking, tmp_path):
    win = asking
    B = QtWidgets.QMessageBox.StandardButton
    at = _fitted_and_paused(qtbot, win)
    path = _saved(qtbot, win, tmp_path / "saved.json")
    win.start_fit()  # more iterations after the save: asked about again
    wait_iterations(qtbot, win, at + 5)
    win.pause_fit()
    qtbot.waitUntil(lambda: not win.running, timeout=WAIT_MS)
    assert win.unsaved
    win.close()
    answer_close(qtbot, win, B.Discard)
    qtbot.waitUntil(lambda: not win.isVisible(), timeout=WAIT_MS)
    assert not win.worker.alive
    assert trifit.Scene.load(path).meta["iterations"] == at  # the file as saved, nothing written after


def test_a_saved_and_paused_fit_closes_without_asking(qtbot, asking, tmp_path):
    win = asking
    _fitted_and_paused(qtbot, win)
    _saved(qtbot, win, tmp_path / "saved.json")
    win.close()
    assert not win.isVisible() and win.question_box is None and not win.worker.alive


def test_a_count_changed_on_a_saved_paused_fit_is_asked_about(qtbot, asking, tmp_path):
    """The count (or sigma) set while paused changes the scene a save writes at once."""
    win = asking
    _fitted_and_paused(qtbot, win)
    _saved(qtbot, win, tmp_path / "saved.json")
    with qtbot.waitSignal(win.worker.signals.applied, timeout=WAIT_MS):
        win.controls.triangles.setValue(win.controls.triangles.value() - 5)
    assert win.unsaved
    win.close()
    answer_close(qtbot, win, QtWidgets.QMessageBox.StandardButton.Discard)
    qtbot.waitUntil(lambda: not win.isVisible(), timeout=WAIT_MS)


def test_opening_another_picture_over_a_fit_not_saved_asks_first(qtbot, asking, tmp_path):
    """Open recent (as File > Open and a drop) replaces the fit only once its question is answered."""
    win = asking
    _fitted_and_paused(qtbot, win)
    astronaut, chelsea = (str(Path(sample_path(n)).resolve()) for n in ("astronaut.png", "chelsea.png"))
    win.settings.setValue("recent", [chelsea, astronaut])
    win._fill_recent_menu()  # (as the menu does when it is about to show)
    win.recent_menu.actions()[0].trigger()
    assert "before opening chelsea.png" in answer_close(qtbot, win, QtWidgets.QMessageBox.StandardButton.Cancel)
    qtbot.wait(300)
    assert win.fit_info.source == astronaut and win.unsaved  # nothing opened, nothing lost
    win.recent_menu.actions()[0].trigger()
    answer_close(qtbot, win, QtWidgets.QMessageBox.StandardButton.Discard)
    wait_loaded(qtbot, win, chelsea)
    assert not win.unsaved and win.isVisible()
    win._fill_recent_menu()
    win.recent_menu.actions()[1].trigger()  # a fresh fit, nothing to lose: no question
    wait_loaded(qtbot, win, astronaut)
    assert win.question_box is None
