"""Checkpoints (render/checkpoint.py): a resumed fit goes on exactly as the uninterrupted one,
on the GPU and in the reference; damaged or mismatched checkpoints are refused whole."""

import json
import zipfile

import numpy as np
import pytest

from trifit import Fitter, Scene, TrifitError, reference as R
from trifit.checkpoint import CheckpointError, load_checkpoint, save_checkpoint


def _target(W=64, H=48, seed=2):
    rng = np.random.default_rng(seed)
    truth = Scene.random(20, W, H, seed=seed, sigma_px=1.0)
    return np.clip(R.render(truth) + rng.normal(0, 0.01, (H, W, 3)), 0, 1)


def _resume_matches(engine, target, total, cuts, tmp_path, **kw):
    """Fit ``total`` iterations straight through; for each cut, checkpoint there (through a file),
    resume in a new fitter, run the rest: the same scene, bit for bit, and the same history."""
    straight = Fitter(target, engine=engine, **kw)
    straight.plan(total)
    saved = {}
    for cut in sorted(cuts):
        straight.step(cut - straight.iteration)
        saved[cut] = save_checkpoint(straight.checkpoint(), tmp_path / f"at-{cut}.npz")
    straight.step(total - straight.iteration)
    want = straight.scene
    for cut, path in saved.items():
        resumed = Fitter.resume(target, load_checkpoint(path), engine=engine)
        assert resumed.iteration == cut and len(resumed.history) == cut
        resumed.step(total - cut)
        got = resumed.scene
        assert got.n_triangles == want.n_triangles
        assert got.triangles.tobytes() == want.triangles.tobytes(), f"resumed at {cut}"
        assert got.background.tobytes() == want.background.tobytes()
        assert got.sigma == want.sigma
        assert np.array_equal(resumed.history.losses, straight.history.losses)
        assert got.meta["changes"] == want.meta["changes"]


@pytest.mark.gpu
def test_gpu_resume_is_the_uninterrupted_fit(gpu_engine, tmp_path):
    # cuts in the half-size stage, during growth, and after pruning and sigma probes have begun
    total = 600
    kw = dict(triangles=30, size=64, seed=4, coarse_min_size=24)  # a half-size stage at this small size
    f = Fitter(_target(), engine=gpu_engine, **kw)
    f.plan(total)
    assert 50 < f.coarse_until < 300 < f.strategy.probe_at(0) < 530
    _resume_matches(gpu_engine, _target(), total, [50, 300, 530], tmp_path, **kw)


def test_reference_resume_is_the_uninterrupted_fit(ref_engine, tmp_path):
    _resume_matches(ref_engine, _target(32, 24), 120, [40, 90], tmp_path, triangles=8, size=32, seed=1)


@pytest.mark.gpu
def test_resume_keeps_live_changes_and_a_refit(gpu_engine, tmp_path):
    """A fit with a count and sigma set by hand, refining a saved scene (no half-size stage)."""
    start = Fitter(_target(), triangles=20, size=64, seed=0, engine=gpu_engine)
    start.step(60)
    f = Fitter(_target(), triangles=20, size=64, seed=0, engine=gpu_engine, init_scene=start.scene)
    f.step(30)
    f.set_triangles(26)
    f.set_sigma(0.8)
    f.step(30)
    ck = f.checkpoint()
    resumed = Fitter.resume(_target(), ck, engine=gpu_engine)
    assert not resumed.has_coarse_stage and resumed.strategy.sigma_fixed == f.strategy.sigma_fixed
    assert resumed.settings.triangles == 26
    f.step(40)
    resumed.step(40)
    assert resumed.scene.triangles.tobytes() == f.scene.triangles.tobytes()


def test_mismatched_image_is_refused(ref_engine):
    f = Fitter(_target(32, 24), triangles=6, size=32, seed=0, engine=ref_engine)
    f.step(3)
    with pytest.raises(CheckpointError, match="24"):
        Fitter.resume(_target(32, 32), f.checkpoint(), engine=ref_engine)


def _damage(path, out, **change):
    with np.load(path) as z:
        data = {k: z[k] for k in z.files}
    state = json.loads(bytes(data["state"]).decode())
    for key, value in change.items():
        if key in data and key != "state":
            data[key] = value
        else:
            state[key] = value
    data["state"] = np.frombuffer(json.dumps(state).encode(), dtype=np.uint8)
    np.savez(out, **data)
    return out


def test_damaged_checkpoints_are_refused(ref_engine, tmp_path):
    f = Fitter(_target(32, 24), triangles=6, size=32, seed=0, engine=ref_engine)
    f.step(5)
    good = save_checkpoint(f.checkpoint(), tmp_path / "good.npz")
    assert load_checkpoint(good).iteration == 5
    cut = tmp_path / "cut.npz"
    cut.write_bytes(good.read_bytes()[:200])
    bad_raw = f.checkpoint().raw.copy()
    bad_raw[0, 0] = np.nan
    cases = {
        "cut": cut,
        "format": _damage(good, tmp_path / "format.npz", format="something-else"),
        "version": _damage(good, tmp_path / "version.npz", version=99),
        "settings": _damage(good, tmp_path / "settings.npz", settings={"no_such_setting": 1}),
        "nan": _damage(good, tmp_path / "nan.npz", raw=bad_raw),
        "shape": _damage(good, tmp_path / "shape.npz", n_triangles=50),
        "rngs": _damage(good, tmp_path / "rngs.npz", rngs=[]),
    }
    with zipfile.ZipFile(tmp_path / "nostate.npz", "w") as z:
        z.writestr("raw.npy", b"")
    cases["no state"] = tmp_path / "nostate.npz"
    (tmp_path / "text.npz").write_text("not a zip")
    cases["text"] = tmp_path / "text.npz"
    for name, path in cases.items():
        with pytest.raises(CheckpointError):
            load_checkpoint(path)
            pytest.fail(name)
    with pytest.raises(CheckpointError):
        load_checkpoint(tmp_path / "missing.npz")


def test_batch_checkpoints_are_not_resumed_as_one_image(ref_engine):
    from trifit import BatchFitter

    b = BatchFitter([_target(32, 24), _target(32, 24, seed=3)], triangles=6, size=32, engine=ref_engine)
    b.step(2)
    with pytest.raises(TrifitError, match="one-image"):
        Fitter.resume(_target(32, 24), b.checkpoint(), engine=ref_engine)


def test_an_in_memory_checkpoint_is_checked_as_a_file_is(ref_engine):
    """Fitter.resume of a Checkpoint changed in memory: the file's rules, as CheckpointError."""
    import dataclasses

    f = Fitter(_target(32, 24), triangles=6, size=32, seed=0, engine=ref_engine)
    f.step(5)
    ck = f.checkpoint()
    f.close()
    cases = {
        "moments disagree": (dataclasses.replace(ck, m=ck.m[:, :-1]), "disagree"),
        "nan": (dataclasses.replace(ck, raw=ck.raw * np.nan), "finite"),
        "count": (dataclasses.replace(ck, state={**ck.state, "n_triangles": 500}), "do not fit"),
        "iteration": (dataclasses.replace(ck, state={**ck.state, "iteration": "x"}), "damaged"),
        "state json": (dataclasses.replace(ck, state={**ck.state, "wall_s": float("nan")}), "no readable state"),
        "history": (dataclasses.replace(ck, histories=[(ck.histories[0][0], ck.histories[0][1][:-1])]), "differ"),
        "ids repeat": (dataclasses.replace(ck, state={**ck.state, "ids": [[0] * ck.n_triangles]}), "triangle ids"),
        "ids too few": (dataclasses.replace(ck, state={**ck.state, "ids": [[0]]}), "triangle ids"),
        "ids past the next": (dataclasses.replace(ck, state={**ck.state, "next_id": 0}), "triangle ids"),
    }
    for name, (bad, words) in cases.items():
        with pytest.raises(CheckpointError, match=words):
            Fitter.resume(_target(32, 24), bad, engine=ref_engine)
            pytest.fail(name)
    resumed = Fitter.resume(_target(32, 24), ck, engine=ref_engine)  # the untouched one goes on
    assert resumed.iteration == 5
    resumed.step(1)
    assert resumed.iteration == 6


def test_a_resumed_fit_keeps_its_triangle_ids(ref_engine):
    # ids (what pruning's newcomers and an edit's selection are named by) survive a checkpoint; one
    # from before they were kept resumes with its triangles numbered afresh and no newcomers
    import dataclasses

    f = Fitter(_target(32, 24), triangles=8, size=32, seed=0, engine=ref_engine, growth_stages=3, prune_cycle_min=5)
    f.plan(60)
    f.step(45)                                  # in a later pruning cycle, after its growth
    ids, mark = f.triangle_ids_all(), f.strategy.newcomers_from
    assert mark is not None and ids[0].tolist() != list(range(f.n_triangles))
    ck = f.checkpoint()
    resumed = Fitter.resume(_target(32, 24), ck, engine=ref_engine)
    assert [i.tolist() for i in resumed.triangle_ids_all()] == [i.tolist() for i in ids]
    assert resumed.strategy.newcomers_from == mark and resumed.next_triangle_id() == f.next_triangle_id()
    state = {k: v for k, v in ck.state.items() if k not in ("ids", "next_id")}
    state["strategy"] = {k: v for k, v in state["strategy"].items() if k != "newcomers_from"}
    old = Fitter.resume(_target(32, 24), dataclasses.replace(ck, state=state), engine=ref_engine)
    assert old.triangle_ids_all()[0].tolist() == list(range(f.n_triangles)) and old.strategy.newcomers_from is None
    old.step(5)


def test_a_fit_paused_at_a_sigma_probe_resumes_to_its_scene(ref_engine):
    # a sigma probe moves the image's final sigma at its iteration; a scene taken there before
    # the next run (the GUI's autosave, a paused fit's export: while over-grown its triangles are
    # the most costly to remove, at the current sigma) is the scene a fit resumed there gives
    target = _target(32, 24)
    f = Fitter(target, triangles=8, size=32, seed=1, engine=ref_engine)
    f.plan(240)
    probe = f.strategy.probe_at(0)
    f.step(probe - 1 - f.iteration)
    before = f.schedule.ends(1)
    f.step(1)
    ends = f.schedule.ends(1)
    assert f.iteration == probe and not np.array_equal(ends, before)  # (the probe moved it)
    g = Fitter.resume(target, f.checkpoint(), engine=ref_engine)
    want, got = f.scene, g.scene
    assert np.array_equal(g.schedule.ends(1), ends)
    assert got.sigma == want.sigma
    assert got.triangles.tobytes() == want.triangles.tobytes()
    g.close()
    f.close()
