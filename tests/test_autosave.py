"""Autosave and crash recovery (issue #7, "nothing lost"): app/session.py and its wiring.

The crash test runs the real app (``python -m trifit.app IMAGE --start``) in a subprocess, lets it
autosave, kills it with SIGKILL mid-fit, checks the files it left, then restores the session in
a window of this process. Run: ``xvfb-run -a pytest tests/test_autosave.py`` (like test_gui.py).
Nothing touches the real home: the data directory (TRIFIT_DATA_DIR) and the Qt settings
(XDG_CONFIG_HOME) of the subprocess live in the test's temporary folder.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

import shiboken6  # noqa: E402
from PySide6 import QtCore, QtWidgets  # noqa: E402

import trifit  # noqa: E402
import trifit.app  # noqa: E402,F401  (installs the PySide6 refcount guard first)
from trifit.app.session import SessionStore  # noqa: E402
from trifit.app.session_record import (  # noqa: E402
    CHECKPOINT_FILE,
    DATA_DIR_ENV,
    RESTORE_ENV,
    SCENE_FILE,
    SESSION_FILE,
    read_session_record,
)
from trifit.app.window import MainWindow  # noqa: E402
from trifit.app.worker import AutosaveSnapshot, FitParams  # noqa: E402
from trifit.resources import sample_path  # noqa: E402

pytestmark = pytest.mark.gui

REPO = Path(__file__).resolve().parents[1]
from conftest import GUI_SIZE as SIZE, GUI_TRIANGLES as TRIANGLES, answer_close, worker_call  # noqa: E402

INTERVAL_S = 0.5   # autosave period for the tests (the app's default is 30 s)
WAIT_MS = 20_000


# ---------------------------------------------------------------------- fixtures and helpers
@pytest.fixture(scope="module")
def engine(warm_engine):
    return warm_engine


@pytest.fixture
def settings(gui_settings):
    return gui_settings


@pytest.fixture(autouse=True)
def no_env_answer(monkeypatch):
    monkeypatch.delenv(RESTORE_ENV, raising=False)


def make_window(qtbot, engine, settings, store: SessionStore | None) -> MainWindow:
    win = MainWindow(engine, settings=settings, session=store)
    win.resize(900, 500)
    win.show()
    qtbot.waitExposed(win)
    return win


def temporaries(folder: Path) -> list[Path]:
    return sorted(folder.glob(".*.part"))


def fit_state(qtbot, win: MainWindow):
    """(iteration, scene) of the window's fitter, read on the worker thread."""
    return worker_call(qtbot, win, lambda f: (f.iteration, f.scene))


def psnr(image: np.ndarray, target: np.ndarray) -> float:
    return float(10 * np.log10(1 / np.mean((np.clip(image, 0, 1) - target) ** 2)))


def abandoned_session(root: Path, source: str, *, n: int = 9, iteration: int = 40) -> Path:
    """A session as a crashed window leaves it: written by SessionStore.save, lock released."""
    store = SessionStore(root)
    scene = trifit.Scene.random(n, SIZE, SIZE, seed=n)
    folder = store.save(AutosaveSnapshot(scene, source, FitParams(triangles=n, size=SIZE),
                                         trifit.StopConditions(), iteration, n, "gpu", True))
    store._lock.unlock()  # the process "died": its lock goes stale
    return folder


# ---------------------------------------------------------------------- kill -9, then restore
def test_kill_9_mid_fit_then_restore(qtbot, engine, settings, tmp_path):
    data = tmp_path / "data"
    root = data / "autosave"
    config = tmp_path / "config"
    # The subprocess's own Qt settings (XDG_CONFIG_HOME/trifit/trifit.conf): a small, fast fit.
    conf = QtCore.QSettings(str(config / "trifit" / "trifit.conf"), QtCore.QSettings.Format.IniFormat)
    conf.setValue("params/size", SIZE)
    conf.setValue("params/triangles", TRIANGLES)
    conf.sync()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
               XDG_CONFIG_HOME=str(config), XDG_DATA_HOME=str(tmp_path / "xdg-data"),
               TRIFIT_AUTOSAVE_SECONDS=str(INTERVAL_S))
    env[DATA_DIR_ENV] = str(data)
    env.pop(RESTORE_ENV, None)
    image = "resources/chelsea.png"  # relative to the app's working folder: saved as an absolute path
    log_path = tmp_path / "app.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "trifit.app", image, "--start"], cwd=REPO, env=env,
                                stdout=log_file, stderr=subprocess.STDOUT)
    try:
        # Wait for two autosaves of a running fit, the second further on: it saves periodically.
        seen: list[int] = []
        deadline = time.monotonic() + 60
        while len(seen) < 2:
            assert proc.poll() is None, f"the app exited early:\n{log_path.read_text(errors='replace')}"
            assert time.monotonic() < deadline, f"no autosaves:\n{log_path.read_text(errors='replace')}"
            for path in root.glob("session-*/" + SESSION_FILE):
                try:
                    record = json.loads(path.read_text("utf-8"))
                except (OSError, ValueError) as exc:  # atomic writes: never a half-written file
                    pytest.fail(f"unreadable autosave {path}: {exc}")
                if record["iteration"] > 0 and (not seen or record["iteration"] > seen[-1]):
                    seen.append(record["iteration"])
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)  # mid-fit: it autosaves every 0.5 s while fitting
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == -signal.SIGKILL

    # What the killed process left: one folder, complete files, nothing half-written.
    folders = list(root.glob("session-*"))
    assert len(folders) == 1, folders
    folder = folders[0]
    record = read_session_record(folder)
    saved = trifit.Scene.load(folder / SCENE_FILE)
    assert record["clean_exit"] is False and record["running"] is True
    assert record["pid"] == proc.pid
    assert record["source"] == str(REPO / image)
    assert record["iteration"] >= seen[-1] > seen[0] > 0
    assert record["params"]["size"] == SIZE and record["params"]["triangles"] == TRIANGLES
    assert record["params"]["replicas"] == 0  # (the Replicas box's "auto")
    assert record["params"]["sharp"] is False
    assert (saved.width, saved.height) == (record["width"], record["height"]) and saved.width == SIZE
    assert 1 <= saved.n_triangles <= TRIANGLES
    assert saved.meta["source"] == record["source"]
    # A temporary file of an interrupted write may remain (the kill can land mid-write); the next
    # start removes it. The target files above were whole either way.
    leftovers = temporaries(folder)

    # The next start (here: a window in this process on the same data directory) offers it.
    settings.setValue("params/size", 64)       # this window's own settings differ from the session's
    settings.setValue("params/triangles", 33)
    store = SessionStore(root, interval_s=INTERVAL_S)
    win = make_window(qtbot, engine, settings, store)
    try:
        win.begin(sample_path("astronaut.png"), start=False)
        offer = win.restore_offer
        assert offer is not None and offer.folder == folder
        assert not temporaries(folder), f"stale temporary files not removed: {leftovers}"
        text = offer.describe()
        assert "chelsea.png" in text and f"iteration {record['iteration']}" in text and f"{TRIANGLES}" in text
        box = win._restore_box
        assert box is not None and box.isVisible() and "Restore" in box.text()
        assert win.fit_info is None  # nothing opened while the question is up

        box.button(QtWidgets.QMessageBox.StandardButton.Yes).click()  # what a person does
        assert win.restore_offer is None
        assert not (shiboken6.isValid(box) and box.isVisible())
        qtbot.waitUntil(lambda: win.fit_info is not None, timeout=WAIT_MS)
        assert win.fit_info.source == record["source"]
        assert win.fit_info.triangles == TRIANGLES
        assert (win.fit_info.width, win.fit_info.height) == (saved.width, saved.height)
        assert (win.controls.params().size, win.controls.params().triangles) == (SIZE, TRIANGLES)
        assert win.restored is offer

        # The fit resumes where it was: its iteration, sigma, scene and PSNR (from the checkpoint).
        assert (folder / CHECKPOINT_FILE).is_file() and offer.checkpoint is not None
        iteration, scene, target, history_len, _ = worker_call(
            qtbot, win, lambda f: (f.iteration, f.scene, f.target.copy(), len(f.history), f.strategy.name))
        assert iteration == record["iteration"] > 0
        assert history_len == iteration  # the loss curve goes on from where it was
        assert scene.n_triangles == saved.n_triangles
        assert scene.sigma == pytest.approx(saved.sigma, rel=1e-6)
        np.testing.assert_allclose(scene.triangles, saved.triangles, atol=1e-6)
        psnr_saved = psnr(engine.render(saved), target)
        psnr_restored = psnr(engine.render(scene), target)
        assert abs(psnr_restored - psnr_saved) <= 0.1, (psnr_saved, psnr_restored)

        # The restored fit runs and autosaves into the adopted folder.
        win.start_fit()
        qtbot.waitUntil(lambda: win.last_autosave is not None, timeout=WAIT_MS)
        assert Path(win.last_autosave[0]) == folder
        assert read_session_record(folder)["pid"] == os.getpid()
    finally:
        win.close()
    # A normal quit deletes the autosave: the next start offers nothing.
    assert not folder.exists()
    assert SessionStore(root).find_crashed() == []


# ---------------------------------------------------------------------- a normal quit
def test_clean_quit_leaves_no_restore_offer(qtbot, engine, settings, tmp_path):
    root = tmp_path / "autosave"
    source = sample_path("chelsea.png")
    win = make_window(qtbot, engine, settings, SessionStore(root, interval_s=INTERVAL_S))
    try:
        win.begin(source, start=True)
        assert win.restore_offer is None
        qtbot.waitUntil(lambda: win.last_autosave is not None, timeout=WAIT_MS)
        folder = Path(win.last_autosave[0])
        assert read_session_record(folder)["clean_exit"] is False
        # While the window lives its session is not a crashed one, for any other trifit.
        assert SessionStore(root).find_crashed() == []
        assert folder.exists()

        # Pausing saves what the fit has at once (not a period later).
        win.pause_fit()
        qtbot.waitUntil(lambda: not win.running, timeout=WAIT_MS)
        paused_at, _ = fit_state(qtbot, win)
        qtbot.waitUntil(lambda: read_session_record(folder)["iteration"] == paused_at, timeout=WAIT_MS)
    finally:
        win.close()
    assert not folder.exists()
    assert SessionStore(root).find_crashed() == []

    win2 = make_window(qtbot, engine, settings, SessionStore(root, interval_s=INTERVAL_S))
    try:
        win2.begin(source)
        assert win2.restore_offer is None
        qtbot.waitUntil(lambda: win2.fit_info is not None, timeout=WAIT_MS)
        assert win2.fit_info.source == source
    finally:
        win2.close()


# ---------------------------------------------------------------------- damaged autosaves
def test_damaged_autosaves_are_ignored(qtbot, engine, settings, tmp_path, caplog, monkeypatch):
    root = tmp_path / "autosave"
    source = sample_path("chelsea.png")

    def damage(name: str, session_text: str | None = None, scene_text: str | None = None) -> Path:
        folder = abandoned_session(root, source)
        renamed = folder.with_name(f"session-{name}")
        folder.rename(renamed)
        if session_text is not None:
            (renamed / SESSION_FILE).write_text(session_text)
        if scene_text is not None:
            (renamed / SCENE_FILE).write_text(scene_text)
        return renamed

    good_record = (abandoned_session(root, source) / SESSION_FILE).read_text()
    for folder in list(root.glob("session-*")):
        folder.rename(folder.with_name("session-0-good"))
    damage("1-garbage", session_text="{not json")
    damage("2-truncated-scene", scene_text='{"format": "trifit-scene", "version": 1, "wid')
    damage("3-wrong-types", session_text=good_record.replace('"triangles": 9', '"triangles": "many"'))
    damage("4-not-a-session", session_text="[1, 2, 3]")
    (root / "session-5-empty").mkdir()
    (root / "session-5-empty" / ".session.json.x1.part").write_text("half")
    gone = damage("6-image-gone", session_text=good_record.replace(source, str(tmp_path / "gone.png")))
    damage("7-clean", session_text=good_record.replace('"clean_exit": false', '"clean_exit": true'))

    with caplog.at_level(logging.WARNING, logger="trifit.app"):
        found = SessionStore(root).find_crashed()
    assert [c.folder.name for c in found] == ["session-0-good"]
    for c in found:
        c.lock.unlock()
    warnings = caplog.text
    assert warnings.count("ignoring a damaged autosave") == 4
    assert "gone.png is gone" in warnings
    names = sorted(p.name for p in root.iterdir())
    assert names == ["damaged-1-garbage", "damaged-2-truncated-scene", "damaged-3-wrong-types",
                     "damaged-4-not-a-session", "session-0-good", "session-6-image-gone"]
    assert gone.exists()  # its scene may still matter to the user: left alone

    # A start with TRIFIT_RESTORE=no: the good one is deleted, the start-up image opens.
    monkeypatch.setenv(RESTORE_ENV, "no")
    win = make_window(qtbot, engine, settings, SessionStore(root, interval_s=INTERVAL_S))
    try:
        win.begin(source)
        assert win.restore_offer is None and win.restored is None
        qtbot.waitUntil(lambda: win.fit_info is not None, timeout=WAIT_MS)
        assert win.fit_info.source == source
        assert not (root / "session-0-good").exists()
        assert not any(isinstance(w, QtWidgets.QMessageBox) and w.isVisible()
                       for w in win.findChildren(QtWidgets.QMessageBox))
    finally:
        win.close()


def test_restore_answered_by_environment(qtbot, engine, settings, tmp_path, monkeypatch):
    root = tmp_path / "autosave"
    folder = abandoned_session(root, sample_path("chelsea.png"), n=7, iteration=123)
    saved = trifit.Scene.load(folder / SCENE_FILE)
    monkeypatch.setenv(RESTORE_ENV, "yes")
    win = make_window(qtbot, engine, settings, SessionStore(root, interval_s=INTERVAL_S))
    try:
        win.begin(sample_path("astronaut.png"), start=True)  # restored, and it runs (--start)
        assert win.restore_offer is None and win.restored is not None
        assert not any(isinstance(w, QtWidgets.QMessageBox) for w in win.findChildren(QtWidgets.QMessageBox))
        qtbot.waitUntil(lambda: win.fit_info is not None, timeout=WAIT_MS)
        assert win.fit_info.source == sample_path("chelsea.png") and win.fit_info.triangles == 7
        qtbot.waitUntil(lambda: win.last_stats is not None and win.last_stats.iteration > 0, timeout=WAIT_MS)
        assert win.last_stats.n_triangles == saved.n_triangles == 7
        assert "iteration 123" in win.last_message
    finally:
        win.close()
    assert not folder.exists()


def test_failed_restore_keeps_the_autosave(qtbot, engine, settings, tmp_path, monkeypatch):
    # The image is there but no longer readable: the restore fails with a message, and the
    # autosave stays for a later start (a clean quit must not delete it).
    root = tmp_path / "autosave"
    image = tmp_path / "picture.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\nno longer a picture")
    folder = abandoned_session(root, str(image))
    monkeypatch.setenv(RESTORE_ENV, "yes")
    win = make_window(qtbot, engine, settings, SessionStore(root, interval_s=INTERVAL_S))
    try:
        win.begin(sample_path("astronaut.png"))
        qtbot.waitUntil(lambda: win.last_error is not None, timeout=WAIT_MS)
        assert "picture.png" in win.last_error[1]
    finally:
        win.close()
    assert (folder / SESSION_FILE).exists()
    found = SessionStore(root).find_crashed()
    assert [c.folder for c in found] == [folder]
    found[0].lock.unlock()


def test_unusable_checkpoint_restores_from_the_scene(qtbot, engine, settings, tmp_path, monkeypatch, caplog):
    """A checkpoint that is damaged, or of another iteration than the record (a kill between the
    writes), is ignored with a log line: the restore starts from the saved scene instead."""
    from trifit.checkpoint import save_checkpoint

    root = tmp_path / "autosave"
    source = sample_path("chelsea.png")
    damaged = abandoned_session(root, source, n=7, iteration=40)
    (damaged / CHECKPOINT_FILE).write_bytes(b"PK\x03\x04 not a checkpoint")
    stale_root = tmp_path / "stale"
    stale = abandoned_session(stale_root, source, n=7, iteration=40)
    f = trifit.Fitter(source, triangles=7, size=SIZE, engine=engine)
    f.step(3)
    save_checkpoint(f.checkpoint(), stale / CHECKPOINT_FILE)  # iteration 3, the record says 40
    with caplog.at_level(logging.WARNING, logger="trifit.app"):
        for where in (root, stale_root):
            found = SessionStore(where).find_crashed()
            assert len(found) == 1 and found[0].checkpoint is None
            found[0].lock.unlock()
    assert sum("ignoring the autosave's checkpoint" in r.getMessage() for r in caplog.records) == 2
    monkeypatch.setenv(RESTORE_ENV, "yes")
    win = make_window(qtbot, engine, settings, SessionStore(root, interval_s=INTERVAL_S))
    try:
        win.begin(sample_path("astronaut.png"), start=False)
        qtbot.waitUntil(lambda: win.fit_info is not None, timeout=WAIT_MS)
        iteration, scene = fit_state(qtbot, win)
        assert iteration == 0 and scene.n_triangles == 7  # from the scene, as a refit
    finally:
        win.close()


def test_a_session_records_replicas_and_older_records_read_as_auto():
    from trifit.app.session_record import SessionDamaged, params_from_record

    params, _ = params_from_record({"params": {"triangles": 10, "size": 64, "replicas": 3}})
    assert params.replicas == 3
    params, _ = params_from_record({"params": {"triangles": 10, "size": 64}})  # (a record from before the box)
    assert params.replicas == 0
    with pytest.raises(SessionDamaged, match="params.replicas is out of range"):
        params_from_record({"params": {"triangles": 10, "size": 64, "replicas": 9}})


def test_a_session_records_sharp_edges_and_older_records_read_as_off():
    from trifit.app.session_record import SessionDamaged, params_from_record

    assert params_from_record({"params": {"triangles": 10, "size": 64, "sharp": True}})[0].sharp is True
    assert params_from_record({"params": {"triangles": 10, "size": 64}})[0].sharp is False
    with pytest.raises(SessionDamaged, match="params.sharp must be true or false"):
        params_from_record({"params": {"triangles": 10, "size": 64, "sharp": 1}})


def test_a_restored_fit_is_not_closed_without_asking(qtbot, engine, settings, tmp_path, monkeypatch):
    """A restored fit lives only in the autosave, which a normal close removes: closing it asks,
    even paused and not moved on since."""
    root = tmp_path / "autosave"
    folder = abandoned_session(root, sample_path("chelsea.png"), n=7, iteration=123)
    monkeypatch.setenv(RESTORE_ENV, "yes")
    win = make_window(qtbot, engine, settings, SessionStore(root, interval_s=INTERVAL_S))
    win.ask_to_save = True
    try:
        win.begin(sample_path("astronaut.png"), start=False)
        qtbot.waitUntil(lambda: win.fit_info is not None, timeout=WAIT_MS)
        assert win.unsaved and not win.running
        win.close()
        answer_close(qtbot, win, QtWidgets.QMessageBox.StandardButton.Cancel)
        assert win.isVisible() and folder.exists()
        win.close()
        answer_close(qtbot, win, QtWidgets.QMessageBox.StandardButton.Discard)
        qtbot.waitUntil(lambda: not win.isVisible(), timeout=WAIT_MS)
    finally:
        win.ask_to_save = False
        win.close()
    assert not folder.exists()  # discarded: the clean quit removed it
