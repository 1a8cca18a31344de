"""Replicas (render/replicas.py): one image fitted as several slots of a batch, each with its own
random stream, every slot taking its image's best at each later pruning cycle's start. The
replicas must stay independent between selections, a selection must leave the slots equal to
the bit, and the whole must keep the fit's guarantees: the same bytes whatever the chunking,
a checkpoint resumes exactly, edits and locks name the triangles the user sees."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trifit import FitRun, Fitter, Scene, StopConditions, reference as R
from trifit.cli import main
from trifit.errors import TrifitError
from trifit.fitstate import FitState
from trifit.fitter import BatchFitter
from trifit.replicas import AUTO_MAX_TILE_TRIANGLES, AUTO_MAX_TILES, auto_replicas, winners
from trifit.videofit import ClipFit

# every event of the default strategy within a few hundred iterations at 64 px, with many
# short pruning cycles (so several selections)
EVENTFUL = dict(coarse_min_size=16, growth_until=0.3, prune_cycle_min=12, respawn_every=7,
                sigma_probes=3, host_snapshot_every=40)
PLAN = 240


def _target(W=64, H=48, seed=3):
    truth = Scene.random(30, W, H, seed=seed, sigma_px=1.2)
    return np.clip(R.render(truth) + np.random.default_rng(seed).normal(0, 0.02, (H, W, 3)), 0, 1)


def _fitter(engine, replicas=2, **settings):
    return Fitter(_target(), triangles=24, size=64, seed=5, engine=engine, replicas=replicas,
                  **{**EVENTFUL, **settings})


def _stepped(engine, iterations: int = PLAN, replicas: int = 2, finish: bool = False) -> Fitter:
    """A fit of PLAN iterations planned, stepped this far (and finished)."""
    f = _fitter(engine, replicas=replicas)
    f.plan(PLAN)
    f.step(iterations)
    if finish:
        f.finish()
    return f


def _bytes(scene: Scene) -> bytes:
    return scene.triangles.tobytes() + scene.background.tobytes() + np.float64(scene.sigma).tobytes()


class _Selections:
    """Every selection a fit makes: (iteration, source of each slot), and the slots' state right after."""

    def __init__(self, monkeypatch):
        self.seen: list = []
        orig = FitState.select_replicas

        def watched(fit):
            source = orig(fit)
            if source is not None:
                raw, m, v = fit._state()
                self.seen.append((fit.iteration, source.tolist(), raw, m, v, fit._loop.records()
                                  if hasattr(fit._loop, "records") else None, fit.triangle_ids_all()))
            return source

        monkeypatch.setattr(FitState, "select_replicas", watched)


# ---------------------------------------------------------------------- the rule and the choice
def test_winners_take_each_images_lowest_loss():
    got = winners(np.array([3.0, 1.0, 2.0, 2.0, np.nan, 5.0]), 2)
    assert got.tolist() == [1, 1, 2, 2, 5, 5]  # a tie goes to the lower replica, NaN loses
    assert winners(np.array([np.nan, np.nan]), 2).tolist() == [0, 0]
    assert winners(np.array([4.0, 1.0, 2.0]), 3).tolist() == [1, 1, 1]
    assert winners(np.array([1.0, 0.5]), 1).tolist() == [0, 1]


def test_auto_replicas_only_where_a_gpu_has_room():
    assert auto_replicas("DiscreteGPU", 176, 176, 150, "default") == 2  # (the issue-#5 command: 121 tiles)
    assert auto_replicas("DiscreteGPU", 176, 117, 200, "default") == 2  # (chelsea: 88)
    assert auto_replicas("DiscreteGPU", 176, 176, 200, "default") == 1  # (past the tile-triangle bound)
    assert auto_replicas("IntegratedGPU", 256, 256, 78, "default") == 2
    assert auto_replicas("DiscreteGPU", 256, 256, 79, "default") == 1
    assert auto_replicas("DiscreteGPU", 176, 176, 500, "default") == 1
    assert auto_replicas("DiscreteGPU", 257, 256, 10, "default") == 1  # (17 x 16 tiles)
    assert auto_replicas("DiscreteGPU", 512, 384, 1000, "default") == 1
    assert auto_replicas("CPU", 64, 64, 50, "default") == 1  # (lavapipe: a batch of two at half the speed)
    assert auto_replicas("DiscreteGPU", 64, 64, 50, "fixed") == 1  # (no cycles to select at)
    assert (AUTO_MAX_TILES, AUTO_MAX_TILE_TRIANGLES) == (256, 20000)


def test_the_number_chosen_is_recorded(gpu_engine):
    f = _fitter(gpu_engine, replicas=0)
    want = auto_replicas(gpu_engine.adapter["type"], 64, 48, 24, "default")
    assert (f.replicas, f.batch, f.images) == (want, want, 1)
    assert f.scene.meta["settings"]["replicas"] == want
    f.close()


def test_replicas_chosen_at_the_start_fit_as_replicas_asked_for(gpu_engine, monkeypatch):
    # the number is chosen after replica 0's first triangles are placed (a deferred engine's
    # backend comes up meanwhile); the fit is the one that number asked for gives
    from trifit import fitter as fitter_module

    asked = _stepped(gpu_engine, 60, replicas=2)
    monkeypatch.setattr(fitter_module, "auto_replicas", lambda *a: 2)
    chosen = _stepped(gpu_engine, 60, replicas=0)
    assert chosen.replicas == 2 and chosen.scene.meta["settings"] == asked.scene.meta["settings"]
    assert _bytes(chosen.scene) == _bytes(asked.scene)
    np.testing.assert_array_equal(chosen._state()[0], asked._state()[0])
    asked.close()
    chosen.close()


# ---------------------------------------------------------------------- the mechanics
def test_replica_zero_is_the_single_fit_until_the_first_selection(gpu_engine, monkeypatch):
    sel = _Selections(monkeypatch)
    _stepped(gpu_engine).close()
    assert len(sel.seen) >= 3, "the plan should select at several cycles"
    first = sel.seen[0][0]
    # (the selection runs at the event of iteration `first`)
    one, two = _stepped(gpu_engine, first - 1, replicas=1), _stepped(gpu_engine, first - 1)
    a, b, other = (np.asarray(h.losses) for h in (one.histories[0], *two.histories))
    assert len(a) == first - 1
    np.testing.assert_array_equal(a, b)  # slot 0 draws from the image's seed, untouched by slot 1
    assert not np.array_equal(a, other)  # slot 1 draws from its own stream
    one.close()
    two.close()


def test_a_selection_leaves_every_slot_the_best_ones_to_the_bit(gpu_engine, monkeypatch):
    sel = _Selections(monkeypatch)
    f = _stepped(gpu_engine)
    assert sel.seen
    for _it, source, raw, m, v, records, ids in sel.seen:
        assert source in ([0, 0], [1, 1])
        for a in (raw, m, v) + ((records,) if records is not None else ()):
            np.testing.assert_array_equal(a[0], a[1])
        np.testing.assert_array_equal(ids[0], ids[1])
    assert len(f.histories[0]) == len(f.histories[1]) == PLAN
    # the scene is the best slot's, and so are the history and the loss reported
    lead = f.leaders()[0]
    assert f.slot_losses()[lead] == f.slot_losses().min() == f.last_losses()[0]
    assert f.history is f.histories[lead]
    f.close()


def test_what_a_chunk_brought_for_the_event_follows_the_copies(gpu_engine, monkeypatch):
    # a selection permutes the error sums (and flags, costs) the chunk brought back and computes
    # the per-pixel errors again: the regrowth then places exactly as it would after reading
    # everything back afresh
    from trifit.gpu.fitloop import GpuFitLoop

    kept = _stepped(gpu_engine, finish=True)
    copy = GpuFitLoop.copy_images

    def copy_and_forget(loop, source):
        copy(loop, source)
        loop._drop_brought()

    monkeypatch.setattr(GpuFitLoop, "copy_images", copy_and_forget)
    fresh = _stepped(gpu_engine, finish=True)
    assert _bytes(kept.scene) == _bytes(fresh.scene)
    kept.close()
    fresh.close()


def test_replicas_keep_a_fits_bytes_whatever_the_chunks(gpu_engine):
    scenes = []
    for chunk in (None, 7, 64):
        f = _fitter(gpu_engine)
        FitRun(f, StopConditions(iterations=PLAN), chunk=chunk).run()
        scenes.append(_bytes(f.scene))
        f.close()
    assert scenes[0] == scenes[1] == scenes[2]


def test_a_checkpoint_of_replicas_resumes_exactly(gpu_engine):
    whole = _stepped(gpu_engine, finish=True)
    half = _stepped(gpu_engine, PLAN // 2 + 3)
    ck = half.checkpoint()
    assert ck.state["batch"] == 2
    half.close()
    resumed = Fitter.resume(_target(), ck, engine=gpu_engine)
    assert (resumed.replicas, resumed.images) == (2, 1)
    resumed.step(PLAN - resumed.iteration)
    resumed.finish()
    assert _bytes(resumed.scene) == _bytes(whole.scene)
    whole.close()
    resumed.close()


def test_the_reference_backend_selects_on_the_host(ref_engine, monkeypatch):
    sel = _Selections(monkeypatch)
    f = Fitter(_target(32, 24), triangles=10, size=32, seed=5, engine=ref_engine, replicas=3,
               **{**EVENTFUL, "placement": "host"})
    f.plan(120)
    f.step(120)
    assert sel.seen
    for _, source, raw, m, v, _, _ in sel.seen:
        assert len(set(source)) == 1
        for a in (raw, m, v):
            assert np.array_equal(a[0], a[1]) and np.array_equal(a[1], a[2])
    assert f.scene.n_triangles == 10


# ---------------------------------------------------------------------- what the user touches
def test_an_edit_and_a_lock_name_the_leading_replicas_triangles(gpu_engine):
    f = _stepped(gpu_engine, 130)
    tris, _, ids = f.triangles_now()
    lead = f.leaders()[0]
    assert np.array_equal(tris, f.values()[0][lead])
    f.edit({"op": "delete", "ids": [ids[0]]})
    after, _, ids_after = f.triangles_now()
    assert ids_after == ids[1:]
    np.testing.assert_allclose(after, tris[1:], atol=1e-6)
    raw = f._state()[0]
    np.testing.assert_array_equal(raw[0], raw[1])  # every replica took the edit from the same state
    f.set_locked([0, 2])
    assert f.locked == [0, 2] and all(list(i) == [0, 2] for i in f.locks)
    f.step(PLAN - f.iteration)
    f.finish()
    scene = f.scene
    assert scene.n_triangles == 24 and len(scene.extra["locked"]) == 2
    f.close()


def test_a_batch_of_replicas_reports_its_images(gpu_engine):
    targets = [_target(seed=3), _target(seed=4)]
    bf = BatchFitter(targets, triangles=24, size=64, seeds=[5, 6], engine=gpu_engine, replicas=2, **EVENTFUL)
    bf.plan(120)
    bf.step(120)
    bf.finish()
    assert (len(bf), bf.batch) == (2, 4)
    scenes = bf.scenes
    assert [s.meta["seed"] for s in scenes] == [5, 6] and scenes[0].meta["batched"] == 2
    lead = bf.leaders()
    assert lead[0] in (0, 1) and lead[1] in (2, 3)
    assert bf.member(1).history is bf.histories[lead[1]]
    with pytest.raises(IndexError):
        bf.member(2)
    bf.close()


def test_a_clip_runs_one_replica():
    with pytest.raises(TrifitError, match="one replica"):
        ClipFit(replicas=2)
    assert ClipFit(replicas=0)._make["replicas"] == 1


def test_the_command_line_takes_and_records_replicas(tmp_path, capsys, gpu_engine):
    img = tmp_path / "t.png"
    from PIL import Image

    Image.fromarray((_target() * 255).astype(np.uint8)).save(img)
    out = tmp_path / "t.json"
    assert main(["fit", str(img), "--iters", "40", "--size", "32", "--tris", "8", "--replicas", "2",
                 "-o", str(out), "--quiet"]) == 0
    assert json.loads(out.read_text())["meta"]["settings"]["replicas"] == 2
    again = tmp_path / "again.json"
    assert main(["fit", str(img), "--replay", str(out), "-o", str(again), "--quiet"]) == 0
    assert again.read_bytes() == out.read_bytes()
    capsys.readouterr()
    assert main(["fit", str(img), "--replicas", "9"]) == 2
    err = capsys.readouterr().err
    assert "--replicas" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("sequential", [True, False], ids=["one-by-one", "batched"])
def test_a_batch_fits_replicas_on_both_paths(tmp_path, gpu_engine, sequential):
    from PIL import Image

    from trifit.batch import run_batch
    from trifit.run import StopConditions as Stop

    for name, seed in (("a", 3), ("b", 4)):
        Image.fromarray((_target(seed=seed) * 255).astype(np.uint8)).save(tmp_path / f"{name}.png")
    out = tmp_path / "out"
    result = run_batch([str(tmp_path / "*.png")], out, triangles=8, size=32, stop=Stop(iterations=60), replicas=2,
                       engine=gpu_engine, progress=False, sequential=sequential)
    assert result.done == 2 and not result.failed
    for name in ("a", "b"):
        assert Scene.load(out / f"{name}.trifit.json").meta["settings"]["replicas"] == 2
