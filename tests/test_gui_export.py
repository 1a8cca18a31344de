"""Picture exports from the window (app/picture_export.py, app/export_dialog.py) on lavapipe
under Xvfb: the file is the one ``trifit render`` writes, Cancel writes nothing, and a large
export leaves the fit running and its work off the GUI thread.

Run: ``xvfb-run -a pytest tests/test_gui_export.py``. Under CI=true a missing wgpu adapter is a
failure, not a skip.
"""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from conftest import answer_close, open_window  # noqa: E402
from PySide6 import QtCore, QtWidgets  # noqa: E402

import trifit.app  # noqa: E402,F401  (installs the PySide6 refcount guard first)
import trifit.export  # noqa: E402
from trifit.app.measure import StallMeter  # noqa: E402
from trifit.app.picture_export import TILE_SIDE  # noqa: E402
from trifit.app.window import MainWindow  # noqa: E402
from trifit.errors import AdapterError  # noqa: E402
from trifit.resources import sample_path  # noqa: E402

pytestmark = pytest.mark.gui

WAIT_MS = 20_000
LARGE_WIDTH = 4096     # the size that froze the window when an export was one worker job


# ---------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def engine(warm_engine):
    return warm_engine


@pytest.fixture
def folder(tmp_path):
    """An empty folder for the pictures (tmp_path holds the window's settings file)."""
    out = tmp_path / "pictures"
    out.mkdir()
    return out


@pytest.fixture
def window(qtbot, engine, gui_settings):
    yield from open_window(qtbot, engine, gui_settings)


def iteration(win: MainWindow) -> int:
    return win.last_stats.iteration if win.last_stats is not None else 0


def fitting(qtbot, win: MainWindow, iterations: int = 3) -> None:
    win.open_image(sample_path("astronaut.png"), start=True)
    qtbot.waitUntil(lambda: win.fit_info is not None and iteration(win) >= iterations, timeout=WAIT_MS)


def wait_ended(qtbot, job, timeout_ms: int = WAIT_MS) -> None:
    qtbot.waitUntil(lambda: not job.active, timeout=timeout_ms)


def reference_bytes(qtbot, win: MainWindow, job, path, monkeypatch) -> bytes:
    """``trifit.export.save_render`` of the scene the export read, at its size and edges, in
    tiles of the export's side (tiles of another size may differ by a rounding in a few pixels),
    rendered on the worker thread (the engine is the fit's: one thread at a time)."""
    monkeypatch.setattr(trifit.export, "TILE_MAX_PIXELS", TILE_SIDE * TILE_SIDE)
    W, H = job.size
    ended: list = []
    win.worker.submit(lambda fitter: trifit.export.save_render(job.scene, path, W, H, engine=fitter.engine,
                                                               edges=job.edges),
                      on_done=ended.append, on_error=lambda message: ended.append(f"failed: {message}"))
    qtbot.waitUntil(lambda: bool(ended), timeout=WAIT_MS)
    assert ended == [path], ended
    return path.read_bytes()


# ---------------------------------------------------------------------- the dialog, and what it writes
def test_the_dialog_previews_the_edges_and_writes_what_the_cli_writes(qtbot, window, folder, monkeypatch):
    win = window
    fitting(qtbot, win)
    fw, fh = win.fit_info.width, win.fit_info.height
    win.act_export_png.trigger()
    dialog = win.export_dialog
    qtbot.waitUntil(dialog.isVisible, timeout=WAIT_MS)

    # The size: a scale of the frame, or a width with the aspect kept; W x H is shown.
    dialog.by_scale_radio.setChecked(True)
    dialog.scale_box.setValue(10)
    assert f"{10 * fw} × {10 * fh}" in dialog.size_label.text()
    dialog.by_width_radio.setChecked(True)
    dialog.width_box.setValue(700)
    W, H = 700, round(700 * fh / fw)
    assert f"{W} × {H}" in dialog.size_label.text()

    # The preview (a worker job) shows the chosen edges: crisp and as-fitted differ.
    dialog.edge_buttons["crisp"].setChecked(True)
    assert not win.fit_info.crisp and dialog.sharp_hint.isVisible()  # (a fit for its own render: Sharp edges said)
    qtbot.waitUntil(lambda: dialog.preview_key == ((W, H), "crisp"), timeout=WAIT_MS)
    crisp = dialog.preview_pixels.copy()
    assert dialog.preview_label.pixmap() is not None and not dialog.preview_label.pixmap().isNull()
    dialog.edge_buttons["fit"].setChecked(True)
    qtbot.waitUntil(lambda: dialog.preview_key == ((W, H), "fit"), timeout=WAIT_MS)
    assert crisp.shape == dialog.preview_pixels.shape
    assert (crisp != dialog.preview_pixels).any(), "the preview does not show the edges chosen"
    assert not dialog.sharp_hint.isVisible()  # (the fit's own edges: nothing to say)

    # Paths that cannot work are refused in the dialog, before any work.
    assert dialog.path_edit.text().endswith("astronaut.trifit.png")  # never the source's own name
    a_folder = folder.parent / "named.png"
    a_folder.mkdir()
    for bad, says in ((folder / "missing" / "out.png", "does not exist"), (folder / "out.gif", ".gif"),
                      (folder, "suffix"), (a_folder, "is a folder"), (win.fit_info.source, "being fitted")):
        dialog.path_edit.setText(str(bad))
        dialog.export_button.click()
        assert dialog.isVisible() and dialog.error_label.isVisible(), bad
        assert says in dialog.error_label.text()
        assert win.picture_export is None
    assert list(folder.iterdir()) == []

    # An existing file is replaced when Export is pressed again for it.
    out = folder / "out.png"
    out.write_bytes(b"an older picture")
    dialog.path_edit.setText(str(out))
    dialog.export_button.click()
    assert dialog.isVisible() and "again to replace" in dialog.error_label.text()
    assert win.picture_export is None
    dialog.export_button.click()
    assert not dialog.isVisible(), "the dialog must be closed before the export works"
    job = win.picture_export
    assert job is not None and job.size == (W, H) and job.edges == "fit"
    wait_ended(qtbot, job)
    assert job.state == "done" and win.last_error is None, win.last_error
    assert job.total_tiles > 1  # tiled: the GUI's tile chain is what is compared
    assert out.read_bytes() == reference_bytes(qtbot, win, job, folder / "ref.png", monkeypatch)
    assert win.running, "the fit stopped for the export"

    # Crisp edges, a scale, another format: the same bytes as the engine's export.
    jpeg = win.export_picture(folder / "out.jpg", scale=9.0, edges="crisp")
    wait_ended(qtbot, jpeg)
    assert jpeg.state == "done" and jpeg.size == (9 * fw, 9 * fh)
    assert (folder / "out.jpg").read_bytes() == reference_bytes(qtbot, win, jpeg, folder / "ref.jpg", monkeypatch)
    assert sorted(p.name for p in folder.iterdir()) == ["out.jpg", "out.png", "ref.jpg", "ref.png"]


def test_a_fit_made_for_crisp_pictures_gets_no_hint(qtbot, window):
    """The window's Sharp edges box (checked, then Reset): the fit is made for crisp pictures, so
    the export dialog has nothing to suggest."""
    win = window
    win.controls.sharp.setChecked(True)
    fitting(qtbot, win)
    assert win.fit_info.crisp
    win.act_export_png.trigger()
    dialog = win.export_dialog
    qtbot.waitUntil(dialog.isVisible, timeout=WAIT_MS)
    dialog.edge_buttons["crisp"].setChecked(True)
    assert not dialog.sharp_hint.isVisible()
    dialog.reject()


# ---------------------------------------------------------------------- cancel
def test_cancel_writes_nothing_and_the_fit_goes_on(qtbot, window, folder):
    win = window
    fitting(qtbot, win)
    out = folder / "big.png"
    job = win.export_picture(out, width=LARGE_WIDTH)
    assert win.export_progress.isVisible()
    qtbot.waitUntil(lambda: job.done_tiles >= 2, timeout=WAIT_MS)
    with qtbot.waitSignal(job.cancelled, timeout=WAIT_MS):
        win.export_progress.cancel_button.click()
    assert job.state == "cancelled" and job.done_tiles < job.total_tiles
    assert not win.export_progress.isVisible()
    assert "cancelled" in win.last_message and win.last_error is None
    after = iteration(win)
    qtbot.waitUntil(lambda: iteration(win) >= after + 3, timeout=WAIT_MS)
    assert win.running

    # Cancelled while encoding: the encoded bytes are dropped.
    job = win.export_picture(out, width=1024)
    job.encoding.connect(job.cancel)
    with qtbot.waitSignal(job.cancelled, timeout=WAIT_MS):
        pass
    assert job.state == "cancelled"
    assert list(folder.iterdir()) == [], "a cancelled export left a file"
    assert win.running


# ---------------------------------------------------------------------- a large export
def test_a_large_export_leaves_the_fit_running_and_the_window_responsive(qtbot, window, folder, monkeypatch):
    """The window stays responsive because no export work runs on the GUI thread: the tiles render
    on the fit worker between its chunks, the encode and the write on a thread of their own. That
    is what this asserts. How late the event loop runs meanwhile is a measurement, printed here and
    benchmarked by ``python -m trifit.app.measure --export WIDTH`` (docs/PERFORMANCE.md); a bound on
    it in a unit test would fail on a loaded machine, not on a regression."""
    import threading

    import trifit.app.picture_export as picture_export

    gui_thread = threading.get_ident()
    tile_threads: set[int] = set()
    encode_threads: set[int] = set()
    real_iter_tiles, real_encode = trifit.export.iter_tiles, picture_export.encode_picture

    def iter_tiles(*args, **kwargs):
        for tile in real_iter_tiles(*args, **kwargs):
            tile_threads.add(threading.get_ident())  # the thread that advanced the generator
            yield tile

    def encode(*args, **kwargs):
        encode_threads.add(threading.get_ident())
        return real_encode(*args, **kwargs)

    monkeypatch.setattr(trifit.export, "iter_tiles", iter_tiles)
    monkeypatch.setattr(picture_export, "encode_picture", encode)
    win = window
    fitting(qtbot, win, iterations=5)
    stalls = StallMeter()
    stalls.begin()
    before = iteration(win)
    seen: list[int] = []  # the fit's iteration at each tile job
    out = folder / "large.png"
    job = win.export_picture(out, width=LARGE_WIDTH)
    job.progress.connect(lambda done, total: seen.append(iteration(win)))
    wait_ended(qtbot, job, timeout_ms=120_000)
    stalls.stop()
    assert job.state == "done", win.last_error
    advanced = iteration(win) - before
    print(f"\n{LARGE_WIDTH} px export: {job.seconds:.1f} s, {job.total_tiles} tiles; the fit advanced "
          f"{advanced} iterations; event-loop lateness p50 {stalls.p(50):.1f} ms, p99 {stalls.p(99):.1f} ms, "
          f"max {stalls.max_ms:.1f} ms over {len(stalls.gaps_ms)} beats (measured, not asserted)")
    from PIL import Image

    with Image.open(out) as im:
        assert im.size == job.size == (LARGE_WIDTH, LARGE_WIDTH * win.fit_info.height // win.fit_info.width)
    assert tile_threads and gui_thread not in tile_threads, "tiles rendered on the GUI thread"
    assert encode_threads and gui_thread not in encode_threads, "the picture was encoded on the GUI thread"
    assert tile_threads.isdisjoint(encode_threads), "the encode ran on the fit worker, stalling the fit"
    assert len(seen) > 2 and seen[-1] > seen[0], "the fit did not advance while the tiles rendered"
    assert advanced >= 10
    assert len(stalls.gaps_ms) > 0, "the event loop's heartbeat never ran during the export"
    assert win.running
    QtCore.QCoreApplication.processEvents()


# ---------------------------------------------------------------------- failures
def test_failures_are_said_in_a_dialog_and_leave_no_file(qtbot, window, folder, monkeypatch):
    win = window
    fitting(qtbot, win)

    def no_tiles(*args, **kwargs):
        raise AdapterError("cannot render these tiles")
        yield  # a generator, as iter_tiles is

    monkeypatch.setattr(trifit.export, "iter_tiles", no_tiles)
    job = win.export_picture(folder / "a.png", width=300)
    wait_ended(qtbot, job)
    assert job.state == "failed" and win.last_error[0] == "Export failed"
    assert "cannot render these tiles" in win.last_error[1]
    monkeypatch.undo()

    import trifit.app.picture_export as picture_export

    def full_disk(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(picture_export, "atomic_write_bytes", full_disk)
    win.last_error = None
    job = win.export_picture(folder / "b.png", width=300)
    wait_ended(qtbot, job)
    assert job.state == "failed" and win.last_error[0] == "Export failed"
    assert "No space left" in win.last_error[1] and "b.png" in win.last_error[1]
    assert list(folder.iterdir()) == []
    assert not win.export_progress.isVisible() and win.running


# ---------------------------------------------------------------------- closing with an export in progress
def test_closing_during_an_export_asks_and_close_when_done_writes_it_first(qtbot, asking, folder):
    win = asking
    B = QtWidgets.QMessageBox.StandardButton
    fitting(qtbot, win)
    win.pause_fit()
    qtbot.waitUntil(lambda: not win.running, timeout=WAIT_MS)
    win.save_scene(folder / "fit.json")  # (the fit's own question is not asked about here)
    qtbot.waitUntil(lambda: not win.unsaved, timeout=WAIT_MS)
    job = win.export_picture(folder / "big.png", width=LARGE_WIDTH)
    win.close()
    assert "big.png is not written yet" in answer_close(qtbot, win, B.Cancel)
    assert win.isVisible() and job.active
    win.close()
    answer_close(qtbot, win, B.Save)  # "Close when done"
    qtbot.waitUntil(lambda: not win.isVisible(), timeout=WAIT_MS)
    assert job.state == "done" and (folder / "big.png").exists() and not win.worker.alive


def test_stop_it_and_close_cancels_the_export_and_then_asks_about_the_fit(qtbot, asking, folder):
    win = asking
    B = QtWidgets.QMessageBox.StandardButton
    fitting(qtbot, win)
    job = win.export_picture(folder / "big.png", width=LARGE_WIDTH)
    win.close()
    answer_close(qtbot, win, B.Discard)  # "Stop it and close": then the fit, not saved, is asked about
    assert "has changed since it was last saved" in answer_close(qtbot, win, B.Discard)
    qtbot.waitUntil(lambda: not win.isVisible(), timeout=WAIT_MS)
    assert job.state == "cancelled" and not (folder / "big.png").exists() and not win.worker.alive
