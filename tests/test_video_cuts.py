"""A clip's new shot. A frame the caller finds to start one (render/shots.py) gets a cold fit of
its own (``FramePolicy.cut_restart``), the same bytes as the segmented run's segment that starts
there, and a resumed clip starts its later shots alike. A frame that changed as much as a cut
does but starts no shot (render/videofit.py ``is_cut``, ``FramePolicy.cut_renew``) re-places a
share of the triangles whatever their removal cost, so the new picture is fitted from triangles
placed where its error is, not only by moving the last picture's. Frames that are neither come
out as they did without the rules, to the byte."""

from __future__ import annotations

import json

import numpy as np
import pytest
from clips import dissolve, fade_in, two_shots
from PIL import Image

from trifit.imageio import as_target
from trifit.shots import CONTENT_MIN, find_cuts, frame_change, frame_content, shot_seed
from trifit.videofit import ClipFit, FramePolicy, frames_done, is_cut

W, H = 80, 60
CLIP_FIT = dict(triangles=30, size=80, first_iters=300, frame_iters=30)
SHOT = 4  # frames of each shot
SEED = 5  # the clip's (a later shot's fit draws from shot_seed(SEED, its first frame))


def test_a_cut_is_a_mean_change_of_at_least_cut_change():
    prev = np.zeros((2, 6, 8, 3))
    cur = prev.copy()
    cur[0] += 0.1001       # just over the threshold: a cut
    cur[1] += 0.0999       # just under: none
    assert is_cut(prev, cur, FramePolicy()) == [True, False]
    assert is_cut(prev, cur, FramePolicy(cut_change=0.05)) == [True, True]
    assert is_cut(prev, cur, FramePolicy(cut_renew=0.0)) == [False, False]  # the rule off
    assert is_cut(None, cur, FramePolicy()) == [False, False]               # a clip's first frame
    # the changes as the frame loop's decoding thread measured them decide where given
    assert is_cut(prev, cur, FramePolicy(), changes=[0.0999, 0.1001]) == [False, True]


def _two_shots():
    """The tests' still clip for SHOT frames, then SHOT frames of the other sample (its own noise)."""
    return two_shots(SHOT, 2 * SHOT, W, H, seed=1)


def _fit(frames, engine, policy, seed: int = 0):
    clip = ClipFit(engine=engine, policy=policy, seed=seed, **CLIP_FIT)
    scenes, renewed = [], []
    for f in frames:
        before = clip.fitter.respawned if clip.fitter is not None else 0
        scenes.append(clip.fit_frame(f))
        renewed.append(clip.fitter.respawned - before)
    clip.close()
    return scenes, renewed, _psnr(scenes, frames, engine)


def _psnr(scenes, frames, engine) -> list[float]:
    """Each output frame's PSNR (crisp edges at the clip's size, as `trifit video` writes them)."""
    from trifit.export import render_large, with_edges

    outs = [render_large(with_edges(s, W, H, "crisp"), W, H, engine, dtype=np.uint8) for s in scenes]
    return [float(10 * np.log10(255.0 ** 2 / np.mean((o.astype(np.float64) - f.astype(np.float64)) ** 2)))
            for o, f in zip(outs, frames)]


def _frame_folder(folder, frames):
    """``frames`` as a folder of PNGs, a clip `trifit video` opens."""
    folder.mkdir(parents=True)
    for k, f in enumerate(frames):
        Image.fromarray(f).save(folder / f"f{k:02d}.png")
    return folder


def _run_args(engine) -> dict:
    """`trifit video`'s run (run_video) at the tests' settings."""
    return dict(triangles=CLIP_FIT["triangles"], size=CLIP_FIT["size"], iters_per_frame=CLIP_FIT["frame_iters"],
                first_frame_iters=CLIP_FIT["first_iters"], seed=SEED, engine=engine)


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
def test_the_new_shot_is_fitted_better_than_by_moving_the_last_ones(runs, gpu_engine):
    # a mean over twelve seeds: one fit's gain depends on its path (on lavapipe over seeds 0-35 a
    # mean of 0.35 dB, standard deviation 0.31, -0.22 to +1.00: docs/bench/lavapipe-video-test-gains.txt),
    # so a bar on one seed would fail on any change of the sums' order; 0.1 is 2.8 standard errors
    # of a twelve-seed mean under that mean
    frames, rule = _two_shots(), FramePolicy().cut_renew
    gains = []
    for seed in range(12):
        off, on = (runs[0.0], runs[rule]) if seed == 0 else \
            (_fit(frames, gpu_engine, FramePolicy(cut_renew=0.0), seed), _fit(frames, gpu_engine, FramePolicy(), seed))
        gains.append(np.mean(on[2][SHOT:]) - np.mean(off[2][SHOT:]))
    assert np.mean(gains) > 0.1, f"the new shot's frames gained {np.round(gains, 2)} dB"


# ---------------------------------------------------------------------- a new shot's own fit
def _cuts(frames) -> list[int]:
    targets = [as_target(f, CLIP_FIT["size"]) for f in frames]
    return find_cuts([frame_change(a, b) for a, b in zip(targets, targets[1:])])


def _scene_bytes(scene) -> str:
    return scene.to_json()


def _whole(frames, engine, *, seed=0, policy=None, stop_after=None, resume_from=None):
    """The clip fitted whole, a new fit at each cut: (scenes as JSON, the fitters' seeds, checkpoint
    taken after frame ``stop_after``). ``resume_from``: (checkpoint, frames done) to go on from."""
    cuts = set(_cuts(frames))
    if resume_from is None:
        clip, start = ClipFit(engine=engine, seed=seed, policy=policy, **CLIP_FIT), 0
    else:
        checkpoint, start = resume_from
        clip = ClipFit.resume(frames[start - 1], checkpoint, first_iters=CLIP_FIT["first_iters"],
                              frame_iters=CLIP_FIT["frame_iters"], engine=engine)
    scenes, seeds, checkpoint = [], [], None
    try:
        for k in range(start, len(frames)):
            clip.start_frame(frames[k], new_shot=k in cuts).run()
            scenes.append(_scene_bytes(clip.end_frame()))
            seeds.append(clip.fitter.settings.seed)
            if k == stop_after:
                checkpoint = clip.checkpoint()
    finally:
        clip.close()
    return scenes, seeds, checkpoint


@pytest.fixture(scope="module")
def shots(gpu_engine):
    frames = _two_shots()
    whole, seeds, checkpoint = _whole(frames, gpu_engine, seed=SEED, stop_after=SHOT - 1)
    segment = ClipFit(engine=gpu_engine, seed=shot_seed(SEED, SHOT), **CLIP_FIT)
    try:
        alone = [_scene_bytes(segment.fit_frame(f)) for f in frames[SHOT:]]
    finally:
        segment.close()
    return {"frames": frames, "whole": whole, "seeds": seeds, "checkpoint": checkpoint, "segment": alone}


def test_the_two_shots_clip_is_cut_at_its_join():
    assert _cuts(_two_shots()) == [SHOT]


@pytest.mark.gpu
def test_a_new_shot_is_fitted_as_the_segment_that_starts_there(shots):
    assert shots["seeds"] == [SEED] * SHOT + [shot_seed(SEED, SHOT)] * SHOT
    assert shots["whole"][SHOT:] == shots["segment"]  # the cold fit and its warm frames, to the byte
    first = json.loads(shots["whole"][SHOT])["meta"]
    assert first["iterations"] == CLIP_FIT["first_iters"]


@pytest.mark.gpu
def test_frames_before_a_new_shot_are_as_without_the_rule(shots, gpu_engine):
    off, _, _ = _whole(shots["frames"][:SHOT + 1], gpu_engine, seed=SEED, policy=FramePolicy(cut_restart=0.0))
    assert off[:SHOT] == shots["whole"][:SHOT]
    assert off[SHOT] != shots["whole"][SHOT]


@pytest.mark.gpu
def test_a_resumed_clip_starts_its_later_shots_alike(shots, gpu_engine):
    frames, whole = shots["frames"], shots["whole"]
    checkpoint = shots["checkpoint"]  # after frame SHOT - 1: the next frame is the new shot's first
    assert frames_done(checkpoint, CLIP_FIT["first_iters"], CLIP_FIT["frame_iters"]) == SHOT
    resumed, seeds, later = _whole(frames, gpu_engine, resume_from=(checkpoint, SHOT), stop_after=SHOT + 1)
    assert resumed == whole[SHOT:] and seeds[0] == shot_seed(SEED, SHOT)
    # and from inside the second shot: its fit's iterations count from the shot's start
    assert frames_done(later, CLIP_FIT["first_iters"], CLIP_FIT["frame_iters"]) == SHOT + 2
    again, _, _ = _whole(frames, gpu_engine, resume_from=(later, SHOT + 2))
    assert again == whole[SHOT + 2:]


@pytest.mark.gpu
def test_the_new_shot_is_fitted_better_cold_than_by_renewing_a_share(shots, gpu_engine):
    from trifit.scene import Scene

    frames = shots["frames"]
    renewed = _whole(frames, gpu_engine, seed=SEED, policy=FramePolicy(cut_restart=0.0))[0]

    def psnr(scenes):
        return np.mean(_psnr([Scene.from_json(s) for s in scenes[SHOT:]], frames[SHOT:], gpu_engine))

    gain = psnr(shots["whole"]) - psnr(renewed)
    assert gain > 0.3, f"the new shot's frames gained {gain:.2f} dB from a fit of their own"


def test_later_frames_are_fitted_as_soft_as_a_crisp_picture_and_old_records_keep_their_policy():
    from trifit.export import CRISP_SIGMA_PX
    from trifit.videofit import ADDED_OFF

    assert FramePolicy().sigma_px == CRISP_SIGMA_PX
    old = {k: v for k, v in FramePolicy().as_dict().items() if k not in ADDED_OFF}  # a record from before them
    assert FramePolicy.from_dict(old) == FramePolicy(**ADDED_OFF)
    assert FramePolicy.from_dict(FramePolicy().as_dict()) == FramePolicy()


@pytest.mark.gpu
def test_the_command_resumes_across_a_new_shot_to_the_byte(gpu_engine, tmp_path, monkeypatch):
    """`trifit video`'s run (run_video) stopped just before the cut, or inside the second shot, and
    run again: the frame loop decodes the frames before the resume point for the cut's window,
    the fit resumes with its shot, and every scene and output frame is an uninterrupted run's."""
    from trifit import videorun

    frames, args = _frame_folder(tmp_path / "frames", _two_shots()), _run_args(gpu_engine)

    def files(folder, suffix):
        return {p.name: p.read_bytes() for p in sorted(folder.glob(f"*{suffix}"))}

    whole = videorun.run_video(frames, tmp_path / "whole", scenes_dir=tmp_path / "whole-scenes", **args)
    assert whole.done == 2 * SHOT and whole.shots == [SHOT]
    want_scenes, want_frames = files(tmp_path / "whole-scenes", ".json"), files(tmp_path / "whole", ".png")
    assert json.loads(want_scenes[f"frame_{SHOT:04d}.trifit.json"])["meta"]["video"]["shot"] == SHOT
    monkeypatch.setattr(videorun, "CHECKPOINT_EVERY_S", 0.0)  # (a checkpoint after every frame: a known resume point)
    for stop in (SHOT - 1, SHOT + 1):
        out, scenes, fit = tmp_path / f"out{stop}", tmp_path / f"scenes{stop}", []

        def cancel_after(k, scene, stats, stop=stop, fit=fit):
            if k == stop:
                fit[0].cancel()

        first = videorun.run_video(frames, out, scenes_dir=scenes, on_clip=fit.append, on_frame=cancel_after, **args)
        assert first.interrupted and first.done == stop + 1
        again = videorun.run_video(frames, out, scenes_dir=scenes, **args)
        assert again.resumed_from == stop + 1 and again.done == 2 * SHOT and not again.interrupted
        assert first.shots + again.shots == [SHOT]  # (each run names the shots among the frames it fitted)
        assert files(scenes, ".json") == want_scenes and files(out, ".png") == want_frames


# ---------------------------------------------------------------------- a fade in
FADE, FADE_FRAMES = 6, 12


def _rule_on_and_off(engine, folder, frames, off: FramePolicy) -> dict:
    """``frames`` as a folder of frames, fitted by `trifit video`'s run with the default policy
    ("on") and with ``off``: each run's scenes, in order."""
    from trifit import videorun
    from trifit.scene import Scene

    _frame_folder(folder / "frames", frames)
    runs = {"frames": frames, "folder": folder}
    for name, policy in (("on", None), ("off", off)):
        scenes = folder / f"scenes-{name}"
        videorun.run_video(folder / "frames", folder / f"out-{name}", scenes_dir=scenes, policy=policy,
                           **_run_args(engine))
        runs[name] = [Scene.from_json(p.read_text()) for p in sorted(scenes.glob("*.json"))]
    return runs


@pytest.fixture(scope="module")
def fade(gpu_engine, tmp_path_factory):
    """A fade in from black, fitted with the rules (the default) and without them."""
    frames = fade_in(FADE, FADE_FRAMES, W, H)
    targets = [as_target(f, CLIP_FIT["size"]) for f in frames]
    first = next(k for k, t in enumerate(targets) if frame_content(t) >= CONTENT_MIN)
    off = FramePolicy(fade_restart=0.0, transition_restart=0.0)
    return {**_rule_on_and_off(gpu_engine, tmp_path_factory.mktemp("fade"), frames, off), "first": first}


def test_a_fade_in_is_no_cut_but_starts_a_shot_where_its_content_appears():
    frames = fade_in(FADE, FADE_FRAMES, W, H)
    targets = [as_target(f, CLIP_FIT["size"]) for f in frames]
    changes = [frame_change(a, b) for a, b in zip(targets, targets[1:])]
    first = next(k for k, t in enumerate(targets) if frame_content(t) >= CONTENT_MIN)
    assert 0 < first < FADE
    assert find_cuts(changes) == [] and find_cuts(changes, [frame_content(t) for t in targets]) == [first]


def _gain_of_a_shot_at(runs, start: int, after: int, engine) -> float:
    """Check that the rule's run (``runs["on"]``) starts a shot at frame ``start`` and only there,
    the run without it none, both the same bytes before it; the PSNR the frames from ``after``
    gained by it (dB, mean)."""
    n = len(runs["frames"])
    assert [s.extra["meta"]["video"].get("shot", 0) for s in runs["on"]] == [0] * start + [start] * (n - start)
    assert all("shot" not in s.extra["meta"]["video"] for s in runs["off"])  # the rule off: one shot
    assert [s.to_json() for s in runs["on"][:start]] == [s.to_json() for s in runs["off"][:start]]
    return float(np.mean(_psnr(runs["on"][after:], runs["frames"][after:], engine)) -
                 np.mean(_psnr(runs["off"][after:], runs["frames"][after:], engine)))


def _segments(runs, policy: FramePolicy, work) -> list[tuple[int, int]]:
    """The segments `trifit video --segment 100` splits ``runs``' clip into with ``policy``."""
    from trifit.video import open_clip
    from trifit.videoseg import plan_segments

    settings = {"segment": 100, "size": CLIP_FIT["size"], "policy": policy.as_dict()}
    return plan_segments(open_clip(runs["folder"] / "frames"), work, settings, print).segments


@pytest.mark.gpu
def test_a_fade_in_gets_a_fit_of_its_own_where_its_content_appears(fade, gpu_engine):
    gain = _gain_of_a_shot_at(fade, fade["first"], FADE, gpu_engine)  # (after: the frames once faded in)
    assert gain > 0.3, f"the frames after the fade gained {gain:.2f} dB from a fit started where content appeared"


@pytest.mark.gpu
def test_a_segmented_run_starts_a_segment_where_a_fade_in_s_content_appears(fade, tmp_path):
    first, work = fade["first"], tmp_path / "work"
    assert _segments(fade, FramePolicy(), work) == [(0, first), (first, FADE_FRAMES)]
    assert _segments(fade, FramePolicy(fade_restart=0.0, transition_restart=0.0), work) == [(0, FADE_FRAMES)]
    # the fade rule off, the fade's end is a transition that ends: a shot starts there instead
    (_, split), (_, end) = _segments(fade, FramePolicy(fade_restart=0.0), work)
    assert split in (FADE - 1, FADE) and end == FADE_FRAMES


# ---------------------------------------------------------------------- a dissolve
DISSOLVE, DISSOLVE_LEN, DISSOLVE_FRAMES = 4, 6, 18


@pytest.fixture(scope="module")
def dissolved(gpu_engine, tmp_path_factory):
    """A dissolve from the disc clip into the other sample, fitted with the transition rule (the
    default) and without it."""
    frames = dissolve(DISSOLVE, DISSOLVE_LEN, DISSOLVE_FRAMES, W, H, seed=1)
    runs = _rule_on_and_off(gpu_engine, tmp_path_factory.mktemp("dissolve"), frames, FramePolicy(transition_restart=0.0))
    return {**runs, "end": DISSOLVE + DISSOLVE_LEN}


@pytest.mark.gpu
def test_a_dissolve_gets_a_fit_of_its_own_where_it_settles(dissolved, gpu_engine):
    gain = _gain_of_a_shot_at(dissolved, dissolved["end"], dissolved["end"], gpu_engine)
    assert gain > 0.3, f"the frames after the dissolve gained {gain:.2f} dB from a fit of their own"


@pytest.mark.gpu
def test_a_segmented_run_starts_a_segment_where_a_dissolve_settles(dissolved, tmp_path):
    end, work = dissolved["end"], tmp_path / "work"
    assert _segments(dissolved, FramePolicy(), work) == [(0, end), (end, DISSOLVE_FRAMES)]
    assert _segments(dissolved, FramePolicy(transition_restart=0.0), work) == [(0, DISSOLVE_FRAMES)]


@pytest.mark.gpu
def test_a_run_stopped_inside_a_dissolve_resumes_to_the_byte(dissolved, gpu_engine, tmp_path, monkeypatch):
    """Stopped inside the dissolve and run again, the frame loop decodes the frames the decision at
    its end needs again (shots.CONTEXT) and starts the shot there: every scene is an uninterrupted run's."""
    from trifit import videorun

    monkeypatch.setattr(videorun, "CHECKPOINT_EVERY_S", 0.0)  # (a checkpoint after every frame: a known resume point)
    stop, fit, scenes = DISSOLVE + 2, [], tmp_path / "scenes"

    def cancel_after(k, scene, stats):
        if k == stop:
            fit[0].cancel()

    frames, out = dissolved["folder"] / "frames", tmp_path / "out"
    first = videorun.run_video(frames, out, scenes_dir=scenes, on_clip=fit.append, on_frame=cancel_after,
                               **_run_args(gpu_engine))
    assert first.interrupted and first.done == stop + 1
    again = videorun.run_video(frames, out, scenes_dir=scenes, **_run_args(gpu_engine))
    assert again.resumed_from == stop + 1 and again.done == DISSOLVE_FRAMES
    assert first.shots == [] and again.shots == [dissolved["end"]]
    assert [p.read_bytes() for p in sorted(scenes.glob("*.json"))] == \
        [p.read_bytes() for p in sorted((dissolved["folder"] / "scenes-on").glob("*.json"))]


@pytest.mark.gpu
def test_the_command_says_where_new_shots_started(dissolved, tmp_path, capsys, gpu_ctx):
    """`trifit video` on the dissolve clip: the summary names the frame the new shot started at,
    and its scenes are the API run's bytes."""
    from trifit.cli import main

    args = ["--tris", str(CLIP_FIT["triangles"]), "--size", str(CLIP_FIT["size"]), "--seed", str(SEED),
            "--iters-per-frame", str(CLIP_FIT["frame_iters"]), "--first-frame-iters", str(CLIP_FIT["first_iters"])]
    assert main(["video", str(dissolved["folder"] / "frames"), "-o", str(tmp_path / "out"), *args,
                 "--scenes", str(tmp_path / "scenes")]) == 0
    assert f"1 new shot (at frame {dissolved['end']})" in capsys.readouterr().err
    assert [p.read_bytes() for p in sorted((tmp_path / "scenes").glob("*.json"))] == \
        [p.read_bytes() for p in sorted((dissolved["folder"] / "scenes-on").glob("*.json"))]


# ---------------------------------------------------------------------- progress kept across an upgrade
def test_progress_recorded_before_a_policy_field_existed_goes_on_with_it_off(tmp_path):
    """A run recorded before FramePolicy gained a field goes on where the settings leave that
    field at its default (an upgrade between two runs), with the field off as the record's fit
    has it; a field set otherwise, or any other setting changed, is another run."""
    from trifit.videofit import ADDED_OFF
    from trifit.videorun import kept_work, start_work

    settings = {"version": 1, "frames": 8, "size": 80, "policy": FramePolicy().as_dict()}
    older = {**settings, "policy": {k: v for k, v in settings["policy"].items() if k != "fade_restart"}}
    notes = []
    work = tmp_path / "work"
    start_work(work, older)
    kept = kept_work(work, dict(settings), notes.append)
    assert kept == {**settings, "policy": FramePolicy(fade_restart=ADDED_OFF["fade_restart"]).as_dict()}
    assert notes == []
    off = {**settings, "policy": FramePolicy(fade_restart=0.0).as_dict()}
    assert kept_work(work, off, notes.append) == off  # (set as the record has it: the same run)
    assert kept_work(work, {**settings, "size": 96}, notes.append) is None
    assert kept_work(work, {**settings, "policy": FramePolicy(cut_renew=0.5).as_dict()}, notes.append) is None
    assert len(notes) == 2 and all("starting over" in n for n in notes)
    start_work(work, settings)
    assert kept_work(work, dict(settings), notes.append) == settings and len(notes) == 2


@pytest.mark.gpu
def test_a_clip_recorded_before_a_policy_field_resumes_to_the_byte(gpu_engine, tmp_path, monkeypatch):
    """`trifit video` stopped, its work folder's record rewritten as a version without the fade and
    transition rules writes it, and run again: it goes on from where it stopped (no frame fitted twice), and
    every scene and frame is an uninterrupted run's (this clip has no fade or dissolve: the rules change nothing)."""
    from trifit import videorun

    frames, args = _frame_folder(tmp_path / "frames", _two_shots()), _run_args(gpu_engine)
    whole = videorun.run_video(frames, tmp_path / "whole", scenes_dir=tmp_path / "whole-scenes", **args)
    assert whole.done == 2 * SHOT and whole.shots == [SHOT]
    fit, stop, notes = [], SHOT + 1, []

    def cancel_after(k, scene, stats):
        if k == stop:
            fit[0].cancel()

    out, scenes = tmp_path / "out", tmp_path / "scenes"
    monkeypatch.setattr(videorun, "CHECKPOINT_EVERY_S", 0.0)  # (a checkpoint after every frame: a known resume point)
    first = videorun.run_video(frames, out, scenes_dir=scenes, on_clip=fit.append, on_frame=cancel_after, **args)
    assert first.interrupted and first.done == stop + 1
    record = videorun.work_folder(out) / "clip.json"
    settings = json.loads(record.read_text())
    del settings["policy"]["fade_restart"], settings["policy"]["transition_restart"]
    record.write_text(json.dumps(settings))
    again = videorun.run_video(frames, out, scenes_dir=scenes, note=notes.append, **args)
    assert again.resumed_from == stop + 1 and again.done == 2 * SHOT
    assert not any("starting over" in n for n in notes), notes
    assert {p.name: p.read_bytes() for p in sorted(scenes.glob("*.json"))} == \
        {p.name: p.read_bytes() for p in sorted((tmp_path / "whole-scenes").glob("*.json"))}
