"""The batched fit path: B images stepped in lockstep by one loop give what B single-image loops
give (batching never mixes images), on the GPU and against the reference loop; a BatchFitter runs
the same strategy as a Fitter, so each of its images ends as that image's own fit."""

import numpy as np
import pytest

from trifit import Fitter, Scene, StopConditions, reference as R
from trifit.fitloop import FitSettings
from trifit.fitter import BatchFitter
from trifit.placement import initial_raw
from trifit.run import FitRun
from trifit.strategy import plan_schedule as default_schedule

pytestmark = pytest.mark.gpu

T = 8


def _targets(n=3, W=40, H=30):
    return [np.clip(R.render(Scene.random(10, W, H, seed=10 + k, sigma_px=1.0)), 0, 1).astype(np.float32)
            for k in range(n)]


def _setup(targets, iters=12, chunk=5):
    s = FitSettings(triangles=T, size=max(targets[0].shape[:2]), chunk=chunk, planned_iterations=iters)
    sched = default_schedule(s, min(targets[0].shape[:2]))
    raws = [initial_raw(t, T, np.random.default_rng(k), s, sched.sigma_start) for k, t in enumerate(targets)]
    return s, sched, raws


def test_batched_gpu_loop_equals_single_loops(gpu_engine):
    targets = _targets()
    s, sched, raws = _setup(targets)
    loop = gpu_engine.impl.fit_loop(np.stack(targets), np.stack(raws), T, s, sched)
    losses = loop.run(12)  # 3 submissions of <= 5 iterations
    assert losses.shape == (12, 3)
    tris, bg, sigma = loop.current_values()
    raw, m, v = loop.get_state()
    assert tris.shape == (3, T, 10) and bg.shape == (3, 3) and raw.shape == m.shape == (3, T * 10 + 3)
    for b in range(3):
        one = gpu_engine.impl.fit_loop(targets[b], raws[b], T, s, sched)
        lb = one.run(12)
        assert lb.shape == (12,)
        np.testing.assert_allclose(losses[:, b], lb, rtol=1e-5, atol=1e-8)
        t1, bg1, sigma1 = one.current_values()
        np.testing.assert_allclose(tris[b], t1, atol=1e-5)
        np.testing.assert_allclose(bg[b], bg1, atol=1e-5)
        assert sigma == pytest.approx(sigma1)
        np.testing.assert_allclose(raw[b], one.get_state()[0], atol=1e-5)
        one.release()
        # losses decrease for every image
        assert losses[-1, b] < losses[0, b]
    loop.release()


def test_batch_of_one_equals_single_loop(gpu_engine):
    targets = _targets(1)
    s, sched, raws = _setup(targets, iters=6)
    a = gpu_engine.impl.fit_loop(np.stack(targets), np.stack(raws), T, s, sched)
    b = gpu_engine.impl.fit_loop(targets[0], raws[0], T, s, sched)
    la, lb = a.run(6), b.run(6)
    assert la.shape == (6, 1) and lb.shape == (6,)
    np.testing.assert_array_equal(la[:, 0], lb)
    np.testing.assert_array_equal(a.current_values()[0][0], b.current_values()[0])
    a.release(), b.release()


def test_segmented_batch_takes_each_image_s_own_segments(gpu_ctx):
    """The segmented backward (GPUs) cuts an image's tile lists by the image's own frame, never by
    the batch: 3 images of 121 tiles (363 together) walk the segments one such image walks alone,
    so each image's losses and parameters are the same bits either way."""
    from trifit import Engine
    from trifit.gpu import workspace

    eng = Engine("gpu", segmented=True)
    n = 40
    targets = _targets(3, 176, 176)
    one, three = workspace.Shape(1, 176, 176, n), workspace.Shape(3, 176, 176, n)
    assert one.n_tiles <= workspace.SHORT_SEGMENT_TILES < three.n_tiles * three.batch
    assert (one.seg_len, one.n_seg) == (three.seg_len, three.n_seg) and one.n_seg > 1
    s = FitSettings(triangles=n, size=176, chunk=3, planned_iterations=6)
    sched = default_schedule(s, 176)
    raws = [initial_raw(t, n, np.random.default_rng(k), s, sched.sigma_start) for k, t in enumerate(targets)]
    loop = eng.impl.fit_loop(np.stack(targets), np.stack(raws), n, s, sched)
    losses = loop.run(6)
    raw = loop.get_state()[0]
    for b in range(3):
        alone = eng.impl.fit_loop(targets[b], raws[b], n, s, sched)
        np.testing.assert_array_equal(losses[:, b], alone.run(6))
        np.testing.assert_array_equal(raw[b], alone.get_state()[0])
        alone.release()
    loop.release()


def test_fused_iteration_is_the_one_segment_walk_and_keeps_each_image_s_bits(gpu_ctx, monkeypatch):
    """Where a fit's forward bins its tiles and an image has FUSE_BACKWARD_TILES tiles (lowered
    here) its iteration walks each tile's forward and backward in one dispatch, with one backward
    segment a tile (segmented GPUs otherwise cut lists into segments). Unfused -- the same image in
    a batch too big for binning in the forward, or the fusion switched off -- it walks one segment
    a tile too: the same losses and parameters to the bit."""
    from trifit import Engine
    from trifit.gpu import workspace

    monkeypatch.setattr(workspace, "FUSE_BACKWARD_TILES", 16)  # a 64 x 64 image's tiles
    monkeypatch.setattr(workspace, "FUSED_BIN_GROUPS", 32)    # two such images bin in the forward, not three
    eng = Engine("gpu", segmented=True)
    n = 40
    targets = _targets(3, 64, 64)
    s = FitSettings(triangles=n, size=64, chunk=3, planned_iterations=6)
    sched = default_schedule(s, 64)
    raws = [initial_raw(t, n, np.random.default_rng(k), s, sched.sigma_start) for k, t in enumerate(targets)]
    assert workspace.Shape(1, 64, 64, n).n_seg > 1  # (outside a fit: segments)

    def run(loop):
        losses = loop.run(6)
        raw = loop.get_state()[0]
        kernels = [pl.label for pl, _, _ in loop._iteration_dispatches().dispatches]
        loop.release()
        return losses, raw, kernels

    three = eng.impl.fit_loop(np.stack(targets), np.stack(raws), n, s, sched)
    assert not three.shape.fuses_backward and three.shape.n_seg == 1
    losses, raw, kernels = run(three)
    assert "backward.wgsl:main" in kernels
    for b in range(3):
        alone = eng.impl.fit_loop(targets[b], raws[b], n, s, sched)
        assert alone.shape.fuses_backward and alone.shape.n_seg == 1
        got_losses, got_raw, kernels = run(alone)
        assert kernels == ["forward_backward.wgsl:fit_main", "adam.wgsl:main"]
        np.testing.assert_array_equal(losses[:, b], got_losses)
        np.testing.assert_array_equal(raw[b], got_raw)
    monkeypatch.setattr(workspace.Shape, "fuses_backward", property(lambda shape: False))
    unfused = eng.impl.fit_loop(targets[0], raws[0], n, s, sched)
    assert unfused.shape.n_seg == 1
    got_losses, got_raw, kernels = run(unfused)
    assert kernels[-2:] == ["backward.wgsl:main", "adam.wgsl:main"]
    np.testing.assert_array_equal(losses[:, 0], got_losses)
    np.testing.assert_array_equal(raw[0], got_raw)


def test_batched_reference_loop_follows_the_gpu(gpu_engine, ref_engine):
    targets = _targets(2, W=24, H=18)
    s, sched, raws = _setup(targets, iters=2)
    g = gpu_engine.impl.fit_loop(np.stack(targets), np.stack(raws), T, s, sched)
    r = ref_engine.impl.fit_loop(np.stack(targets), np.stack(raws), T, s, sched)
    lg, lr = g.run(2), r.run(2)
    assert lr.shape == (2, 2)
    np.testing.assert_allclose(lg, lr, rtol=2e-4)
    np.testing.assert_allclose(g.current_values()[0], r.current_values()[0], atol=2e-4)
    g.release()


def test_batched_rollback_restores_every_image(gpu_engine):
    from trifit.errors import NumericalFault

    targets = _targets(2, W=24, H=18)
    s, sched, raws = _setup(targets, iters=10, chunk=5)
    loop = gpu_engine.impl.fit_loop(np.stack(targets), np.stack(raws), T, s, sched)
    states = {0: loop.get_state()[0]}
    loop.run(5)
    states[5] = loop.get_state()[0]
    loop.inject_fault()  # the NaN is in the next chunk's first snapshot: back to the one before
    with pytest.raises(NumericalFault):
        loop.run(5)
    assert loop.iter in states
    np.testing.assert_array_equal(loop.get_state()[0], states[loop.iter])
    assert np.all(np.isfinite(loop.run(5)))
    loop.release()


# every event of the default strategy inside 60 iterations: a half-size stage, growth stages,
# over-growth and pruning cycles, respawns, sigma probes
EVENTFUL = dict(chunk=7, coarse_min_size=16, growth_until=0.3, prune_cycle_min=8, respawn_every=5,
                sigma_probes=3)


@pytest.mark.parametrize("strategy", ["default", "fixed"])
def test_batch_fitter_is_each_image_fitted_alone(gpu_engine, strategy):
    targets = _targets(3)
    seeds = [4, 5, 6]
    runs = []
    for _ in range(2):
        bf = BatchFitter(targets, triangles=T, size=40, seeds=seeds, engine=gpu_engine,
                         sources=["a", "b", "c"], strategy=strategy, **EVENTFUL)
        FitRun(bf, StopConditions(iterations=60)).run()
        runs.append(bf.scenes)
        assert np.all(bf.last_losses() < bf.losses_since(0)[0])  # (each image's: its replicas' lowest)
        bf.close()
    for a, b in zip(*runs):
        assert a.to_json() == b.to_json()
    scenes = runs[0]
    meta = scenes[1].meta
    assert meta["seed"] == 5 and meta["source"] == "b" and meta["iterations"] == 60 and meta["batched"] == 3
    assert meta["settings"]["strategy"] == strategy and meta["software"].startswith("trifit")
    for b in range(3):  # each image alone through Fitter gives its scene: events decided per image
        f = Fitter(targets[b], triangles=T, size=40, seed=seeds[b], engine=gpu_engine, strategy=strategy,
                   **EVENTFUL)
        f.run(StopConditions(iterations=60))
        alone = f.scene
        assert alone.n_triangles == scenes[b].n_triangles == T
        # the kernels index every buffer per image: the same bits, not merely close ones
        np.testing.assert_array_equal(alone.triangles, scenes[b].triangles)
        assert alone.sigma == scenes[b].sigma
        f.close()
    if strategy == "default":  # the probes tuned each image's own sigma
        assert len({s.sigma for s in scenes}) == 3


def test_batch_fitter_refuses_mixed_sizes(gpu_engine):
    from trifit.errors import TrifitError

    with pytest.raises(TrifitError, match="one working size"):
        BatchFitter([np.zeros((30, 40, 3)), np.zeros((40, 30, 3))], triangles=4, size=40, engine=gpu_engine)
