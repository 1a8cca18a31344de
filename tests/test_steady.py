"""The temporal term of a clip's fit (`trifit video --steady W`, issue #21): the anchor's penalty
in the float64 reference against finite differences, the device's fit loop against the reference
loop with an anchor (and locks), a zero weight changing no bit, the policy's stillness and
weights, and on the tests' synthetic clip (tests/clips.py): off is what it was, on keeps the
still background still while the moving disc is tracked; resumption keeps it; the command checks
W and records it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from clips import moving_disc
from PIL import Image

from trifit import Scene, fitter as fitter_mod, reference as R
from trifit.cli import main
from trifit.fitloop import FitSettings, Schedule, values_from_raw
from trifit.videofit import ClipFit, FramePolicy, steady_weights, stillness

W, H, N = 80, 60, 24
CLIP_FIT = dict(triangles=30, size=80, seed=0, first_iters=300, frame_iters=30)  # tests/test_video.py's FIT
STEADY = 1.0  # the README's recommended W


def _target(seed=0):
    rng = np.random.default_rng(seed)
    truth = Scene.random(12, 40, 30, seed=seed, sigma_px=1.0)
    return np.clip(R.render(truth) + rng.normal(0, 0.01, (30, 40, 3)), 0, 1)


# ---------------------------------------------------------------------- the mechanism
def test_anchor_penalty_gradient_matches_finite_differences():
    rng = np.random.default_rng(3)
    t, a = rng.uniform(0, 1, (5, 10)), rng.uniform(0, 1, (5, 10))
    w = rng.uniform(0, 2, (5, 10)) * (rng.uniform(size=(5, 10)) > 0.3)  # some weights zero
    value, grad = R.anchor_penalty(t, a, w)
    assert value == pytest.approx(float(np.sum(w * (t - a) ** 2)))
    h, fd = 1e-6, np.zeros_like(t)
    for idx in np.ndindex(t.shape):
        up, down = t.copy(), t.copy()
        up[idx] += h
        down[idx] -= h
        fd[idx] = (R.anchor_penalty(up, a, w)[0] - R.anchor_penalty(down, a, w)[0]) / (2 * h)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-9)
    assert np.all(grad[w == 0] == 0) and np.any(grad != 0)


def _loops(engines, raw, n, anchor=None, weights=None, locked=()):
    settings = FitSettings(triangles=n, size=40, cull_tolerance=1e-5)  # (culled as renders are: the float64 loop's match)
    sched = Schedule(0.05, 0.02, 10, 20, 0.1)
    out = []
    for e in engines:
        lp = e.impl.fit_loop(_target(), raw, n, settings, sched, 0)
        if locked:
            lp.set_locked([np.array(locked)], [values_from_raw(raw, n)[0][list(locked)]])
            lp.set_state(raw, np.zeros_like(raw), np.zeros_like(raw))
        if anchor is not None:
            lp.set_anchor(anchor[None], weights[None])
        out.append(lp)
    return out


@pytest.mark.gpu
def test_gpu_loop_follows_the_reference_loop_with_an_anchor(gpu_engine, ref_engine):
    n = 6
    raw = fitter_mod.raw_from_scene(Scene.random(n, 40, 30, seed=2, sigma_px=1.0))
    tris = values_from_raw(raw, n)[0]
    rng = np.random.default_rng(5)
    anchor = np.clip(tris + rng.normal(0, 0.05, tris.shape), 0.01, 0.99)  # a little away from where they are
    weights = rng.uniform(0, 0.05, tris.shape)
    weights[1] = 0.0  # a free triangle
    locked = (3,)
    loops = _loops((gpu_engine, ref_engine), raw, n, anchor, weights, locked)
    losses = [lp.run(10) for lp in loops]
    np.testing.assert_allclose(losses[0], losses[1], rtol=2e-4)
    states = [lp.get_state()[0] for lp in loops]
    np.testing.assert_allclose(states[0], states[1], atol=2e-4)
    plain = _loops((ref_engine,), raw, n, locked=locked)[0]
    plain.run(10)
    free = plain.get_state()[0]
    assert np.abs(free - states[1]).max() > 1e-3  # the anchor mattered
    for s in (*states, free):  # ... and the locked triangle stayed where it was, anchor or not
        assert np.array_equal(s[30:40].astype(np.float32), raw[30:40].astype(np.float32))
    pulled, pushed = (np.abs(values_from_raw(s, n)[0] - anchor)[weights > 0].mean() for s in (states[1], free))
    assert pulled < pushed  # towards the anchor
    for lp in loops + [plain]:
        fitter_mod.release_loop(lp)


@pytest.mark.gpu
def test_a_zero_weight_anchor_changes_no_bit(gpu_engine):
    n = 6
    raw = fitter_mod.raw_from_scene(Scene.random(n, 40, 30, seed=4, sigma_px=1.0))
    anchor = np.random.default_rng(1).uniform(0, 1, (n, 10))
    a, b, c = _loops((gpu_engine,) * 3, raw, n)
    b.set_anchor(anchor[None], np.ones((1, n, 10)))  # on, then zero weights
    b.set_anchor(anchor[None], np.zeros((1, n, 10)))
    c.set_anchor(anchor[None], np.ones((1, n, 10)))  # on, then none
    c.set_anchor(None)
    la, lb, lc = a.run(12), b.run(12), c.run(12)
    assert la.tobytes() == lb.tobytes() == lc.tobytes()
    for other in (b, c):
        assert all(x.tobytes() == y.tobytes() for x, y in zip(a.get_state(), other.get_state()))
    for lp in (a, b, c):
        fitter_mod.release_loop(lp)


# ---------------------------------------------------------------------- the policy
def test_stillness_frees_what_moved_and_weights_are_in_the_losss_units():
    prev = np.zeros((1, 60, 80, 3))
    cur = prev.copy()
    cur[0, 10:20, 10:20] = 0.5          # something changed there
    cur[0, 40:, 40:] += 0.02            # noise-sized changes elsewhere: still

    def tri(x0, y0, x1, y1, x2, y2):  # vertices in pixels of 80x60
        return [x0 / 80, y0 / 60, x1 / 80, y1 / 60, x2 / 80, y2 / 60, .5, .5, .5, .5]

    tris = np.array([[tri(10, 10, 20, 10, 10, 20),    # on the change: free
                      tri(50, 45, 70, 45, 50, 55),    # in the noise: still
                      tri(30, 30, 40, 30, 30, 40),    # 10 px away (more than the 4 px margin): still
                      tri(-50, -50, -40, -50, -50, -40)]])  # outside the frame: still
    s = stillness(tris, prev, cur, FramePolicy())
    assert s.shape == (1, 4) and s[0, 0] == 0.0 and np.all(s[0, 1:] == 1.0)
    near = np.array([[tri(22, 10, 30, 10, 22, 18)]])  # its grown box takes in a corner of the change
    assert 0.0 < stillness(near, prev, cur, FramePolicy())[0, 0] < 1.0
    w = steady_weights(tris, s, 2.0, 80, 60)
    n = 80 * 60 * 3
    assert np.all(w[0, 0] == 0)
    np.testing.assert_allclose(w[0, 1, 0:6:2], 2.0 * 80 ** 2 / n)   # a pixel's move, squared
    np.testing.assert_allclose(w[0, 1, 1:6:2], 2.0 * 60 ** 2 / n)
    np.testing.assert_allclose(w[0, 1, 6:], 2.0 * 100.0 / n)         # the footprint: 20 x 10 / 2 px
    assert FramePolicy.from_dict({**FramePolicy(steady=2.0).as_dict(), "later": 1}).steady == 2.0


# ---------------------------------------------------------------------- on the tests' clip
def _fit_clip(frames, engine, steady: float, **policy):
    from trifit.export import render_large, with_edges

    clip = ClipFit(engine=engine, policy=FramePolicy(steady=steady, **policy), **CLIP_FIT)
    scenes = [clip.fit_frame(f) for f in frames]
    anchored = clip.fitter._anchor is not None
    clip.close()
    outs = np.stack([render_large(with_edges(s, W, H, "crisp"), W, H, engine, dtype=np.uint8) for s in scenes])
    return scenes, outs, anchored


def _psnr(a, b) -> float:
    return float(10 * np.log10(255.0 ** 2 / np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)))


CLIP_SEEDS = (0, 1, 2)  # the clip's noise: one seed's trajectory moves with any last bit of the gradients


@pytest.fixture(scope="module")
def clip_runs(gpu_ctx):
    """Per noise seed of the clip: (frames, still mask, {W: _fit_clip(...)}), and the engine."""
    from trifit import Engine

    engine = Engine("gpu")
    runs = {}
    for seed in CLIP_SEEDS:
        frames, still = moving_disc(N, W, H, seed=seed)
        runs[seed] = (frames, still, {w: _fit_clip(frames, engine, w) for w in (0.0, STEADY)})
    return runs, engine


@pytest.mark.gpu
def test_off_is_what_it_was_and_a_zero_weight_anchor_is_off(clip_runs):
    """Off sets no anchor; on, with every triangle counted as moving (every weight zero), the
    anchor is set each frame and the clip comes out the same bytes as off."""
    runs, engine = clip_runs
    frames, _, fits = runs[CLIP_SEEDS[0]]
    off_scenes, off_outs, off_anchored = fits[0.0]
    assert not off_anchored and all("steady" not in s.meta.get("video", {}) for s in off_scenes)
    n = 6
    scenes, outs, anchored = _fit_clip(frames[:n], engine, STEADY, moving_above=-1.0)
    assert anchored
    assert outs.tobytes() == off_outs[:n].tobytes()
    assert [s.to_json() for s in scenes] == [s.to_json() for s in off_scenes[:n]]


@pytest.mark.gpu
def test_steady_stills_the_background_and_tracks_the_disc(clip_runs, capsys):
    """The same iterations per frame, over three noise seeds of the clip (means): with the term
    the still background flickers well under two thirds as much, the frames lose little PSNR and
    the disc's path little more (seeds 0-4 at f4aa255: PSNR 0.30-0.99 dB, path 0.31-1.44 dB lower;
    one seed's figure moves with any last bit of the gradients, so the bars hold the mean: 0.58 and
    0.82 dB when this test took its form); holding every triangle instead (no stillness:
    moving_above=10) loses 0.93 and 1.45 dB on the same means, which fails."""
    runs, _ = clip_runs
    rows = {w: [] for w in (0.0, STEADY)}
    for frames, still, fits in runs.values():
        moving = ~still
        for w, (_, outs, _) in fits.items():
            rows[w].append((np.mean([_psnr(o, f) for o, f in zip(outs[1:], frames[1:])]),
                            np.mean([_psnr(o[moving], f[moving]) for o, f in zip(outs[1:], frames[1:])]),
                            _flicker(outs, still), _flicker(frames, still)))
    (p0, pm0, fl0, _), (p1, pm1, fl1, fl_in) = (np.mean(rows[w], axis=0) for w in (0.0, STEADY))
    with capsys.disabled():
        print("\n" + "; ".join(f"steady {w:g}: {p:.2f} dB, disc path {pm:.2f} dB, flicker {fl:.4f}"
                               for w, (p, pm, fl, _) in ((w, np.mean(r, axis=0)) for w, r in rows.items()))
              + f"; input flicker {fl_in:.4f} (means over clip seeds {CLIP_SEEDS})")
    assert fl1 < 0.6 * fl0 and fl1 < fl_in
    assert p1 > p0 - 0.7 and pm1 > pm0 - 1.0
    for frames, _, fits in runs.values():  # every frame fitted
        assert min(_psnr(o, f) for o, f in zip(fits[STEADY][1], frames)) > 15.0


def _flicker(frames, mask):
    from trifit.video import flicker

    return flicker(frames, mask)


@pytest.mark.gpu
def test_resuming_keeps_the_term_and_the_bytes(gpu_engine):
    frames, _ = moving_disc(5, 48, 36, seed=2)
    small = dict(triangles=12, size=48, first_iters=60, frame_iters=15)
    policy = FramePolicy(steady=STEADY)
    whole = ClipFit(engine=gpu_engine, policy=policy, **small)
    scenes = [whole.fit_frame(f) for f in frames[:3]]
    checkpoint = whole.checkpoint()
    scenes += [whole.fit_frame(f) for f in frames[3:]]
    whole.close()
    resumed = ClipFit.resume(frames[2], checkpoint, first_iters=60, frame_iters=15, engine=gpu_engine)
    assert resumed.policy.steady == STEADY
    again = [resumed.fit_frame(f) for f in frames[3:]]
    resumed.close()
    assert [s.to_json() for s in again] == [s.to_json() for s in scenes[3:]]


# ---------------------------------------------------------------------- the command
@pytest.mark.parametrize("value", ["-1", "nan", "inf", "x"])
def test_a_bad_steady_is_one_line_and_exit_2(tmp_path, capfd, value):
    capfd.readouterr()
    assert main(["video", str(tmp_path / "missing"), "-o", str(tmp_path / "o.gif"), "--steady", value]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "--steady" in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.gpu
def test_the_command_records_steady_in_each_frames_meta(tmp_path, gpu_ctx):
    frames, _ = moving_disc(4, 40, 30, seed=1)
    (tmp_path / "in").mkdir()
    for k, f in enumerate(frames):
        Image.fromarray(f).save(tmp_path / "in" / f"f{k}.png")
    quick = ["--tris", "8", "--size", "40", "--iters-per-frame", "3", "--first-frame-iters", "20", "--quiet"]
    for w, scenes in (("1.5", "on"), ("0", "off")):
        assert main(["video", str(tmp_path / "in"), "-o", str(tmp_path / f"o{scenes}"), *quick, "--steady", w,
                     "--scenes", str(tmp_path / scenes)]) == 0
    for k in range(4):
        on, off = (json.loads((tmp_path / d / f"frame_{k:04d}.trifit.json").read_text())["meta"]["video"]
                   for d in ("on", "off"))
        assert on["steady"] == 1.5 and "steady" not in off and on["frame"] == off["frame"] == k
