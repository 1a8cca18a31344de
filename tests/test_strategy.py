"""The fit policy (render/strategy.py): counts by iteration, events exactly where the plan
changes, and the plain fixed-count strategy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trifit import Fitter, Scene, StopConditions, reference as R
from trifit.fitloop import FitSettings, recorded_settings
from trifit.run import replay_run
from trifit.strategy import STRATEGIES, TIMED_CYCLE_MIN_GPU, make_strategy, timed_cycle_min


def _target(W=24, H=18, seed=0):
    return np.clip(R.render(Scene.random(12, W, H, seed=seed, sigma_px=1.0)), 0, 1)


def _wanted_by_formula(s, peak, it, pruning=False):
    """The count plan written out directly, one iteration at a time (growth stages up to the
    peak, then pruning cycles of prune_stages steps after a hold, the last cycle's drops after its
    first step each in prune_last_steps steps)."""
    plan, stages = s.planned_iterations, max(1, s.growth_stages)
    span = (s.prune_until - s.growth_until) * plan
    fit = int(span // max(1, s.prune_cycle_min))
    if fit < s.prune_cycles_floor:  # (a short plan: up to the floor's cycles, each at least half as long)
        fit = min(s.prune_cycles_floor, int(span // max(1, s.prune_cycle_min // 2)))
    n = max(1, min(s.overgrow_cycles, fit) if s.overgrow_cycles > 0 else fit)
    start = s.growth_until * plan
    cycle = max(1.0, (s.prune_until - s.growth_until) * plan / n)
    if peak > s.triangles and (pruning or it >= start - 1e-6):
        u = max(0.0, it - start)
        j = int((u + 1e-6) / cycle)
        if j >= n:
            return s.triangles
        hold = s.prune_hold * cycle
        uc = u - j * cycle
        sl = max(cycle - hold, 1e-9) / s.prune_stages
        k = 0 if uc < hold - 1e-6 else min(s.prune_stages, int((uc - hold + 1e-6) / sl) + 1)

        def after(i):  # the count after the cycle's step i (0-based)
            return max(s.triangles, peak - math.ceil((peak - s.triangles) * (i + 1) / s.prune_stages))

        if k == 0:
            return peak
        if j == n - 1 and k < s.prune_stages and s.prune_last_steps > 1:  # within the last cycle's drop to step k
            parts = s.prune_last_steps
            m = min(parts - 1, int((uc - hold - (k - 1) * sl + 1e-6) * parts / sl))
            return after(k - 1) - math.ceil((after(k - 1) - after(k)) * m / parts - 1e-9)
        return after(k - 1)
    if stages == 1:
        return peak
    stage_len = max(1.0, s.growth_until * plan / stages)
    return max(1, math.ceil(peak * min(stages, int((it + 1e-9) // stage_len) + 1) / stages))


def test_pruning_cycles_scale_with_the_plan(ref_engine):
    # a longer plan revises its scene in more cycles of the same length, up to the cap (150 by
    # default); past it the cycles grow longer. A cap of 0 lifts it.
    # (cycles of at least 100 iterations, a GPU time limit's: test_cycle_length_from_the_plan_and_the_adapter;
    # no floor for short plans: test_a_short_plan_has_more_shorter_cycles)
    kw = dict(triangles=150, size=24, seed=0, engine=ref_engine, prune_cycle_min=100, prune_cycles_floor=0)
    f = Fitter(_target(), **kw)
    capped = Fitter(_target(), overgrow_cycles=24, **kw)
    uncapped = Fitter(_target(), overgrow_cycles=0, **kw)
    assert f.settings.overgrow_cycles == 150
    assert (f.settings.growth_until, f.settings.prune_until) == (0.5, 0.9)  # the window: 0.4 of the plan
    for plan, cycles in ((300, 1), (7500, 30), (30000, 120), (60000, 240), (100000, 400)):
        for fitter in (f, capped, uncapped):
            fitter.plan(plan)
        assert uncapped.strategy.prune_cycles() == cycles
        assert f.strategy.prune_cycles() == min(cycles, 150)
        assert capped.strategy.prune_cycles() == min(cycles, 24)
        first, length, n = f.strategy.cycles()
        assert n == min(cycles, 150) and length >= f.settings.prune_cycle_min
        assert length == pytest.approx(0.4 * plan / n)
    for fitter in (f, capped, uncapped):
        fitter.close()


def test_a_short_plan_has_more_shorter_cycles(ref_engine):
    # where fewer than prune_cycles_floor (10) cycles of prune_cycle_min fit, a plan has as many of
    # half that length as fit, up to the floor: the count never falls as a plan lengthens, and a
    # long plan's cycles are as without the floor. A record from before the floor replays without it.
    f = Fitter(_target(), triangles=150, size=24, seed=0, engine=ref_engine)
    g = Fitter(_target(), triangles=150, size=24, seed=0, engine=ref_engine, prune_cycles_floor=0)
    assert f.settings.prune_cycles_floor == 10 and f.settings.prune_cycle_min == 50
    counts = []
    for plan, without, floored in ((100, 1, 1), (300, 2, 4), (600, 4, 9), (1000, 8, 10), (1240, 9, 10),
                                   (1250, 10, 10), (2250, 18, 18), (7500, 60, 60)):
        f.plan(plan)
        g.plan(plan)
        assert (g.strategy.prune_cycles(), f.strategy.prune_cycles()) == (without, floored), plan
        assert f.strategy.cycles()[1] >= 25 or plan < 125
        counts.append(f.strategy.prune_cycles())
    assert counts == sorted(counts)
    assert recorded_settings({"prune_cycle_min": 50})["prune_cycles_floor"] == 0
    f.close()
    g.close()


def test_cycle_length_from_the_plan_and_the_adapter(ref_engine, monkeypatch):
    # Pruning cycles are at least prune_cycle_min (50) iterations long; a time-limited plan's at
    # least timed_cycle_min, which 0 (the default) lets the adapter's type decide: prune_cycle_min's
    # where the fit computes on a CPU (the reference backend, lavapipe), at least 100 on a GPU,
    # whose events cost the clock iterations. The choice is recorded, so a replay on any adapter
    # plans the same cycles, and a record from before either setting replays as it ran.
    assert (FitSettings().prune_cycle_min, FitSettings().timed_cycle_min) == (50, 0)
    assert (timed_cycle_min(50, True), timed_cycle_min(50, False), timed_cycle_min(200, False)) == \
        (50, TIMED_CYCLE_MIN_GPU, 200) == (50, 100, 200)
    cpu = Fitter(_target(), triangles=150, size=24, seed=0, engine=ref_engine)
    assert cpu.settings.timed_cycle_min == cpu.initial_settings["timed_cycle_min"] == 50
    for time_budgeted in (False, True):
        cpu.plan(7500, time_budgeted=time_budgeted)
        assert cpu.strategy.prune_cycles() == 60  # 0.4 of the plan in cycles of 50
    chosen = Fitter(_target(), triangles=150, size=24, seed=0, engine=ref_engine, prune_cycle_min=70, timed_cycle_min=90)
    assert (chosen.settings.prune_cycle_min, chosen.settings.timed_cycle_min) == (70, 90)  # lengths asked for are kept
    monkeypatch.setattr(type(ref_engine), "on_cpu", property(lambda self: False))
    gpu = Fitter(_target(), triangles=150, size=24, seed=0, engine=ref_engine)
    assert gpu.settings.prune_cycle_min == 50 and gpu.settings.timed_cycle_min == gpu.initial_settings["timed_cycle_min"] == 100
    gpu.plan(7500)
    assert gpu.strategy.prune_cycles() == 60  # a fixed plan: cycles of 50 on a GPU too
    gpu.plan(7500, time_budgeted=True)
    assert gpu.strategy.prune_cycles() == 30  # a time limit's: of 100
    assert gpu.strategy.cycles()[1] == pytest.approx(100.0)
    legacy = recorded_settings({"overgrow": 1.75})  # a record from before either setting: cycles of 100
    assert (legacy["prune_cycle_min"], legacy["timed_cycle_min"]) == (100, 100)
    lavapipe = recorded_settings({"prune_cycle_min": 50})  # ... and one from before timed_cycle_min: its time
    assert (lavapipe["prune_cycle_min"], lavapipe["timed_cycle_min"]) == (50, 50)  # limits planned prune_cycle_min
    assert recorded_settings({"prune_cycle_min": 50, "timed_cycle_min": 100})["timed_cycle_min"] == 100
    for f in (cpu, chosen, gpu):
        f.close()


@pytest.mark.parametrize("settings", [
    {},                                                        # the defaults: as many cycles as fit
    {"overgrow_cycles": 1, "prune_until": 0.75},               # one cycle
    {"prune_hold": 0.5},                                       # each cycle holds its peak first
    {"overgrow_cycles": 3, "prune_stages": 8, "prune_hold": 0.3},
    {"prune_last_steps": 1},                                   # the last cycle prunes as the others
    {"overgrow_cycles": 2, "prune_stages": 3, "prune_last_steps": 5, "prune_hold": 0.2},
])
def test_the_count_plan_and_its_events(ref_engine, settings):
    f = Fitter(_target(), triangles=150, size=24, seed=0, engine=ref_engine, respawn_every=0,
               coarse_fraction=0, sigma_probes=0, **settings)
    st = f.strategy
    for plan in (1111, 3777, 4999, 5000):
        f.plan(plan)
        wanted = [st.wanted(i) for i in range(plan + 2)]
        assert wanted == [_wanted_by_formula(f.settings, st.peak(), i) for i in range(plan + 2)]
        assert len(set(wanted[int(f.settings.growth_until * plan):])) > 1  # the plan prunes
        # an event at every iteration where the wanted count changes (events in between are harmless)
        events, it = set(), 0
        while it <= plan:
            it = st.next_event(it)
            events.add(it)
        changes = {i for i in range(1, plan + 2) if wanted[i] != wanted[i - 1]}
        assert changes <= events, sorted(changes - events)[:5]


def test_the_last_cycle_prunes_in_steps(ref_engine):
    # the last cycle's pruning leaves the scene the fit ends with: it drops from its first step's
    # count in prune_last_steps steps (4), ending where the other cycles' drop falls; the earlier
    # cycles and every other step are as with one step (a record from before replays so)
    counts = {}
    for steps in (4, 1):
        f = Fitter(_target(), triangles=150, size=24, seed=0, engine=ref_engine, prune_last_steps=steps,
                   prune_cycle_min=100, prune_cycles_floor=0)  # (cycles of 100, as many as fit)
        f.plan(1400)
        counts[steps] = f.strategy.count_plan()
        start, length, n = f.strategy.cycles()
        f.close()
    assert f.settings.prune_stages == 2 and n == 5  # cycles of 112 iterations: 150 -> 206 -> 150 in each
    last = math.ceil(start + (n - 1) * length - 1e-6)
    assert [c for c in counts[1] if c[0] < last] == [c for c in counts[4] if c[0] < last]
    assert [c for c in counts[1] if c[0] >= last] == [(1148, 206), (1204, 150), (1260, 150)]
    assert [c for c in counts[4] if c[0] >= last] == [(1148, 206), (1162, 192), (1176, 178), (1190, 164),
                                                      (1204, 150), (1260, 150)]
    assert recorded_settings({})["prune_last_steps"] == 1  # a record from before: one step


def test_the_fixed_strategy_keeps_its_count_and_has_no_events(ref_engine):
    f = Fitter(_target(), triangles=9, size=24, seed=0, engine=ref_engine, strategy="fixed")
    assert f.n_triangles == 9 and not f.coarse and f.strategy.next_event(0) > 10 ** 9
    counts = []
    f.run(StopConditions(iterations=30), callback=lambda st: counts.append(st.n_triangles))
    assert set(counts) == {9} and f.respawned == 0 and f.scene.meta["settings"]["strategy"] == "fixed"
    g = Fitter(_target(), triangles=9, size=24, seed=0, engine=ref_engine)
    assert g.n_triangles != 9 or g.coarse  # the default strategy starts otherwise


def test_unknown_strategies_are_refused(ref_engine):
    from trifit.errors import TrifitError

    assert STRATEGIES == ("default", "fixed")
    with pytest.raises(TrifitError, match="unknown strategy 'greedy'"):
        Fitter(_target(), triangles=4, size=24, engine=ref_engine, strategy="greedy")
    with pytest.raises(ValueError):
        make_strategy("greedy", None)


def test_a_new_plan_moves_later_events_only(ref_engine):
    # a plan change between events (a time limit re-planning) moves later events, never the
    # ones that already ran: an event at or before the current iteration is not run again
    f = Fitter(_target(), triangles=9, size=24, seed=0, engine=ref_engine, growth_stages=3, growth_until=0.6,
               respawn_every=0, coarse_fraction=0, overgrow=1.0, sigma_probes=0)
    f.plan(10)                      # stages of 2 iterations: 3 -> 6 -> 9
    f.step(2)
    assert f.n_triangles == 6
    f.plan(20)                      # progress 0.2 at 2, now 0.8 / 18 an iteration: the last step (0.4) at 7
    assert f.strategy.plan_origin == pytest.approx(-2.5) and f.strategy.next_event(2) == 7
    f.step(2)
    assert f.n_triangles == 6
    f.step(4)
    assert f.n_triangles == 9


def test_a_longer_plan_during_growth_waits_instead_of_pruning(ref_engine):
    # where a plan change re-stretches the schedules from iteration 0 (records from before
    # continuous_plans), a time limit's plan that grows mid-growth moves the growth's steps
    # later: the fit keeps the triangles it has and waits for them, rather than prune -- which
    # would end its growth for good and start its pruning cycles early
    f = Fitter(_target(), triangles=6, size=24, seed=0, engine=ref_engine, growth_stages=3, growth_until=0.5,
               prune_until=0.8, overgrow=2.0, prune_stages=2, respawn_every=0, coarse_fraction=0, sigma_probes=0,
               continuous_plans=False)
    f.plan(30)                                   # peak 12: 4 -> 8 at 5 -> 12 at 10, cycles from 15
    f.step(6)
    assert f.n_triangles == 8 and not f.strategy.pruning
    f.plan(120)                                  # stages at 0, 20, 40: iteration 6 wants 4 now, fewer than
    assert f.strategy.wanted(7) == 4 and f.strategy._count_change(7) is None  # the 6 asked for
    assert f.strategy.next_event(6) == 20        # the next growth step, not a prune at 7
    f.step(14)
    assert f.n_triangles == 8 and not f.strategy.pruning
    f.step(1)                                    # 20: 8 is what the plan wants
    assert f.n_triangles == 8
    f.step(20)                                   # 40: the peak
    assert f.n_triangles == 12 and not f.strategy.pruning
    f.set_triangles(5)                           # (a count set by hand applies at once, as before)
    assert f.n_triangles == 5
    # records from before growth_waits replay as they ran: pruned at once, which ended the growth
    old = Fitter(_target(), triangles=6, size=24, seed=0, engine=ref_engine, growth_stages=3, growth_until=0.5,
                 prune_until=0.8, overgrow=2.0, prune_stages=2, respawn_every=0, coarse_fraction=0, sigma_probes=0,
                 growth_waits=False, continuous_plans=False)
    old.plan(30)
    old.step(6)
    old.plan(120)
    assert old.strategy._count_change(7) == ("prune", 6) and old.strategy.next_event(6) == 7
    assert recorded_settings({"triangles": 6})["growth_waits"] is False


def test_records_keep_their_pruning_window():
    # a record that names its window replays with it; one from before prune_until was recorded
    # pruned until 0.85 (the default then, 0.9 now)
    assert recorded_settings({"triangles": 6})["prune_until"] == 0.85
    assert recorded_settings({"triangles": 6, "prune_until": 0.9})["prune_until"] == 0.9
    assert recorded_settings({"triangles": 6, "prune_until": 0.85})["prune_until"] == 0.85


def test_pruning_does_not_begin_on_a_guessed_plan(ref_engine):
    # a time limit's plan made before the working size's speed is measured can be several times
    # short: its cycles would begin pruning a fraction of the way into the fit, for good. On such
    # a plan the count holds at the peak; the measured plan's cycles prune
    kw = dict(triangles=6, size=24, seed=0, engine=ref_engine, growth_stages=1, growth_until=0.5, prune_until=0.8,
              overgrow=2.0, prune_stages=2, respawn_every=0, coarse_fraction=0, sigma_probes=0)
    f = Fitter(_target(), **kw)
    f.plan(20, time_budgeted=True, guessed=True)   # one cycle: 12 until 10, 9 until 13, then 6
    f.step(12)
    assert f.n_triangles == 12 and not f.strategy.pruning
    assert f.strategy._count_change(13) is None
    f.plan(20, time_budgeted=True)                 # the same plan, measured: the cycle prunes now
    assert f.strategy._count_change(13) == ("prune", 6) and f.strategy.next_event(12) == 13
    f.step(1)
    assert f.n_triangles == 6 and f.strategy.pruning
    assert [kind for _, kind, _ in f.changes] == ["guessed_plan", "time_plan"]
    # a checkpoint keeps the flag; a replay of the record repeats the fit
    assert f.strategy.state()["plan_guessed"] is False
    f.step(7)
    f.finish()
    replay = Fitter(_target(), engine=ref_engine, **f.scene.meta["settings"])
    replay_run(replay, f.scene.meta).run()
    assert replay.scene.to_json() == f.scene.to_json()


def test_a_short_plan_at_half_size_prunes_on_its_guess(ref_engine, monkeypatch):
    # a short time-limited plan (a slow adapter) spends most of it at half size, past the
    # pruning's start: the working size's speed cannot be measured before the pruning is due, so
    # on a CPU adapter (the reference's type), where the guess is good, the cycles begin on the
    # plan made at half size, where a budgeted plan of its length prunes; records from before
    # prune_in_coarse waited for the measurement, and replay so
    kw = dict(triangles=6, size=24, seed=0, engine=ref_engine, growth_stages=1, growth_until=0.5, prune_until=0.8,
              overgrow=2.0, prune_stages=2, respawn_every=0, coarse_fraction=0.3, coarse_min_size=8, sigma_probes=0)
    f = Fitter(_target(), **kw)
    f.plan(20, time_budgeted=True, guessed=True)   # a short plan: half size until 0.7 of it (14)
    st = f.strategy
    assert f.coarse and st.coarse_until() == 14 and st.cycles()[0] == 10
    f.step(9)
    assert f.n_triangles == 12 and st.plan_guessed and not st.pruning
    assert st._count_change(10) == ("prune", 9) and st.next_event(9) == 10
    f.step(1)
    assert f.coarse and st.pruning and st.plan_guessed and f.n_triangles == 9
    f.step(9)
    f.finish()
    replay = Fitter(_target(), engine=ref_engine, **f.scene.meta["settings"])  # (the plan's record repeats it)
    replay_run(replay, f.scene.meta).run()
    assert replay.scene.to_json() == f.scene.to_json()
    old = Fitter(_target(), **kw, prune_in_coarse=False)
    old.plan(20, time_budgeted=True, guessed=True)
    old.step(11)
    assert old.coarse and not old.strategy.pruning and old.n_triangles == 12
    assert old.strategy._count_change(11) is None
    assert recorded_settings({"triangles": 6})["prune_in_coarse"] is False
    # a longer plan's half-size stage ends before its cycles begin: its guess still waits
    g = Fitter(_target(), **kw)
    g.plan(4000, time_budgeted=True, guessed=True)
    assert g.strategy.coarse_until() < g.strategy.cycles()[0] and not g.strategy._prunes_at_half_size()
    # on a GPU the guess can be several times short: the short plan's pruning waits there
    monkeypatch.setitem(ref_engine.impl.adapter, "type", "DiscreteGPU")
    gpu = Fitter(_target(), **kw)
    gpu.plan(20, time_budgeted=True, guessed=True)
    gpu.step(11)
    assert gpu.coarse and not gpu.strategy.pruning and gpu.n_triangles == 12


def test_a_shorter_plan_prunes_at_the_next_iteration(ref_engine):
    # a time limit re-plans between chunks: when the new plan wants fewer triangles than the fit
    # has, the next iteration is an event (not the new plan's next step). (A plan that keeps its
    # progress never wants that; records from before continuous_plans re-stretched from 0.)
    f = Fitter(_target(), triangles=8, size=24, seed=0, engine=ref_engine, growth_stages=1, growth_until=0.2,
               prune_until=0.8, overgrow=1.5, prune_stages=2, prune_last_steps=1, overgrow_cycles=1, respawn_every=0,
               coarse_fraction=0, sigma_probes=0, continuous_plans=False)
    f.plan(100)                                  # 12 until 20, then 10, then 8 from 50
    f.step(15)
    assert f.n_triangles == 12 and f.strategy.next_event(15) == 20
    f.plan(40)                                   # 12 until 8, 10 until 20: iteration 16 wants 10
    assert f.strategy.next_event(15) == 16
    f.step(1)
    assert f.n_triangles == 10 and f.strategy.next_event(16) == 20
    f.finish()                                   # (what the end of a run does)
    replay = Fitter(_target(), engine=ref_engine, **f.scene.meta["settings"])
    replay_run(replay, f.scene.meta).run()      # the plans at their iterations: the same fit
    assert replay.scene.to_json() == f.scene.to_json()


def _cycling(ref_engine, **kw):
    return Fitter(_target(), **{**dict(triangles=6, size=24, seed=0, engine=ref_engine, growth_stages=3,
                                       growth_until=0.3, prune_until=0.8, overgrow=2.0, prune_stages=2,
                                       respawn_every=0, coarse_fraction=0, sigma_probes=0, prune_cycle_min=10,
                                       prune_cycles_floor=0), **kw})


@pytest.mark.parametrize("longer", [True, False])
def test_a_new_plan_keeps_every_schedules_progress(ref_engine, longer):
    # a plan changed mid-fit (a time limit re-planning) goes on from where the fit is: the same
    # sigma, learning rate and count at the iteration it changes at, the same pruning cycle and
    # the same phase in it; only what lies ahead stretches or shrinks
    f = _cycling(ref_engine)
    f.plan(100, time_budgeted=True)              # growth to 12 until 30, then 5 cycles of 10 to 80
    f.step(44)
    st = f.strategy
    assert st.pruning and st.cycles_held == 5
    start, length, _ = st.cycles()
    before = (f.schedule.at(44), st.wanted(44), (44 - start) / length)
    f.plan(160 if longer else 70, time_budgeted=True)
    start, length, _ = st.cycles()
    after = (f.schedule.at(44), st.wanted(44), (44 - start) / length)
    assert after[0] == pytest.approx(before[0], rel=1e-12) and after[1] == before[1] == 9
    assert after[2] == pytest.approx(before[2]) and st.prune_cycles() == 5
    assert st.next_event(44) > 44
    # the cycles end at 0.8 of the progress, the plan at 1: (160 - 44) or (70 - 44) iterations
    # at 0.56 progress a plan of 100 had left, from the same place
    cycles_end = st.cycles()[0] + 5 * st.cycles()[1]
    assert (cycles_end - 44) / (f.settings.planned_iterations - 44) == pytest.approx((80 - 44) / (100 - 44))


def test_a_plan_lengthened_after_its_cycles_does_not_restart_them(ref_engine):
    # a time limit's plan grows in its last stretch (the fit ran faster than measured): the fit
    # goes on at the ends of its schedules -- the learning rate still falls, no cycle re-opens.
    # Re-stretched from iteration 0 (records from before continuous_plans), the longer plan put
    # the fit back inside its cycles: the count grew back and the learning rate restarted high
    lrs = {}
    for continuous in (True, False):
        f = _cycling(ref_engine, continuous_plans=continuous)
        f.plan(100, time_budgeted=True)
        f.step(90)                               # the cycles ended at 80
        assert f.n_triangles == 6
        lr_then = f.schedule.at(90)[1]
        f.plan(150, time_budgeted=True)
        lrs[continuous] = (lr_then, f.schedule.at(90)[1], f.strategy.wanted(91))
    lr_then, lr_now, count = lrs[True]
    assert lr_now == pytest.approx(lr_then) and count == 6
    lr_then, lr_now, count = lrs[False]
    assert lr_now > 2 * lr_then and count > 6
    assert recorded_settings({"triangles": 6})["continuous_plans"] is False


def test_a_plan_made_at_the_start_has_its_progress_there(ref_engine):
    # a fixed iteration count's plan (made before the first iteration) is the plain one: progress
    # = iteration / plan, the schedule as plan_schedule writes it, in the checkpoint's state
    from trifit.strategy import plan_schedule

    f = _cycling(ref_engine)
    f.plan(100)
    f.plan(200)
    assert f.strategy.plan_origin == 0.0
    assert f.schedule == plan_schedule(f.settings, f.short_side)
    f.step(44)
    f.plan(300)
    state = f.strategy.state()
    assert state["plan_origin"] == f.strategy.plan_origin != 0.0 and state["cycles_held"] is None
    g = _cycling(ref_engine)
    g.strategy.load_state(state)
    assert g.strategy.plan_origin == f.strategy.plan_origin
    with pytest.raises(ValueError):
        g.strategy.load_state({**state, "plan_origin": float("nan")})
    f.plan(40)                                   # a plan that ended before the fit's iteration: every
    assert f.schedule.at(44)[1] == pytest.approx(f.settings.lr_final)  # schedule at its end
    assert f.strategy.wanted(45) == 6


@pytest.mark.parametrize("weight", [1.0, 3.0])
def test_pruning_weighs_the_newcomers_removal_costs(ref_engine, weight):
    # each later pruning cycle marks the triangles it grows back (on top) as newcomers; its pruning
    # steps rank them by prune_newcomers x their removal cost (a negative cost divided by it), the
    # rest by their cost, and keep the most costly. The first pruning (after the growth stages)
    # ranks all alike
    # (small_triangle_px 0: a fit whose later cycles the weight reorders)
    f = _cycling(ref_engine, prune_newcomers=weight, small_triangle_px=0.0)
    f.plan(100, time_budgeted=True)              # 12 at 30, 9 at 35, 6 at 40; each later cycle 9 then 6 (the last 9, 8, 7, 6)
    st, keep, seen = f.strategy, f.keep, {"steps": 0, "differs": 0, "newcomers": 0, "regrowths": 0}
    add = f.add

    def add_spy(new):
        before, regrowth = f.n_triangles, st.pruning
        if not regrowth:  # (the growth stages: no newcomers yet)
            assert st.newcomers_from is None
            return add(new)
        assert st.newcomers_from == f.next_triangle_id()  # (marked as the cycle grows back)
        add(new)
        placed = f.placed_since(st.newcomers_from)
        assert not placed[:, :before].any() and placed[:, before:].all()  # the grown ones, on top
        seen["regrowths"] += 1

    def keep_spy(idx):
        costs = f.pruning_costs().astype(np.float64)
        new = f.placed_since(st.newcomers_from) if st.newcomers_from is not None else np.zeros(costs.shape, bool)
        ranked = np.where(new, np.where(costs > 0, costs * weight, costs / weight), costs)
        n = idx.shape[1]
        assert np.array_equal(idx, np.sort(np.argsort(-ranked, kind="stable", axis=1)[:, :n], axis=1))
        plain = np.sort(np.argsort(-costs, kind="stable", axis=1)[:, :n], axis=1)
        seen["steps"] += 1
        seen["differs"] += not np.array_equal(idx, plain)
        seen["newcomers"] += int(new.sum())
        keep(idx)

    f.add, f.keep = add_spy, keep_spy
    f.step(90)
    assert seen["steps"] == 8 and seen["regrowths"] == 4 and seen["newcomers"] > 0
    assert (seen["differs"] > 0) == (weight != 1.0)  # (1: the plain ranking, to the byte)
    # records from before the setting ranked newcomers as the rest
    assert recorded_settings({"triangles": 6})["prune_newcomers"] == 1.0
    assert recorded_settings({"triangles": 6, "prune_newcomers": 2.0})["prune_newcomers"] == 2.0
