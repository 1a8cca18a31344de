"""The fit animation spaces its frames by visible change: dense at first, gaps growing
geometrically -- over a planned number of iterations, or as the fit goes on when its length is
unknown (a time limit) -- never more than ``max_frames`` held, the final frame present and held."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from trifit.export import AnimationRecorder

HOLD_MS, FRAME_MS = 1500, 80


def _frame(iteration: int) -> np.ndarray:
    """A frame told apart from every other (a GIF writer merges identical neighbours)."""
    img = np.zeros((6, 8, 3), np.uint8)
    img[..., 0], img[..., 1], img[..., 2] = iteration % 256, (iteration // 256) % 256, 90
    return img


def _record(rec: AnimationRecorder, last: int, chunk: int | None = None, final: bool = True) -> list[int]:
    """Run a pretend fit to iteration ``last`` as the CLI does: chunks that end where the next
    frame is due (at most ``chunk`` iterations), or every iteration checked (``chunk=None``).
    Returns how many frames were held after each capture."""
    held = []
    it = 0
    rec.add_frame(_frame(it), it)
    while it < last:
        it = min(last, it + (min(rec.until_due(it), chunk) if chunk else 1))
        if rec.due(it):
            rec.add_frame(_frame(it), it)
            held.append(len(rec.frames))
    if final and rec.iterations[-1] != last:  # the CLI's capture(force=True)
        rec.add_frame(_frame(last), last)
    return held


def _check_spacing(its: list[int]) -> np.ndarray:
    gaps = np.diff(its)
    assert its == sorted(set(its)), "frame iterations must increase"
    assert np.all(np.diff(gaps) >= 0), f"gaps must never shrink: {gaps.tolist()}"
    assert gaps[-1] >= 20 * gaps[0], gaps.tolist()
    return gaps


@pytest.mark.parametrize("total", [600, 5000, 200_000])
def test_frames_are_log_spaced_over_the_planned_iterations(tmp_path, total):
    rec = AnimationRecorder(tmp_path / "a.gif", total=total, max_side=16)
    _record(rec, total)
    its = rec.iterations
    gaps = _check_spacing(its)
    assert its[0] == 0 and its[-1] == total  # the first and the planned last
    assert 60 <= len(its) <= 80 <= rec.max_frames
    assert its[:10] == list(range(10))  # the first frames: one per iteration
    assert sum(i <= total // 20 for i in its) >= len(its) // 3  # a third of them in the first 5%
    assert np.median(gaps) < total / len(its)  # denser than evenly spaced where it matters

    rec.save()
    with Image.open(tmp_path / "a.gif") as im:
        assert im.n_frames == len(its)
        durations = []
        for k in range(im.n_frames):
            im.seek(k)
            durations.append(im.info["duration"])
    assert durations[:-1] == [FRAME_MS] * (len(its) - 1) and durations[-1] == HOLD_MS  # the final frame held


def test_frames_land_on_their_iterations_when_chunks_follow_until_due(tmp_path):
    every_iteration = AnimationRecorder(tmp_path / "a.gif", total=3000)
    _record(every_iteration, 3000)
    chunked = AnimationRecorder(tmp_path / "b.gif", total=3000)
    _record(chunked, 3000, chunk=100)
    assert chunked.iterations == every_iteration.iterations
    assert max(np.diff(chunked.iterations)) > 100  # gaps wider than a chunk are reached in several


def test_a_short_fit_gets_every_iteration(tmp_path):
    rec = AnimationRecorder(tmp_path / "a.gif", total=30)
    _record(rec, 30)
    assert rec.iterations == list(range(31))


def test_the_final_picture_holds_its_time_when_the_last_frames_show_the_same(tmp_path):
    """A fit that stopped changing (at the animation's size) before its end: the frames before the
    last that show the same picture are left out, so the hold is hold_ms, not hold_ms plus their
    time (a GIF writer merges identical neighbours)."""
    rec = AnimationRecorder(tmp_path / "a.gif", total=30)
    for it in range(5):
        rec.add_frame(_frame(it), it)
    for it in range(5, 8):
        rec.add_frame(_frame(4), it)  # the same picture as iteration 4's
    path = rec.save()
    with Image.open(path) as im:
        assert im.n_frames == 5
        im.seek(im.n_frames - 1)
        assert im.info["duration"] == HOLD_MS
    assert len(rec.frames) == 8  # the recorder keeps what it captured


@pytest.mark.parametrize("max_frames", [30, 120])
def test_unknown_length_grows_the_gaps_as_the_fit_goes_on(tmp_path, max_frames):
    rec = AnimationRecorder(tmp_path / "a.gif", max_frames=max_frames, max_side=16)
    held = _record(rec, 15, chunk=50, final=False)
    assert rec.iterations == list(range(16))  # dense at first
    held += _record_more(rec, 15, 400_000)
    assert max(held) <= max_frames  # never more held, however long it runs
    its = rec.iterations
    assert its[-1] == 400_000  # the final state, wherever the fit stopped
    gaps = _check_spacing(its[:-1])  # (the final frame comes when the fit ends, not when due)
    assert its[:2] == [0, 1] and its[4] <= 20  # thinning keeps the early frames dense
    if max_frames >= 120:
        assert its[:6] == list(range(6))
    assert gaps[-1] >= its[-2] / 20  # late gaps scale with the iteration, not fixed
    assert min(max_frames // 2, 20) <= len(its) <= max_frames
    rec.save()
    with Image.open(tmp_path / "a.gif") as im:
        im.seek(im.n_frames - 1)
        assert im.n_frames == len(its) and im.info["duration"] == HOLD_MS


def _record_more(rec: AnimationRecorder, start: int, last: int) -> list[int]:
    held, it = [], start
    while it < last:
        it = min(last, it + min(rec.until_due(it), 1000))
        if rec.due(it):
            rec.add_frame(_frame(it), it)
            held.append(len(rec.frames))
    if rec.iterations[-1] != last:
        rec.add_frame(_frame(last), last)
        held.append(len(rec.frames))
    return held


def test_frames_count_from_the_first_capture(tmp_path):
    # a resumed fit starts at iteration 600: its frames are spaced from there
    rec = AnimationRecorder(tmp_path / "a.gif", total=400)
    rec.add_frame(_frame(600), 600)
    it = 600
    while it < 1000:
        it += rec.until_due(it)
        rec.add_frame(_frame(it), it)
    assert rec.iterations[:5] == [600, 601, 602, 603, 604] and rec.iterations[-1] == 1000


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError):
        AnimationRecorder(tmp_path / "a.gif", total=-1)
    with pytest.raises(ValueError):
        AnimationRecorder(tmp_path / "a.gif", frames=1)


@pytest.mark.gpu
@pytest.mark.parametrize("stop, frames", [(["--iters", "30"], (31, 31)), (["--time-limit", "1.5"], (10, 120))],
                         ids=["iterations", "time-limit"])
def test_cli_fit_records_an_animation(tmp_path, gpu_ctx, stop, frames):
    """A fit shorter than the 80 frames planned records every iteration, 0 to 30; a time-limited
    one (total unknown) grows its spacing; either way the last frame is held."""
    from trifit.cli import main

    img = (np.random.default_rng(2).uniform(0, 1, (20, 30, 3)) * 255).astype(np.uint8)
    Image.fromarray(img).save(tmp_path / "in.png")
    code = main(["fit", str(tmp_path / "in.png"), "--size", "24", "--tris", "4", *stop,
                 "-o", str(tmp_path / "s.json"), "--animation", str(tmp_path / "fit.gif"), "--quiet"])
    assert code == 0
    with Image.open(tmp_path / "fit.gif") as im:
        assert im.size == (24, 16)
        assert frames[0] <= im.n_frames <= frames[1]
        im.seek(im.n_frames - 1)
        assert im.info["duration"] == HOLD_MS
