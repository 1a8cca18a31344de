"""The fitter's mechanics: device-resident loop against the reference loop, determinism, live
changes, events at their iterations, submissions and pooled buffers (the strategy's decisions:
tests/test_strategy.py; the run loop: tests/test_run.py)."""

import json
import math

import numpy as np
import pytest

from trifit import AdapterError, Fitter, Scene, StopConditions, fitstate, fitter as fitter_mod, placement, reference as R
from trifit.fitloop import recorded_settings
from trifit.run import COARSE_COST_GUESS, PLAN_TAIL, FitRun, TimePlanner
from trifit.strategy import SIGMA_MAX_PX, plan_schedule

RENDER_CULL = 1e-5  # render/gpu/workspace.py CULL_TOLERANCE: the GPU loop culls as renders do


def _target(W=40, H=30, seed=0):
    rng = np.random.default_rng(seed)
    truth = Scene.random(12, W, H, seed=seed, sigma_px=1.0)
    return np.clip(R.render(truth) + rng.normal(0, 0.01, (H, W, 3)), 0, 1)


@pytest.mark.gpu
def test_gpu_loop_follows_the_reference_loop(gpu_engine, ref_engine):
    t = _target()
    # (the renders' culling budget: the mechanism against the float64 loop; the fit's looser
    # budget is its own test, test_the_fit_culls_at_its_own_tolerance)
    fg = Fitter(t, triangles=10, size=40, seed=3, engine=gpu_engine, cull_tolerance=RENDER_CULL)
    fr = Fitter(t, triangles=10, size=40, seed=3, engine=ref_engine)
    lg = [fg.step(5).loss for _ in range(2)]
    lr = [fr.step(5).loss for _ in range(2)]
    np.testing.assert_allclose(fg.history.losses, fr.history.losses, rtol=2e-4)
    a, b = fg.scene, fr.scene
    np.testing.assert_allclose(a.triangles, b.triangles, atol=2e-4)
    assert a.sigma == pytest.approx(b.sigma, rel=1e-6)
    assert lg[-1] < fg.history.losses[0] and lr[-1] < fr.history.losses[0]


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["gpu", "reference"])
def test_a_small_triangle_steps_in_proportion_to_its_size(backend, gpu_engine, ref_engine):
    # Adam's first step moves each vertex by its rate (the moments' bias corrected), so the steps
    # with and without the size rule differ by the rule's factor, triangle by triangle
    from trifit.fitloop import FitSettings, small_triangle_rates

    engine = gpu_engine if backend == "gpu" else ref_engine
    t = _target()
    steps = {}
    for px in (0.0, 8.0):
        f = Fitter(t, triangles=10, size=40, seed=3, engine=engine, strategy="fixed", small_triangle_px=px)
        before = f.scene.triangles.copy()
        f.step(1)
        steps[px] = np.abs(f.scene.triangles[:, :6] - before[:, :6])
        f.close()
    rates = small_triangle_rates(np.concatenate([before.ravel(), np.zeros(3)]), 10, 40, 30, 8.0)
    rates = rates[:100].reshape(10, 10)[:, :6]
    assert rates.min() < 0.9 and rates.max() == 1.0  # (small triangles and large: the test can tell)
    moved = steps[0.0] > 1e-5
    assert moved.sum() > 30
    np.testing.assert_allclose(steps[8.0][moved], steps[0.0][moved] * rates[moved], rtol=2e-3)
    # records from before the rule replay without it
    assert recorded_settings({})["small_triangle_px"] == 0.0 < FitSettings().small_triangle_px


def test_the_small_triangle_size_is_in_pixels_of_the_working_size(ref_engine):
    # as the vertex rate is: the half-size stage's loop gets half the size in its own pixels, so
    # a triangle steps at one rate whichever stage fits it
    f = Fitter(_target(80, 60), triangles=4, size=80, engine=ref_engine, coarse_min_size=32)
    f.plan(40)
    assert f.coarse and f._loop.settings.small_triangle_px == pytest.approx(3.0)
    f.step(20)
    assert not f.coarse and f._loop.settings.small_triangle_px == pytest.approx(6.0)
    assert f.settings.small_triangle_px == 6.0  # (what the scene records)
    f.close()


@pytest.mark.gpu
def test_fit_reduces_loss_and_is_deterministic(gpu_engine, tmp_path):
    t = _target(48, 36, seed=1)
    flat = float(np.mean((t - t.mean(axis=(0, 1))) ** 2))  # the loss of the mean colour alone
    paths = []
    for k in range(2):
        f = Fitter(t, triangles=20, size=48, seed=7, engine=gpu_engine)
        first = f.step(25)
        last = f.step(75)
        # measured from the flat colour: the first triangles are shaped to the target (0.8x flat)
        assert last.loss < 0.6 * flat and last.loss < 0.7 * f.history.losses[0]
        assert f.iteration == 100 and len(f.history) == 100 and first.iteration == 25
        p = tmp_path / f"s{k}.json"
        f.scene.save(p)
        paths.append(p)
        f.close()
    assert paths[0].read_bytes() == paths[1].read_bytes()
    meta = json.loads(paths[0].read_text())["meta"]
    assert meta["seed"] == 7 and meta["iterations"] == 100 and meta["software"].startswith("trifit")


@pytest.mark.gpu
@pytest.mark.parametrize("first", [0, 8])
def test_many_iterations_per_submission_and_no_allocation_per_step(gpu_engine, first):
    # steady state: no respawn events (they read back on purpose)
    f = Fitter(_target(), triangles=15, size=40, seed=0, engine=gpu_engine, chunk=20, respawn_every=0,
               first_submission=first)
    f.step(40)
    c0, p0 = gpu_engine.counters(), gpu_engine.pool_stats()
    f.step(40)
    c1, p1 = gpu_engine.counters(), gpu_engine.pool_stats()
    # 20 iterations a chunk: one submission, or 8 then 12 (the GPU starts while the 12 are encoded)
    assert c1["submissions"] - c0["submissions"] == (2 if first == 0 else 4)
    assert c1["readback_bytes"] - c0["readback_bytes"] <= 2 * (256 * 4 + 4096)  # loss ring + timestamps only
    assert p1["misses"] == p0["misses"] and p1["bytes"] == p0["bytes"]
    timings = f.timings()
    if gpu_engine.impl.timer.enabled:
        walks = {"forward+backward"} if f._loop.shape.fuses_backward else {"forward", "backward"}
        assert walks | {"reduce+adam"} <= set(timings["gpu_ms"])
    f.close()


@pytest.mark.gpu
def test_a_chunk_splits_by_the_measured_gpu_and_host_times(gpu_engine):
    from trifit.gpu.fitloop import PART_SLACK, submission_sizes
    f = Fitter(_target(), triangles=15, size=40, seed=0, engine=gpu_engine, chunk=100, first_submission=8,
               strategy="fixed")
    loop = f._loop
    assert loop._part_growth() == 2.0  # nothing measured yet: each part twice the one before
    c0 = gpu_engine.counters()["submissions"]
    f.step(100)
    assert gpu_engine.counters()["submissions"] - c0 == len(submission_sizes(100, 8)) == 4
    assert loop._host_ms_per_it > 0  # (the parts after the first were timed)
    if gpu_engine.impl.timer.enabled:
        assert loop._gpu_ms_per_it > 0
        growth = loop._part_growth()
        assert growth == pytest.approx(min(max(PART_SLACK * loop._gpu_ms_per_it / loop._host_ms_per_it, 2.0), 64.0))
        c1 = gpu_engine.counters()["submissions"]
        f.step(100)
        assert gpu_engine.counters()["submissions"] - c1 == len(submission_sizes(100, 8, growth))
    f.close()


def test_a_long_chunk_is_submitted_in_growing_parts():
    from trifit.gpu.fitloop import submission_sizes
    assert submission_sizes(100, 8) == [8, 16, 32, 44]
    assert submission_sizes(20, 8) == [8, 12] and submission_sizes(16, 8) == [16]
    assert submission_sizes(100, 0) == [100]
    # where the GPU takes 7x the host's time for an iteration, a part may be 7x the one before
    assert submission_sizes(100, 8, 7.0) == [8, 56, 36] and submission_sizes(50, 8, 7.0) == [8, 42]
    assert submission_sizes(100, 8, 1.2) == [8, 16, 32, 44]  # (never less than twice)
    for k in range(1, 260):
        for first in (1, 3, 8):
            for growth in (2.0, 3.7, 10.0):
                sizes = submission_sizes(k, first, growth)
                assert sum(sizes) == k and min(sizes) >= 1
                assert all(b <= 1.5 * growth * a for a, b in zip(sizes, sizes[1:]))  # each part ready in time


@pytest.mark.gpu
def test_a_chunk_in_several_submissions_fits_the_same(gpu_engine):
    scenes = []
    for first in (0, 8, 3):  # one submission a chunk; [8, 17]; [3, 6, 16]
        f = Fitter(_target(), triangles=12, size=40, seed=2, engine=gpu_engine, chunk=25, first_submission=first)
        f.step(60)
        scenes.append(f.scene)
        f.close()
    for other in scenes[1:]:  # the same dispatches in the same order: the same bits
        assert other.triangles.tobytes() == scenes[0].triangles.tobytes() and other.sigma == scenes[0].sigma


@pytest.mark.gpu
def test_iterations_encoded_through_the_c_entry_points_fit_the_same(gpu_engine, monkeypatch):
    import trifit.gpu.encode as encode

    scenes = []
    for native in (False, True):
        monkeypatch.setattr(encode, "NATIVE", native)
        f = Fitter(_target(), triangles=12, size=40, seed=2, engine=gpu_engine, chunk=25, first_submission=3)
        f.step(60)
        assert f._loop._iteration_dispatches().native == native
        scenes.append(f.scene)
        f.close()
    assert scenes[1].triangles.tobytes() == scenes[0].triangles.tobytes() and scenes[1].sigma == scenes[0].sigma
    assert encode.Repeats([], native=True).native  # the pinned wgpu-py has the entry points


@pytest.mark.parametrize("backend", ["gpu", "reference"])
def test_live_changes_between_steps(backend, request):
    eng = request.getfixturevalue("gpu_engine" if backend == "gpu" else "ref_engine")
    f = Fitter(_target(32, 24), triangles=8, size=32, seed=2, engine=eng)
    f.step(5)
    f.set_triangles(12)
    assert f.scene.n_triangles == 12 and f.n_triangles == 12
    f.step(3)
    f.set_triangles(6)
    assert f.scene.n_triangles == 6
    f.set_sigma(3.0)
    st = f.step(2)
    assert st.sigma_px == pytest.approx(3.0, rel=1e-5)
    assert f.scene.sigma * 24 == pytest.approx(3.0, rel=1e-5)
    f.set_learning_rate(0.5)
    # the vertex rate is set for a 176 px working size and scaled to this one (32 px): same pixels a step
    assert f.learning_rates()["lr_vertex"] == pytest.approx(0.5 * 0.006 * 176 / 32)
    assert f.learning_rates()["lr_colour"] == pytest.approx(0.5 * 0.05)
    assert [c[1:] for c in f.changes] == [["triangles", 12], ["triangles", 6], ["sigma", 3.0], ["lr", 0.5]]
    assert [c[0] for c in f.changes] == [5, 8, 8, 10]  # each at the iteration it applied at
    f.step(2)
    assert f.iteration == 12 and len(f.history) == 12
    sc = f.scene
    assert np.all((sc.triangles[:, 6:] > 0) & (sc.triangles[:, 6:] < 1))
    f.close()


def test_stop_conditions(ref_engine):
    f = Fitter(_target(16, 12), triangles=4, size=16, seed=0, engine=ref_engine, chunk=3)
    st = f.run(StopConditions(iterations=7))
    assert f.iteration == 7 and st.iteration == 7
    f.run(StopConditions(target_psnr=1.0))  # reached at once, decided at the next check (CHECK_EVERY)
    assert f.iteration == 50
    with pytest.raises(ValueError):
        f.run(StopConditions())


def test_resume_from_scene(ref_engine):
    s = Scene.random(5, 16, 12, seed=1)
    f = Fitter(_target(16, 12), triangles=99, size=16, seed=0, engine=ref_engine, init_scene=s)
    assert f.n_triangles == 5
    np.testing.assert_allclose(f.scene.triangles[:, :6], s.triangles[:, :6])
    g = Fitter(_target(16, 12), triangles=5, size=16, seed=0, engine=ref_engine, init_scene=s, respawn_every=0)
    g.plan(12)
    counts = [g.step(1) and g.n_triangles for _ in range(12)]
    assert g.settings.overgrow == 1.0 and counts == [5] * 12  # refining keeps the scene's count


@pytest.mark.gpu
def test_respawn_replaces_dead_triangles_on_top(gpu_engine):
    f = Fitter(_target(), triangles=12, size=40, seed=1, engine=gpu_engine, respawn_every=10)
    raw, m, v = f._loop.get_state()
    raw[0, 9] = -12.0                     # triangle 0 invisible (opacity ~6e-6)
    raw[0, 10:16] = raw[0, 10:16] + 5.0   # triangle 1 far off the frame
    f._loop.set_state(raw, m, v)
    f.step(10)
    assert f.respawned >= 2
    sc = f.scene
    assert np.all(sc.triangles[-2:, 9] > 0.05)              # re-placed (faint at first), on top
    assert np.all((sc.triangles[-2:, 0:6] > -0.5) & (sc.triangles[-2:, 0:6] < 1.5))


def test_coarse_stage_then_full_size(ref_engine):
    t = np.random.default_rng(0).uniform(0, 1, (128, 128, 3))
    f = Fitter(t, triangles=3, size=128, seed=0, engine=ref_engine, coarse_fraction=0.5, respawn_every=0)
    f.plan(4)
    assert f.coarse_until == 2
    f.step(1)
    assert f.coarse and f._loop.target_shape == (1, 64, 64, 3)
    f.step(2)
    assert not f.coarse and f._loop.target_shape == (1, 128, 128, 3) and f.iteration == 3 and f.full_from == 2
    f.plan(400)  # a later plan (a time limit's) would put the stage's end elsewhere: it stays where it was
    assert f.coarse_until == 2 and f.strategy.coarse_until() != 2


def test_time_limited_run_plans_the_schedule(ref_engine):
    f = Fitter(_target(16, 12), triangles=3, size=16, seed=0, engine=ref_engine, chunk=5)
    f.run(StopConditions(time_limit=1.0))
    # the plan was re-estimated from the measured speed, close to what was run
    assert 0.5 * f.iteration <= f.settings.planned_iterations <= 2.5 * f.iteration


def test_time_limited_run_ends_within_the_limit(ref_engine, monkeypatch):
    # a fake clock on which every iteration takes 7 ms: the run must stop at or before 1 s, not
    # one ~0.1 s step past it
    clock = [0.0]
    f = Fitter(_target(16, 12), triangles=3, size=16, seed=0, engine=ref_engine, chunk=50,
               respawn_every=0, overgrow=1.0, growth_stages=1, coarse_fraction=0)  # one loop throughout
    run = f._loop.run

    def timed_run(k, **hints):
        clock[0] += 0.007 * k
        assert clock[0] < 5.0, "the run did not stop"
        return run(k, **hints)

    f._loop.run = timed_run
    FitRun(f, StopConditions(time_limit=1.0), clock=lambda: clock[0]).run()
    assert 0.95 <= clock[0] <= 1.0 and f.iteration == int(clock[0] / 0.007 + 1e-9)


def test_growth_stages_add_triangles_on_schedule(ref_engine):
    f = Fitter(_target(24, 18), triangles=9, size=24, seed=0, engine=ref_engine, growth_stages=3,
               growth_until=0.6, respawn_every=0, coarse_fraction=0, overgrow=1.0)
    f.plan(10)                     # stages of 2 iterations: 3 -> 6 -> 9 triangles
    assert f.n_triangles == 3
    f.step(2)
    assert f.n_triangles == 6
    f.step(2)
    assert f.n_triangles == 9 and f.scene.n_triangles == 9
    f.step(4)
    assert f.n_triangles == 9 and f.iteration == 8


def test_overgrowth_grows_past_the_count_and_prunes_back_to_it(ref_engine):
    f = Fitter(_target(24, 18), triangles=8, size=24, seed=0, engine=ref_engine, growth_stages=2,
               growth_until=0.4, overgrow=1.5, prune_until=0.8, prune_stages=2, respawn_every=0,
               coarse_fraction=0)
    f.plan(20)  # growth: 6 -> 12 at iteration 4; pruning at 8 (-> 10) and 12 (-> 8)
    counts = []
    for _ in range(20):
        f.step(1)
        counts.append(f.n_triangles)
    assert counts[:3] == [6, 6, 6] and max(counts) == 12
    assert counts[7] == 10 and counts[-1] == 8 and f.scene.n_triangles == 8
    assert all(b <= a for a, b in zip(counts[counts.index(12):], counts[counts.index(12) + 1:]))


def test_long_plans_prune_in_cycles_that_grow_back(ref_engine):
    f = Fitter(_target(24, 18), triangles=8, size=24, seed=0, engine=ref_engine, growth_stages=1,
               growth_until=0.2, prune_until=0.8, overgrow=1.5, prune_stages=2, overgrow_cycles=3,
               prune_cycle_min=6, prune_cycles_floor=0, respawn_every=0, coarse_fraction=0)
    # 18 pruning iterations from 6: three cycles of 6 (12 -> 10 -> 8, back to 10 -> 8, ...), the last
    # one's drop to 8 in steps (prune_last_steps)
    f.plan(30)
    counts = []
    for _ in range(30):
        f.step(1)
        counts.append(f.n_triangles)
    assert counts[:5] == [12] * 5
    assert counts[5:24] == [10] * 3 + [8] * 3 + [10] * 3 + [8] * 3 + [10, 9, 9] + [8] * 3 + [8], counts
    assert counts[-1] == 8 and f.scene.n_triangles == 8
    f.plan(24)  # once pruning has begun, a new plan stretches the cycles it has
    assert f.strategy.prune_cycles() == 3
    g = _cycling_fitter(ref_engine)
    g.plan(24)  # before: a shorter plan fits fewer cycles of 6
    assert g.strategy.prune_cycles() == 2


def _cycling_fitter(engine, **settings):
    """8 triangles over-grown to 12, pruned in three cycles of 6 iterations from iteration 6 of 30,
    the last as the others (one replica, where a GPU's default would run two)."""
    f = Fitter(_target(24, 18), triangles=8, size=24, seed=0, engine=engine, growth_stages=1,
               growth_until=0.2, prune_until=0.8, overgrow=1.5, prune_stages=2, overgrow_cycles=3,
               prune_cycle_min=6, prune_cycles_floor=0,
               **{"respawn_every": 0, "coarse_fraction": 0, "replicas": 1, "prune_last_steps": 1, **settings})
    f.plan(30)
    return f


def test_later_pruning_cycles_restart_the_learning_rate(ref_engine):
    f = _cycling_fitter(ref_engine, cycle_lr=2.0)
    lr = {}
    for _ in range(30):
        f.step(1)
        lr[f.iteration + 1] = f._loop.schedule.at(f.iteration + 1)[1]  # what the next iteration uses
    main = plan_schedule(f.settings, f.short_side)
    assert all(lr[i] == pytest.approx(main.at(i)[1]) for i in range(2, 13))  # growth, first cycle
    assert lr[13] > 1.95 and lr[19] > 1.9                         # cycles 2 and 3 start over at 2.0
    assert lr[18] < lr[13] and lr[31] == pytest.approx(f.settings.lr_final, abs=0.01)  # ... down to lr_final
    g = _cycling_fitter(ref_engine, cycle_lr=0.0)
    g.step(14)
    assert g._loop.schedule == main                               # off: the plan's schedule throughout


def test_respawns_stop_where_pruning_begins(ref_engine):
    f = _cycling_fitter(ref_engine, respawn_every=2)
    at = []
    respawn = f.strategy._respawn
    f.strategy._respawn = lambda: at.append(f.iteration) or respawn()
    f.step(30)
    assert at and max(at) < 6            # pruning (from iteration 6) removes what stopped contributing
    g = Fitter(_target(24, 18), triangles=8, size=24, seed=0, engine=ref_engine, overgrow=1.0,
               respawn_every=2, respawn_until=0.8, growth_stages=1, coarse_fraction=0)
    g.plan(30)
    assert g.strategy.respawn_until() == pytest.approx(24)  # no over-growth: respawn_until of the plan


def test_a_longer_plan_checks_for_respawns_less_often(ref_engine):
    g = Fitter(_target(24, 18), triangles=8, size=24, seed=0, engine=ref_engine, overgrow=1.0,
               respawn_every=2, respawn_checks=5, respawn_until=1.0, growth_stages=1, coarse_fraction=0,
               sigma_probes=0)
    g.plan(10)
    assert g.strategy.respawn_period() == 2          # 5 checks fit at respawn_every
    g.plan(30)
    assert g.strategy.respawn_period() == 6          # at most 5 checks over the plan
    at = []
    respawn = g.strategy._respawn
    g.strategy._respawn = lambda: at.append(g.iteration) or respawn()
    g.step(30)
    assert at == [6, 12, 18, 24]                     # (not at the plan's end, 30)
    g.settings.respawn_checks = 0
    assert g.strategy.respawn_period() == 2          # no cap
    g.settings.respawn_every = 0
    assert g.strategy.respawn_period() == 0          # no checks at all
    assert recorded_settings({"respawn_every": 50})["respawn_checks"] == 0  # a record from before the cap


@pytest.mark.parametrize("overdue", ["skip", "run"])
def test_probes_a_shorter_plan_left_behind_are_skipped(ref_engine, overdue):
    # (a plan that keeps its progress leaves no probe behind; one re-stretched from iteration 0,
    # as records from before continuous_plans were, can)
    g = Fitter(_target(24, 18), triangles=6, size=24, seed=0, engine=ref_engine, overgrow=1.0, respawn_every=0,
               growth_stages=1, coarse_fraction=0, sigma_probes=3, probes_overdue=overdue, continuous_plans=False)
    g.plan(200)
    g.step(20)
    ran = []
    errors = g.sigma_errors
    g.sigma_errors = lambda scales: ran.append(g.iteration) or errors(scales)
    g.plan(25)                            # (a time limit's plan that shrank: every probe is past due)
    g.step(10)
    assert g.strategy.probes_done == 3
    # skipped: one probe for the three; run: back to back, each measuring the same scene
    assert ran == ([21] if overdue == "skip" else [21, 22, 23])
    assert recorded_settings({"sigma_probes": 6})["probes_overdue"] == "run"  # a record from before


@pytest.mark.gpu
def test_a_count_returned_to_reuses_its_loop_and_fits_the_same(gpu_engine, monkeypatch):
    scenes = []
    for keep in (8, 1):                     # 1: every count change builds a new loop
        monkeypatch.setattr(fitstate, "MAX_CACHED_LOOPS", keep)
        f = _cycling_fitter(gpu_engine, respawn_every=5)
        loops = {}
        for _ in range(30):
            f.step(1)
            loops.setdefault(f.n_triangles, set()).add(id(f._loop))
        assert len(f._loops) == (3 if keep == 8 else 1)  # counts 8, 10, 12
        if keep == 8:
            assert all(len(ids) == 1 for ids in loops.values())  # each count kept its one loop
        scenes.append(f.scene.to_json())
        f.close()
        assert not f._loops
    assert scenes[0] == scenes[1]


@pytest.mark.gpu
def test_events_read_the_state_that_came_back_with_the_losses(gpu_engine, monkeypatch):
    # placed on the host, growth, pruning, respawn checks, sigma probes and host snapshots after a
    # chunk take the state the chunk's submission copied back with its losses: same fit, fewer
    # round trips (placed on the device, only probes and snapshots read the state: the next test)
    scenes, subs = [], []
    for ride in (True, False):
        if not ride:
            from trifit.gpu.fitloop import GpuFitLoop
            run = GpuFitLoop.run
            monkeypatch.setattr(GpuFitLoop, "run", lambda self, n, read_state=False, _run=run, **kw: _run(self, n, **kw))
        f = _cycling_fitter(gpu_engine, respawn_every=3, sigma_probes=3, host_snapshot_every=5, placement="host")
        c0 = gpu_engine.counters()["submissions"]
        f.step(30)
        subs.append(gpu_engine.counters()["submissions"] - c0)
        assert f.strategy.probes_done == 3 and f._host_snapshot[3] >= 25
        scenes.append(f.scene.to_json())
        f.close()
    assert scenes[0] == scenes[1]
    assert subs[0] <= subs[1] - 8  # 10 of 33 round trips saved when written


@pytest.mark.gpu
def test_crash_recovery_snapshots_cost_no_round_trip_of_their_own(gpu_engine):
    # a snapshot due where an event changes the state is taken before it, from the state the
    # chunk brought back; a recovery from it runs that event again
    subs = []
    for every in (0, 5):
        f = _cycling_fitter(gpu_engine, placement="device", host_snapshot_every=every, sigma_probes=0)
        c0 = gpu_engine.counters()["submissions"]
        snaps, counts = set(), {}
        for _ in range(30):
            f.step(1)
            counts[f.iteration] = f.n_triangles
            if f._host_snapshot is not None:
                snaps.add(f._host_snapshot[3:7])
        subs.append(gpu_engine.counters()["submissions"] - c0)
        f.close()
    assert subs[1] == subs[0]
    # (iteration, count, coarse, event pending): the snapshots at 6 and 21 keep the count before
    # those iterations' pruning steps
    assert {(6, 12, False, True), (21, 10, False, True)} <= snaps and counts[6] == 10 and counts[21] == 8, sorted(snaps)
    f = _cycling_fitter(gpu_engine, placement="device", sigma_probes=0)
    assert f.strategy.next_event(5) == 6 and f.strategy.next_event(6) > 6  # what a recovery from 6 runs first
    f.close()


@pytest.mark.gpu
def test_count_changes_on_the_device_read_no_state(gpu_engine):
    # growth, pruning (removal costs from the records) and the half-size stage's end gather on the
    # device; only sigma probes (off here) and crash-recovery snapshots read the state
    before = gpu_engine.counters()
    f = _cycling_fitter(gpu_engine, placement="device", coarse_fraction=0.2, sigma_probes=0)
    counts = set()
    for _ in range(30):
        f.step(1)
        counts.add(f.n_triangles)
    assert not f.coarse and counts == {8, 10, 12} and f.n_triangles == 8
    got = {k: v - before[k] for k, v in gpu_engine.counters().items()}
    assert got["readback_state_bytes"] == 0 and got["readback_image_bytes"] == 0
    f.close()


@pytest.mark.gpu
@pytest.mark.parametrize("operation", ["add", "keep", "to_full_size"])
def test_a_count_change_on_the_device_is_the_hosts(gpu_engine, monkeypatch, operation):
    from trifit.fitstate import FitState

    states = []
    for on_device in (True, False):
        big = operation == "to_full_size"  # (a half-size stage needs a half size of 64 px or more)
        f = Fitter(_target(128, 96) if big else _target(), triangles=12, size=128 if big else 40, seed=3,
                   engine=gpu_engine, coarse_fraction=0.5, placement="device", **({} if big else {"strategy": "fixed"}))
        f.plan(100)
        f.step(7)
        with monkeypatch.context() as m:
            if not on_device:
                m.setattr(FitState, "places_on_device", property(lambda self: False))
            if operation == "add":
                new = np.random.default_rng(4).uniform(0.1, 0.9, (1, 3, 10))
                f.add(list(new))
            elif operation == "keep":
                f.keep(np.array([[0, 2, 3, 5, 8, 9, 11]]))
            else:
                assert f.coarse
                f.to_full_size()
        raw, mom, var = f._loop.get_state()
        states.append((raw, mom, var, f._loop.records(), f.n_triangles, f.triangle_ids_all()[0].tolist()))
        f.step(3)  # and the loop runs on from there
        f.close()
    (raw_d, m_d, v_d, rec_d, n_d, ids_d), (raw_h, m_h, v_h, rec_h, n_h, ids_h) = states
    assert n_d == n_h and ids_d == ids_h
    assert np.array_equal(raw_d, raw_h) and np.array_equal(m_d, m_h) and np.array_equal(v_d, v_h)
    # the records: the device's own sigmoids where the host's rounding of them is written
    np.testing.assert_allclose(rec_d, rec_h, rtol=1e-6, atol=1e-7)


@pytest.mark.gpu
def test_the_loop_brings_its_last_image_back_for_placement(gpu_engine):
    f = Fitter(_target(), triangles=10, size=40, seed=0, engine=gpu_engine, coarse_fraction=0,
               growth_stages=1, respawn_every=0, overgrow=1.0)
    loop = f._loop
    loop.run(5)
    assert loop.last_image() is None                 # not asked for
    before = [v[0] for v in loop.current_values()]
    loop.run(3, read_image=True)
    image = loop.last_image()[0]
    assert image.shape == f.target.shape
    # the last forward drew the parameters before the last Adam step: close to, not equal to, now
    tris, bg, sigma = (v[0] for v in loop.current_values())
    now = gpu_engine.render(Scene(40, 30, sigma, bg, tris))
    assert 0 < np.abs(image - now).max() < 0.05
    assert np.abs(image - gpu_engine.render(Scene(40, 30, before[2], before[1], before[0]))).max() > 0
    c0 = gpu_engine.counters()["submissions"]
    np.testing.assert_array_equal(f.placement_image()[0], image)  # growth and respawn place against it,
    assert gpu_engine.counters()["submissions"] == c0             # with no render or read of their own
    loop.run(1)
    assert loop.last_image() is None                 # stale after another iteration ...
    read = loop.read_image()                         # ... but the device still has it: a round trip
    assert read.shape == (f.replicas, 30, 40, 3) and np.abs(read[0] - image).max() > 0  # (a slot a replica)
    f.set_triangles(12)                              # a new state: no forward of it yet
    assert f._loop.read_image() is None
    f.close()


def test_sigma_probes_move_the_final_sigma_towards_a_better_loss(ref_engine):
    # a target drawn with soft edges: the probes after the anneal raise sigma, and the loss at the
    # learned sigma is below the loss at the planned one for the same triangles
    truth = Scene.random(6, 24, 18, seed=4, sigma_px=2.0)
    t = R.render(truth)
    f = Fitter(t, triangles=6, size=24, seed=0, engine=ref_engine, growth_stages=1, overgrow=1.0,
               coarse_fraction=0, respawn_every=0, sigma_end_px=0.5, sigma_fraction=0.5, sigma_probes=4)
    f.plan(40)
    f.step(40)
    assert f.strategy.probes_done == 4 and f.strategy.sigma_scales[0] > 1.2
    scene = f.scene
    planned = Scene(scene.width, scene.height, 0.5 / 18, scene.background, scene.triangles)
    assert np.mean((R.render(scene) - t) ** 2) < np.mean((R.render(planned) - t) ** 2)


def _first_probe_scales(ref_engine, target, end_px: float, setting: str, values) -> dict:
    """The image's final-sigma factor after the first probe for each value of ``setting``; the
    second probe then moves it on from there."""
    scales = {}
    for value in values:
        f = Fitter(target, triangles=6, size=24, seed=0, engine=ref_engine, growth_stages=1, overgrow=1.0,
                   coarse_fraction=0, respawn_every=0, sigma_end_px=end_px, sigma_fraction=0.5, sigma_probes=4,
                   **{setting: value})
        f.plan(40)
        f.step(f.strategy.probe_at(0))
        assert f.strategy.probes_run == 1
        scales[value] = f.strategy.sigma_scales[0]
        f.step(f.strategy.probe_at(1) - f.iteration)
        assert f.strategy.probes_run == 2 and f.strategy.sigma_scales[0] != pytest.approx(scales[value])
    return scales


def test_a_first_probe_that_wants_sharper_edges_goes_on_to_the_floor(ref_engine):
    # the anneal ends at 1 px over a target drawn at 0.2 px: the first probe wants sharper edges,
    # and with a floor of 0.5 px the image's sigma goes there at once, not one capped Newton step
    t = R.render(Scene.random(6, 24, 18, seed=4, sigma_px=0.2))
    scales = _first_probe_scales(ref_engine, t, 1.0, "sigma_floor_px", (0.0, 0.5))
    assert math.exp(-0.3) - 1e-12 <= scales[0.0] < 1.0      # (a step is at most 2 eps = 0.3 in log sigma)
    assert scales[0.5] == pytest.approx(0.5)


def test_a_first_probe_that_wants_softer_edges_goes_on_to_the_ceiling(ref_engine):
    # the anneal ends at 0.25 px over a target drawn at 2 px: the first probe wants softer edges,
    # and with a ceiling of 1 px the image's sigma goes there at once
    t = R.render(Scene.random(6, 24, 18, seed=4, sigma_px=2.0))
    scales = _first_probe_scales(ref_engine, t, 0.25, "sigma_ceiling_px", (0.0, 1.0))
    assert 1.0 < scales[0.0] <= math.exp(0.3) + 1e-12
    assert scales[1.0] == pytest.approx(4.0)
    assert recorded_settings({"sigma_probes": 6})["sigma_ceiling_px"] == 0.0  # a record from before: none


def test_probes_reach_soft_edges_from_a_sharp_anneal_end(ref_engine):
    # a target drawn at 3 px: from the anneal's end at 0.25 px the probes climb past 4x it (1 px), up
    # to the softest final sigma an anneal to 0.5 px allowed (SIGMA_MAX_PX)
    t = R.render(Scene.random(6, 24, 18, seed=4, sigma_px=3.0))
    f = Fitter(t, triangles=6, size=24, seed=0, engine=ref_engine, growth_stages=1, overgrow=1.0,
               coarse_fraction=0, respawn_every=0, sigma_end_px=0.25, sigma_fraction=0.4, sigma_probes=8)
    f.plan(60)
    f.step(60)
    assert f.strategy.probes_run == 8
    assert 4.0 < f.strategy.sigma_scales[0] <= SIGMA_MAX_PX / 0.25


def test_a_first_probe_that_wants_softer_edges_leaves_the_floor_alone(ref_engine):
    truth = Scene.random(6, 24, 18, seed=4, sigma_px=2.0)   # soft edges: the first probe raises sigma
    scenes = []
    for floor in (0.0, 0.25):
        f = Fitter(R.render(truth), triangles=6, size=24, seed=0, engine=ref_engine, growth_stages=1,
                   overgrow=1.0, coarse_fraction=0, respawn_every=0, sigma_end_px=0.5, sigma_fraction=0.5,
                   sigma_probes=4, sigma_floor_px=floor)
        f.plan(40)
        f.step(40)
        assert f.strategy.probes_run == 4 and f.strategy.sigma_scales[0] > 1.0
        scenes.append(f.scene.triangles)
    np.testing.assert_array_equal(scenes[0], scenes[1])
    assert recorded_settings({"sigma_probes": 6})["sigma_floor_px"] == 0.0  # a record from before: none


def test_a_count_set_by_hand_keeps_no_other_loops(ref_engine):
    f = _cycling_fitter(ref_engine)
    f.step(20)
    assert len(f._loops) == 3                  # 12 (growth), 10 and 8 (pruning cycles)
    f.set_triangles(9)                         # live changes pick arbitrary counts: nothing kept for them
    assert list(f._loops.values()) == [f._loop] and f.n_triangles == 9


@pytest.mark.gpu
def test_a_count_set_by_hand_caches_no_workspace_for_its_pruning(gpu_engine):
    # a live change picks an arbitrary count: its removal costs must not leave a cached workspace
    # behind (a soak of random counts grew the pool in steps when they did)
    f = Fitter(_target(), triangles=13, size=40, seed=0, engine=gpu_engine, overgrow=1.0,
               growth_stages=1, respawn_every=0, coarse_fraction=0)
    f.step(2)
    before = set(gpu_engine.impl._workspaces)
    f.set_triangles(7)
    assert f.n_triangles == 7 and set(gpu_engine.impl._workspaces) <= before
    f.close()


@pytest.mark.gpu
def test_gpu_loop_follows_the_reference_loop_through_a_restart(gpu_engine, ref_engine):
    from trifit.fitloop import FitSettings, Schedule
    t = _target()
    settings = FitSettings(triangles=6, size=40, cull_tolerance=RENDER_CULL)
    raw = fitter_mod.raw_from_scene(Scene.random(6, 40, 30, seed=2, sigma_px=1.0))
    # sigma anneals from iteration 4; the learning rate restarts at 3x at iteration 5
    sched = Schedule(0.05, 0.02, 10, 20, 0.1, iter_offset=4, lr_offset=5, lr_start=3.0)
    loops = [e.impl.fit_loop(t, raw, 6, settings, sched, 2) for e in (gpu_engine, ref_engine)]
    losses = [lp.run(8) for lp in loops]
    np.testing.assert_allclose(losses[0], losses[1], rtol=2e-4)
    np.testing.assert_allclose(loops[0].get_state()[0], loops[1].get_state()[0], atol=2e-4)
    assert loops[0].sigma == pytest.approx(sched.at(10)[0], rel=1e-6)
    plain = ref_engine.impl.fit_loop(t, raw, 6, settings, Schedule(0.05, 0.02, 10, 20, 0.1), 2)
    plain.run(8)
    assert np.abs(plain.get_state()[0] - loops[1].get_state()[0]).max() > 1e-3  # the restart mattered
    for lp in loops + [plain]:
        fitter_mod.release_loop(lp)


def test_gpu_loop_follows_the_reference_loop_through_a_new_schedule(gpu_engine, ref_engine):
    # each GPU iteration's Adam dispatch writes the next iteration's sigma into the scene record, so
    # a schedule set between runs (a probe, a cycle's restart, the GUI's slider) must replace it
    from trifit.fitloop import FitSettings, Schedule
    t = _target()
    # (the size rule off: a vertex's rate then follows its triangle's size, so the float32 loop's
    # last bits feed back into its steps; the rule against the reference is
    # test_a_small_triangle_steps_in_proportion_to_its_size and the fit above)
    settings = FitSettings(triangles=6, size=40, small_triangle_px=0.0)
    raw = fitter_mod.raw_from_scene(Scene.random(6, 40, 30, seed=4, sigma_px=1.0))
    first = Schedule(0.05, 0.02, 10, 20, 0.1)
    later = Schedule(0.01, 0.004, 10, 20, 0.1, lr_offset=3, lr_start=2.0)  # sigma 5x smaller at once
    loops = [e.impl.fit_loop(t, raw, 6, settings, first, 0) for e in (gpu_engine, ref_engine)]
    losses = []
    for lp in loops:
        a = lp.run(3)
        lp.set_schedule(later)
        losses.append(np.concatenate([a, lp.run(4)]))
    np.testing.assert_allclose(losses[0], losses[1], rtol=2e-4)
    np.testing.assert_allclose(loops[0].get_state()[0], loops[1].get_state()[0], atol=2e-4)
    assert loops[0].current_values()[2] == pytest.approx(later.at(7)[0], rel=1e-6)
    for lp in loops:
        fitter_mod.release_loop(lp)


def test_pruning_keeps_what_costs_most_to_remove(ref_engine):
    f = Fitter(_target(24, 18), triangles=12, size=24, seed=1, engine=ref_engine, growth_stages=1,
               respawn_every=0, coarse_fraction=0)
    f.plan(10)
    f.step(3)
    tris, bg, sigma = (v[0] for v in f._loop.current_values())
    costs = placement.removal_costs(tris, bg, sigma, f.target.astype(np.float64))
    f.keep(f.most_costly(6))
    best = np.sort(np.argsort(-costs)[:6])  # kept in their painting order
    np.testing.assert_allclose(f.scene.triangles, tris[best], atol=1e-12)
    assert f.n_triangles == 6 and f.step(1).loss > 0


def test_an_overgrown_fit_saves_and_stops_with_the_count_asked_for(ref_engine):
    f = Fitter(_target(24, 18), triangles=6, size=24, seed=0, engine=ref_engine, growth_stages=1,
               overgrow=2.0, respawn_every=0, coarse_fraction=0)
    assert f.n_triangles == 12 and f.scene.n_triangles == 6  # the 6 that would cost most to remove
    f.run(StopConditions(iterations=40), callback=lambda st: st.iteration < 10, chunk=5)
    assert f.iteration == 10 and f.n_triangles == 6 and f.scene.n_triangles == 6  # pruned on stopping


def test_large_counts_are_not_overgrown(ref_engine):
    f = Fitter(_target(24, 18), triangles=12, size=24, seed=0, engine=ref_engine, growth_stages=1,
               overgrow=1.5, overgrow_max=11, respawn_every=0, coarse_fraction=0)
    assert f.n_triangles == 12
    g = Fitter(_target(24, 18), triangles=12, size=24, seed=0, engine=ref_engine, growth_stages=1,
               overgrow=1.5, overgrow_max=12, respawn_every=0, coarse_fraction=0)
    assert g.n_triangles == 18


def test_a_count_set_by_hand_ends_overgrowth(ref_engine):
    f = Fitter(_target(24, 18), triangles=8, size=24, seed=0, engine=ref_engine, overgrow=1.5,
               respawn_every=0, coarse_fraction=0)
    f.set_triangles(5)
    assert f.n_triangles == 5 and f.settings.overgrow == 1.0
    f.plan(20)
    f.step(20)
    assert f.n_triangles == 5


def test_time_limited_short_plans_spend_more_at_half_size(ref_engine):
    t = np.random.default_rng(0).uniform(0, 1, (128, 128, 3))
    f = Fitter(t, triangles=3, size=128, seed=0, engine=ref_engine, respawn_every=0, growth_stages=1)
    f.plan(400)
    assert f.coarse_until == int(0.3 * 400)          # fixed iteration count: the default share
    f.strategy.time_budgeted = True                    # what a time limit's plans set
    assert f.coarse_until == int(0.7 * 400)          # short time-limited plan: up to coarse_max_fraction
    f.plan(3000)
    assert f.coarse_until == int(0.3 * 3000)         # long plans keep the default


def test_time_plan_measures_each_stage_on_its_own(ref_engine):
    # a synthetic clock: half-size iterations cost 0.1 s, full-size ones 0.5 s (not 4x: fixed costs)
    t = np.random.default_rng(0).uniform(0, 1, (128, 128, 3))
    f = Fitter(t, triangles=3, size=128, seed=0, engine=ref_engine, respawn_every=0, growth_stages=1)
    f.plan(40)
    f.step(10)
    assert f.coarse
    planner = TimePlanner(f, 0, 80.0)
    planner.replan(1.0)
    assert f.strategy.plan_guessed and f.changes[-1][1] == "guessed_plan"  # (the full size's cost is guessed)
    plan, c_end = f.settings.planned_iterations, f.coarse_until
    predicted = 1.0 + (c_end - 10) * 0.1 + (plan - c_end) * 0.1 / COARSE_COST_GUESS
    assert predicted == pytest.approx(80.0, abs=1.0)  # the plan ends with the time limit
    f.step(c_end - 10)
    elapsed = 1.0 + (c_end - 10) * 0.1
    planner.replan(elapsed)               # the chunk that ended the coarse stage
    guessed = f.settings.planned_iterations
    f.step(4)
    assert not f.coarse
    elapsed += 4 * 0.5 + 3.0              # the stage's first chunk: short, with its set-up
    planner.replan(elapsed)
    assert f.settings.planned_iterations == guessed  # not measured from the set-up
    assert f.strategy.plan_guessed
    f.step(20)
    elapsed += 20 * 0.5
    planner.replan(elapsed)
    assert not f.strategy.plan_guessed and f.changes[-1][1] == "time_plan"
    # the full-size speed is what was measured since its first chunk, not the average over the fit
    assert f.settings.planned_iterations == pytest.approx(f.iteration + (80.0 - elapsed) / 0.5, abs=2)
    # steady: more full-size chunks at the same speed leave the plan (and with it sigma) alone --
    # the GUI's own planner used to flip it every chunk once the half-size stage was over
    plans = set()
    for _ in range(6):
        f.step(5)
        elapsed += 5 * 0.5
        planner.replan(elapsed)
        plans.add(f.settings.planned_iterations)
        assert f.coarse_until <= f.iteration
    assert len(plans) == 1


@pytest.mark.parametrize("tail", [0.0, PLAN_TAIL])
def test_time_plan_ends_with_the_limit(ref_engine, monkeypatch, tail):
    # a synthetic clock whose iterations get dearer as the fit goes on (its later part over-grown,
    # pruning, probing): the stage's average speed lags, so each plan is long. With a tolerance of
    # 5% of the plan throughout (tail 0) the limit cuts the fit short of its plan's end, its
    # learning rate and sigma still on the way down; with PLAN_TAIL the plan follows the clock to
    # within 5% of what is left in its last tenth
    monkeypatch.setattr("trifit.run.PLAN_TAIL", tail)
    f = Fitter(_target(), triangles=3, size=40, seed=0, engine=ref_engine, respawn_every=0, growth_stages=1,
               coarse_fraction=0, sigma_probes=0)
    f.plan(400)
    planner = TimePlanner(f, 0, 100.0)
    elapsed = 0.0
    while True:
        cost = 0.4 + 0.006 * f.iteration
        if elapsed + 4 * cost > 100.0:
            break
        f.step(4)
        elapsed += 4 * cost
        planner.replan(elapsed)
    reached = f.iteration / f.settings.planned_iterations
    if tail:
        assert reached >= 0.985
    else:
        assert reached < 0.97


def test_history_costs_few_bytes_an_iteration():
    # a long fit keeps every iteration's loss: Python lists of ints and floats took ~85 bytes each,
    # which a 30-minute soak saw as steady RSS growth
    import tracemalloc
    h = fitter_mod.History()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for k in range(100):
        h.add(1 + 100 * k, np.linspace(0.1, 0.2, 100))
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(h) == 10_000 and list(h.iterations[:3]) == [1, 2, 3] and h.losses[-1] == pytest.approx(0.2)
    assert grown < 30 * 10_000
    h.truncate(9_000)
    assert len(h) == 9_000 and h.iterations[-1] == 9_000


@pytest.mark.gpu
def test_a_batch_too_large_for_one_buffer_renders_in_parts(gpu_engine, monkeypatch):
    """A sigma probe renders 3 scenes an image; where they do not fit one device buffer (1024 px
    with 5000 triangles on an H200) the render goes in parts, with the same pixels."""
    f = Fitter(_target(48, 36), triangles=10, size=48, seed=0, engine=gpu_engine, replicas=1)
    tris, bg, sigmas = f.values()
    tris3, bg3, s3 = np.repeat(tris, 3, axis=0), np.repeat(bg, 3, axis=0), np.repeat(sigmas, 3) * [0.8, 1.0, 1.2]
    whole = f.render(tris3, bg3, s3, transient=True)
    limits = gpu_engine.impl.ctx.limits
    from trifit.gpu.workspace import Shape

    one = max(Shape(1, 48, 36, 10).buffer_sizes().values())
    monkeypatch.setitem(limits, "max-buffer-size", one + 16)  # one scene fits, three do not
    with pytest.raises(AdapterError):
        gpu_engine.impl.render_batch(tris3, bg3, s3, 48, 36, transient=True)
    parts = f.render(tris3, bg3, s3, transient=True)
    assert parts.tobytes() == whole.tobytes()


@pytest.mark.gpu
def test_the_fit_culls_at_its_own_tolerance(gpu_engine):
    """A fit's iterations cull coverage at FitSettings.cull_tolerance (looser than renders', whose
    budget stays CULL_TOLERANCE): the fit loop's frame reaches ln(T / tolerance) sigma, and a fit at
    the renders' budget takes another path."""
    from trifit.gpu import workspace
    from trifit.gpu.layouts import FRAME

    target = np.random.default_rng(4).uniform(0, 1, (40, 56, 3)).astype(np.float32)
    scenes = {}
    for tol in (None, workspace.CULL_TOLERANCE):
        kw = {} if tol is None else {"cull_tolerance": tol}
        f = Fitter(target, triangles=30, size=56, seed=2, engine=gpu_engine, strategy="fixed", **kw)
        f.step(40)
        ws = f._loop.ws
        frame = FRAME.unpack(ws.frame_bytes(f.settings.loss))
        assert ws.cull_tolerance == f.settings.cull_tolerance
        assert frame["cull_k"] == pytest.approx(np.log(30 / f.settings.cull_tolerance), rel=1e-6)
        scenes[tol] = f.scene.to_json()
        f.close()
    assert Fitter(target, triangles=30, size=56, engine=gpu_engine).settings.cull_tolerance == 1e-3
    assert scenes[None] != scenes[workspace.CULL_TOLERANCE]
    assert gpu_engine.impl.workspace(workspace.Shape(1, 56, 40, 30)).cull_tolerance == workspace.CULL_TOLERANCE


@pytest.mark.gpu
def test_the_fit_divides_down_to_its_own_recompute_below(gpu_engine):
    """A fit's backward recovers the canvas beneath a triangle by division down to 1 - alpha =
    FitSettings.recompute_below (looser than the engine's passes' RECOMPUTE_BELOW): the fit loop's
    frame carries it, and where triangles' 1 - alpha lies between the two, a fit at the engine's
    threshold takes the other path."""
    from trifit.fitloop import FitSettings
    from trifit.gpu import workspace
    from trifit.gpu.layouts import FRAME

    target = np.random.default_rng(4).uniform(0, 1, (40, 56, 3)).astype(np.float32)
    start = Scene.random(30, 56, 40, seed=2, sigma_px=0.7, opacity=(0.96, 0.97))  # 1 - alpha 0.03-0.04 inside
    scenes = {}
    for below in (None, workspace.RECOMPUTE_BELOW):
        kw = {} if below is None else {"recompute_below": below}
        f = Fitter(target, triangles=30, size=56, seed=2, engine=gpu_engine, strategy="fixed", init_scene=start, **kw)
        f.step(20)
        frame = FRAME.unpack(f._loop.ws.frame_bytes(f.settings.loss))
        assert frame["recompute_below"] == pytest.approx(f.settings.recompute_below, rel=1e-6)
        scenes[below] = f.scene.to_json()
        f.close()
    assert FitSettings().recompute_below == 1 / 1024 < 0.03 < workspace.RECOMPUTE_BELOW
    assert scenes[None] != scenes[workspace.RECOMPUTE_BELOW]
    assert gpu_engine.impl.workspace(workspace.Shape(1, 56, 40, 30)).recompute_below == workspace.RECOMPUTE_BELOW


def _hidden_scene() -> Scene:
    """Three nearly opaque triangles over the whole 24 x 16 frame (transmittance ~1e-9 beneath
    them), the first in the list -- the bottom -- a small one beneath them all."""
    cover = [[-4.0, -4.0, 6.0, -4.0, 0.5, 6.0, c, 0.3, 0.6, 0.999] for c in (0.2, 0.5, 0.8)]
    return Scene(24, 16, 0.05, np.array([0.4, 0.4, 0.4]),
                 np.array([[0.3, 0.3, 0.7, 0.4, 0.5, 0.8, 0.9, 0.1, 0.1, 0.5], *cover]))


@pytest.mark.gpu
def test_the_fit_stops_its_walks_at_its_own_transmittance(gpu_engine):
    """A fit's iterations stop a pixel's walk at FitSettings.stop_transmittance: at 1e-6, as renders
    stop, a triangle that lies beneath it everywhere gets no gradient and Adam leaves it where it
    is; walking on to 1e-30 (the default, as the engine's loss and gradient do) moves it. The frame
    the fit loop uploads carries the stop, and the engine's own passes keep theirs."""
    from trifit.fitloop import FitSettings, Schedule, raw_from_scene
    from trifit.gpu import workspace
    from trifit.gpu.layouts import FRAME

    scene = _hidden_scene()
    target = np.random.default_rng(5).uniform(0, 1, (16, 24, 3)).astype(np.float32)
    raw = raw_from_scene(scene)
    moved = {}
    for stop in (1e-6, None):
        kw = {} if stop is None else {"stop_transmittance": stop}
        settings = FitSettings(triangles=4, size=24, **kw)
        loop = gpu_engine.impl.fit_loop(target, raw, 4, settings, Schedule(0.05, 0.05, 10, 10, 1.0), 0)
        frame = FRAME.unpack(loop.ws.frame_bytes("mse"))
        assert frame["stop_t"] == pytest.approx(settings.stop_transmittance, rel=1e-6)
        loop.run(5)
        after = loop.get_state()[0]
        moved[stop] = np.abs(after[:10] - raw[:10].astype(np.float32)).max()  # (the device holds float32)
        assert np.abs(after[10:40] - raw[10:40]).max() > 1e-4  # (the covering triangles learn either way)
        loop.release()
    assert FitSettings().stop_transmittance == workspace.STOP_TRANSMITTANCE_WITH_LOSS == 1e-30
    assert moved[1e-6] == 0.0 and moved[None] > 1e-6  # (a gradient of ~1e-9: Adam's eps damps its step)
    passes = gpu_engine.impl.workspace(workspace.Shape(1, 24, 16, 4))
    assert FRAME.unpack(passes.frame_bytes("mse"))["stop_t"] == pytest.approx(workspace.STOP_TRANSMITTANCE_WITH_LOSS)


@pytest.mark.parametrize("bad", [0.0, 1e-31, -1e-6, 1.0, float("nan")])
def test_a_stop_transmittance_outside_its_range_is_refused(ref_engine, bad):
    with pytest.raises(fitter_mod.TrifitError, match="stop_transmittance must be in"):
        Fitter(np.zeros((8, 8, 3)), triangles=2, size=8, engine=ref_engine, stop_transmittance=bad)


@pytest.mark.parametrize("bad", [0.0, -1e-3, 1.0, float("nan")])
def test_a_cull_tolerance_outside_zero_one_is_refused(ref_engine, bad):
    with pytest.raises(fitter_mod.TrifitError, match="cull_tolerance must be in"):
        Fitter(np.zeros((8, 8, 3)), triangles=2, size=8, engine=ref_engine, cull_tolerance=bad)


def test_a_record_from_before_cull_tolerance_resumes_culled_as_renders(ref_engine):
    from trifit.fitloop import LEGACY_CULL_TOLERANCE, recorded_settings

    f = Fitter(_target(), triangles=4, size=24, engine=ref_engine)
    f.step(3)
    ck = f.checkpoint()
    for key in ("settings", "initial_settings"):
        del ck.state[key]["cull_tolerance"], ck.state[key]["recompute_below"]
    g = Fitter.resume(_target(), ck, engine=ref_engine)
    assert g.settings.cull_tolerance == LEGACY_CULL_TOLERANCE == 1e-5 and f.settings.cull_tolerance == 1e-3
    assert recorded_settings({"cull_tolerance": 0.01})["cull_tolerance"] == 0.01
    # (and one from before recompute_below re-composited as the engine's passes do)
    assert g.settings.recompute_below == recorded_settings({})["recompute_below"] == 1 / 16
    g.close()
    f.close()
