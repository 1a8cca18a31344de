"""A clip's new shot (render/videofit.py ``is_cut``, ``FramePolicy.cut_renew``): the frame after
a cut re-places a share of the triangles whatever their removal cost, so the new picture is
fitted from triangles placed where its error is, not only by moving the last shot's. Frames that
are no cut come out as they did without the rule, to the byte."""

from __future__ import annotations

import numpy as np
import pytest
from clips import moving_disc
from PIL import Image

from trifit.videofit import ClipFit, FramePolicy, is_cut

W, H = 80, 60
CLIP_FIT = dict(triangles=30, size=80, first_iters=300, frame_iters=30)
SHOT = 4  # frames of each shot


def test_a_cut_is_a_mean_change_of_at_least_cut_change():
    prev = np.zeros((2, 6, 8, 3))
    cur = prev.copy()
    cur[0] += 0.1001       # just over the threshold: a cut
    cur[1] += 0.0999       # just under: none
    assert is_cut(prev, cur, FramePolicy()) == [True, False]
    assert is_cut(prev, cur, FramePolicy(cut_change=0.05)) == [True, True]
    assert is_cut(prev, cur, FramePolicy(cut_renew=0.0)) == [False, False]  # the rule off
    assert is_cut(None, cur, FramePolicy()) == [False, False]               # a clip's first frame


def _two_shots():
    """The tests' still clip for SHOT frames, then SHOT frames of the other sample (its own noise)."""
    from trifit.resources import sample_path

    first, _ = moving_disc(2 * SHOT, W, H)
    cat = np.asarray(Image.open(sample_path("chelsea.png")).convert("RGB").resize((W, H), Image.Resampling.LANCZOS),
                     np.float64)
    rng = np.random.default_rng(1)
    second = [np.clip(cat + rng.normal(0, 2.0, cat.shape) + 0.5, 0, 255).astype(np.uint8) for _ in range(SHOT)]
    return np.concatenate([first[:SHOT], np.stack(second)])


def _fit(frames, engine, policy):
    from trifit.export import render_large, with_edges

    clip = ClipFit(engine=engine, policy=policy, **CLIP_FIT)
    scenes, renewed = [], []
    for f in frames:
        before = clip.fitter.respawned if clip.fitter is not None else 0
        scenes.append(clip.fit_frame(f))
        renewed.append(clip.fitter.respawned - before)
    clip.close()
    outs = [render_large(with_edges(s, W, H, "crisp"), W, H, engine, dtype=np.uint8) for s in scenes]
    psnr = [float(10 * np.log10(255.0 ** 2 / np.mean((o.astype(np.float64) - f.astype(np.float64)) ** 2)))
            for o, f in zip(outs, frames)]
    return scenes, renewed, psnr


@pytest.fixture(scope="module")
def runs(gpu_engine):
    frames = _two_shots()
    return {rule: _fit(frames, gpu_engine, FramePolicy(cut_renew=rule)) for rule in (0.0, FramePolicy().cut_renew)}


@pytest.mark.gpu
def test_the_new_shot_renews_a_share_of_the_count_and_other_frames_are_unchanged(runs):
    off, on = runs[0.0], runs[FramePolicy().cut_renew]
    n = CLIP_FIT["triangles"]
    share = int(np.ceil(FramePolicy().cut_renew * n))
    assert on[1][SHOT] >= share > off[1][SHOT]  # at the cut: the share at least (some may have stopped anyway)
    for k in range(SHOT):  # no cut before it: the same scenes, to the byte
        assert on[0][k].to_json() == off[0][k].to_json()
    for k in range(SHOT + 1, 2 * SHOT):  # after it, frames are ordinary ones again: the usual few re-placed
        assert on[1][k] < share


@pytest.mark.gpu
def test_the_new_shot_is_fitted_better_than_by_moving_the_last_ones(runs):
    off, on = runs[0.0], runs[FramePolicy().cut_renew]
    gain = np.mean(on[2][SHOT:]) - np.mean(off[2][SHOT:])
    assert gain > 0.2, f"the new shot's frames gained {gain:.2f} dB ({on[2][SHOT:]} against {off[2][SHOT:]})"
