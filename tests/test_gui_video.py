"""A clip in the window (issue #21) on lavapipe under Xvfb: File > Open takes a video, the worker
fits its frames in order through the engine's frame loop (Pause and Start between chunks), the
live view shows each frame's target and the status bar counts the frames, File > Export > Video
writes the clip -- the same bytes as `trifit video` from the same settings -- and Cancel writes
nothing; an unreadable video or one with no frames is said in a dialog.

The clip is made here (tests/clips.py): 10 frames of 64x48 at 25 frames/s with a sound track.
Run: ``xvfb-run -a pytest tests/test_gui_video.py``. Under CI=true a missing wgpu adapter or PyAV
is a failure, not a skip.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from clips import assert_same_video, av_or_fail, moving_disc, read_video, two_shots, write_video  # noqa: E402
from conftest import GUI_SIZE, GUI_TRIANGLES, answer_close, open_window  # noqa: E402
from PySide6 import QtWidgets  # noqa: E402

import trifit.app  # noqa: E402,F401  (installs the PySide6 refcount guard first)
from trifit.app.window import MainWindow  # noqa: E402
from trifit.cli import main  # noqa: E402

pytestmark = pytest.mark.gui

WAIT_MS = 30_000
W, H, N, RATE = 64, 48, 10, 25
FIRST, EACH = 60, 12        # iterations of the first frame, then of each later one
CUT = 6                     # cut.mp4's new shot starts at this frame


@pytest.fixture(scope="module")
def av():
    return av_or_fail()


@pytest.fixture(scope="module")
def clip(tmp_path_factory, av):
    d = tmp_path_factory.mktemp("gui-clip")
    write_video(av, d / "clip.mp4", moving_disc(N, W, H)[0], RATE)
    write_video(av, d / "cut.mp4", two_shots(CUT, N, W, H, seed=2), RATE, audio=False)
    (d / "junk.mp4").write_bytes(np.random.default_rng(1).bytes(3000))
    with av.open(str(d / "empty.mkv"), "w") as c:  # a container with a video stream and no frame
        s = c.add_stream("libx264", rate=RATE)
        s.width, s.height, s.pix_fmt = W, H, "yuv420p"
        c.start_encoding()
    return d


@pytest.fixture
def window(qtbot, warm_engine, gui_settings):
    yield from open_window(qtbot, warm_engine, gui_settings)


def test_a_clip_is_fitted_frame_by_frame_and_exported_as_the_command_writes_it(qtbot, window, clip, av, tmp_path,
                                                                               monkeypatch):
    from tqdm import tqdm

    monkeypatch.setattr(tqdm, "monitor_interval", 0)  # (no tqdm monitor thread for the leak check)
    win: MainWindow = window
    folder = tmp_path / "videos"  # (tmp_path holds the window's settings file)
    folder.mkdir()
    win.controls.first_frame_iters.setValue(FIRST)
    win.controls.iters_per_frame.setValue(EACH)
    started, shown = [], []
    win.worker.signals.frame_started.connect(lambda k, n, shot, target: started.append((k, n)))
    set_target = win.canvas.set_target
    win.canvas.set_target = lambda pixels, keep_render=False: (shown.append(pixels), set_target(pixels, keep_render))

    win.open_file(clip / "clip.mp4", start=True)  # the path File > Open and a drop take
    qtbot.waitUntil(lambda: win.clip is not None and len(win.clip_scenes) >= 3, timeout=WAIT_MS)
    assert win.controls.video_group.isVisible() and win.status_frame.isVisible()
    assert win.act_export_video.isEnabled()

    # Pause and Start between chunks: the clip waits, then goes on where it was.
    win.pause_fit()
    qtbot.waitUntil(lambda: not win.running, timeout=WAIT_MS)
    held, counter = len(win.clip_scenes), win.status_frame.text()
    qtbot.wait(300)
    assert len(win.clip_scenes) == held and win.status_frame.text() == counter
    win.start_fit()

    # (the worker pauses, then says why: the two signals can reach the window in separate turns)
    qtbot.waitUntil(lambda: len(win.clip_scenes) == N and not win.running and "Stopped" in win.last_message,
                    timeout=WAIT_MS)
    assert started == [(k, N) for k in range(N)]
    assert win.status_frame.text() == f"frame {N} / {N}"
    assert "end of the clip" in win.last_message and win.last_error is None
    assert [s.extra["meta"]["video"]["frame"] for s in win.clip_scenes] == list(range(N))
    # the live view's target was each frame's (the disc moves from one to the next)
    assert len(shown) == N and all(np.abs(a - b).max() > 0.1 for a, b in zip(shown, shown[1:]))
    win.start_fit()  # the clip is done: Start says so and stays paused
    qtbot.waitUntil(lambda: win.last_message.count("end of the clip") == 1 and not win.running, timeout=WAIT_MS)

    # Cancel writes nothing.
    job = win.export_video(folder / "cancelled.mp4")
    job.cancel()
    qtbot.waitUntil(lambda: not job.active, timeout=WAIT_MS)
    assert job.state == "cancelled" and list(folder.iterdir()) == []

    # The export: every frame at the clip's size and rate, with its sound -- what the command writes.
    out = folder / "window.mp4"
    job = win.export_video(out)
    assert win.export_progress.isVisible()
    qtbot.waitUntil(lambda: not job.active, timeout=WAIT_MS)
    assert job.state == "done", win.last_error
    frames, rate, audio = read_video(av, out)
    assert frames.shape == (N, H, W, 3) and rate == RATE and audio == ["aac"]
    assert not win.export_progress.isVisible()
    assert main(["video", str(clip / "clip.mp4"), "-o", str(folder / "cli.mp4"), "--tris", str(GUI_TRIANGLES),
                 "--size", str(GUI_SIZE), "--first-frame-iters", str(FIRST), "--iters-per-frame", str(EACH),
                 "--backend", "gpu", "--quiet"]) == 0
    assert_same_video(av, out, folder / "cli.mp4")


@pytest.mark.parametrize("name, says", [("junk.mp4", "not a readable video"), ("empty.mkv", "no video frames")])
def test_a_bad_video_is_said_in_a_dialog(qtbot, window, clip, name, says):
    win: MainWindow = window
    win.open_file(clip / name, start=True)
    qtbot.waitUntil(lambda: win.last_error is not None, timeout=WAIT_MS)
    title, message = win.last_error
    assert title == "Cannot open video" and says in message and name in message
    assert win.fit_info is None and win.clip is None and not win.running
    assert not win.controls.video_group.isVisible()


def test_live_changes_reach_a_running_clip_and_reset_starts_it_over(qtbot, window, clip):
    win: MainWindow = window
    win.controls.first_frame_iters.setValue(FIRST)
    win.controls.iters_per_frame.setValue(EACH)
    win.open_file(clip / "clip.mp4", start=True)
    qtbot.waitUntil(lambda: len(win.clip_scenes) >= 2, timeout=WAIT_MS)
    assert win.clip_scenes[-1].n_triangles == GUI_TRIANGLES
    win.controls.triangles.setValue(GUI_TRIANGLES - 8)  # between two chunks of the frame in progress
    qtbot.waitUntil(lambda: win.clip_scenes[-1].n_triangles == GUI_TRIANGLES - 8, timeout=WAIT_MS)
    assert win.running and len(win.clip_scenes) < N

    win.controls.iters_per_frame.setValue(EACH + 3)
    win.reset_fit()  # the clip from its first frame, with the Video group's iterations
    qtbot.waitUntil(lambda: win.status_frame.text() == f"frame 1 / {N}" and not win.clip_scenes, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: len(win.clip_scenes) >= 2, timeout=WAIT_MS)
    assert win.clip_scenes[1].extra["meta"]["video"]["iters_per_frame"] == EACH + 3
    assert win.clip_scenes[1].extra["meta"]["iterations"] == FIRST + EACH + 3


def test_the_steady_control_fits_the_clip_as_the_command_does(qtbot, window, clip, tmp_path, monkeypatch):
    from tqdm import tqdm

    from trifit import Scene

    monkeypatch.setattr(tqdm, "monitor_interval", 0)  # (no tqdm monitor thread for the leak check)

    win: MainWindow = window
    win.controls.first_frame_iters.setValue(FIRST)
    win.controls.iters_per_frame.setValue(EACH)
    win.controls.steady.setValue(1.0)
    assert win.controls.video_params().steady == 1.0
    win.open_file(clip / "clip.mp4", start=True)
    qtbot.waitUntil(lambda: len(win.clip_scenes) == N and not win.running, timeout=WAIT_MS)
    assert all(s.extra["meta"]["video"].get("steady") == 1.0 for s in win.clip_scenes[1:])

    def command(steady: str) -> list:
        scenes = tmp_path / f"scenes-{steady}"
        assert main(["video", str(clip / "clip.mp4"), "-o", str(tmp_path / f"out-{steady}"), "--tris",
                     str(GUI_TRIANGLES), "--size", str(GUI_SIZE), "--first-frame-iters", str(FIRST),
                     "--iters-per-frame", str(EACH), "--steady", steady, "--scenes", str(scenes),
                     "--backend", "gpu", "--quiet"]) == 0
        return [Scene.load(scenes / f"frame_{k:04d}.trifit.json") for k in range(N)]

    steady, free = command("1"), command("0")
    for got, want in zip(win.clip_scenes, steady):  # the window's fit is the command's, to the bit
        assert got.triangles.tobytes() == want.triangles.tobytes() and got.sigma == want.sigma
    assert steady[-1].triangles.tobytes() != free[-1].triangles.tobytes()  # (the term changed the fit)


def test_a_new_shot_gets_a_fit_of_its_own_in_the_window_as_in_the_command(qtbot, window, clip, tmp_path,
                                                                          monkeypatch):
    from tqdm import tqdm

    from trifit import Scene
    from trifit.shots import shot_seed

    monkeypatch.setattr(tqdm, "monitor_interval", 0)  # (no tqdm monitor thread for the leak check)
    win: MainWindow = window
    win.controls.first_frame_iters.setValue(FIRST)
    win.controls.iters_per_frame.setValue(EACH)
    shots = []
    win.worker.signals.frame_started.connect(lambda k, n, shot, target: shots.append(shot))
    win.open_file(clip / "cut.mp4", start=True)
    # (the worker pauses, then says why: the two signals can reach the window in separate turns)
    qtbot.waitUntil(lambda: len(win.clip_scenes) == N and not win.running and "Stopped" in win.last_message,
                    timeout=WAIT_MS)
    assert win.last_error is None and "end of the clip" in win.last_message
    assert shots == [0] * CUT + [CUT] * (N - CUT)  # each frame as it began: where its shot began
    assert win.status_frame.text() == f"frame {N} / {N}, a new shot from frame {CUT + 1}"
    metas = [s.extra["meta"] for s in win.clip_scenes]
    assert [m["video"].get("shot") for m in metas] == [None] * CUT + [CUT] * (N - CUT)
    assert [m["iterations"] for m in metas[CUT - 1:CUT + 2]] == [FIRST + (CUT - 1) * EACH, FIRST, FIRST + EACH]
    assert metas[CUT]["seed"] == shot_seed(metas[0]["seed"], CUT)

    scenes = tmp_path / "scenes"
    assert main(["video", str(clip / "cut.mp4"), "-o", str(tmp_path / "out"), "--tris", str(GUI_TRIANGLES),
                 "--size", str(GUI_SIZE), "--first-frame-iters", str(FIRST), "--iters-per-frame", str(EACH),
                 "--scenes", str(scenes), "--backend", "gpu", "--quiet"]) == 0
    for k, got in enumerate(win.clip_scenes):  # the window's fit is the command's, to the bit, on both sides of the cut
        want = Scene.load(scenes / f"frame_{k:04d}.trifit.json")
        assert got.triangles.tobytes() == want.triangles.tobytes() and got.sigma == want.sigma, k


# ---------------------------------------------------------------------- closing a clip not exported
def _frames_fitted(qtbot, win: MainWindow, clip, n: int) -> None:
    win.controls.first_frame_iters.setValue(FIRST)
    win.controls.iters_per_frame.setValue(EACH)
    win.open_file(clip / "clip.mp4", start=True)
    qtbot.waitUntil(lambda: win.clip is not None and len(win.clip_scenes) >= n, timeout=WAIT_MS)


def test_closing_a_clip_with_frames_not_exported_asks_and_export_writes_them_then_closes(qtbot, asking, clip, av,
                                                                                        tmp_path, monkeypatch):
    win = asking
    B = QtWidgets.QMessageBox.StandardButton
    _frames_fitted(qtbot, win, clip, 2)
    win.close()  # the question, not a close; the fit goes on meanwhile
    assert "not in a video exported since" in answer_close(qtbot, win, B.Cancel)
    assert win.isVisible() and win.worker.alive
    out = tmp_path / "kept.mp4"
    monkeypatch.setattr(win, "_ask_save_path", lambda *a: str(out))  # (the file dialog's answer)
    win.close()
    asked = len(win.clip_scenes)
    answer_close(qtbot, win, B.Save)  # "Export video…": the fit pauses, the video is written, then the close
    qtbot.waitUntil(lambda: not win.isVisible(), timeout=WAIT_MS)
    assert not win.worker.alive and win.last_error is None
    frames, rate, _ = read_video(av, out)
    assert asked <= len(frames) <= len(win.clip_scenes) and rate == RATE


def test_a_clip_exported_closes_at_once_and_discard_drops_frames_fitted_after(qtbot, asking, clip, tmp_path):
    win = asking
    B = QtWidgets.QMessageBox.StandardButton
    _frames_fitted(qtbot, win, clip, 2)
    win.pause_fit()
    qtbot.waitUntil(lambda: not win.running, timeout=WAIT_MS)
    job = win.export_video(tmp_path / "by-hand.mp4")
    qtbot.waitUntil(lambda: not job.active, timeout=WAIT_MS)
    assert job.state == "done" and win.clip_exported == len(win.clip_scenes)
    assert not win.close_needs_answer()  # every fitted frame is in the video
    done = len(win.clip_scenes)
    win.start_fit()  # a frame more: asked about again
    qtbot.waitUntil(lambda: len(win.clip_scenes) > done, timeout=WAIT_MS)
    win.close()
    answer_close(qtbot, win, B.Discard)
    qtbot.waitUntil(lambda: not win.isVisible(), timeout=WAIT_MS)
    assert not win.worker.alive and sorted(p.name for p in tmp_path.glob("*.mp4")) == ["by-hand.mp4"]
