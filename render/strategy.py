"""Fit policy: how many triangles a fit has when, where new ones go, what is removed, and the
sigma and learning-rate schedules -- decided by iteration number alone.

A strategy is an object with its own state, attached to one :class:`trifit.fitter.Fitter`. The
fitter runs the iterations and calls the strategy at the iterations it names
(:meth:`Strategy.next_event`); the strategy acts through the fitter's operations (``add``,
``keep``, ``replace``, ``use_schedule``, ``to_full_size``), which keep parameters and Adam moments
consistent. Every decision is a function of the iteration, the plan (``planned_iterations``) and
the state at that iteration -- never of wall-clock time or of how the iterations were chunked --
so a fit's scene depends only on its inputs and the iterations run.

The schedules are fractions of the plan's *progress*, which runs from 0 at ``plan_origin`` to 1 at
the plan's end. A plan made at iteration 0 has its origin there (progress = iteration / plan); a
plan changed mid-fit (a time limit re-planning from its measured speed, a stop changed by hand)
keeps the progress where it is and changes only its rate from there on, so nothing behind the
fit moves ahead of it again: no learning-rate restart re-opened, no growth step or pruning cycle
shifted under the fit, no anneal undone. Where the pruning cycles have begun, their number holds.

Two strategies:

* ``"fixed"`` (:class:`FixedStrategy`): the count asked for from the start, a geometric sigma
  anneal and a cosine learning-rate decay over the plan; no events.
* ``"default"`` (:class:`DefaultStrategy`): a half-size coarse stage, growth in stages where the
  error is largest, over-growth to ``overgrow`` x the count and pruning back in cycles (each
  later cycle grows back and restarts the learning rate), respawn of triangles that stopped
  contributing, and sigma probes that tune each image's final sigma after the anneal.

In a batch every image sees the same events at the same iterations (counts are shared); what an
event does is decided per image (where triangles go, which are removed, each image's sigma).
"""

from __future__ import annotations

import math

import numpy as np

from .fitloop import FitSettings, Schedule, triangle_areas
from .placement import new_triangles

#: the sigma probes' steps in log sigma, in units of sigma_probe_eps: a parabola through three points
PROBE_STEPS = (-1.0, 0.0, 1.0)
#: the probes move an image's final sigma within [SIGMA_FACTORS[0], SIGMA_FACTORS[1]] x the anneal's end, and up to
#: SIGMA_MAX_PX at least: the softest final sigma of an anneal to 0.5 px, kept for the sharper anneal's end
SIGMA_FACTORS, SIGMA_MAX_PX = (0.25, 4.0), 2.0
#: a plan changed at or past this progress keeps it there (the schedules are at their ends): the
#: rest of the fit runs at the end of every schedule however much longer the new plan is
PROGRESS_CAP = 0.999

#: a time-limited plan's pruning cycles' least length on a GPU (FitSettings.timed_cycle_min = 0)
TIMED_CYCLE_MIN_GPU = 100

STRATEGIES = ("default", "fixed")
_NEVER = 1 << 40


def timed_cycle_min(cycle_min: int, on_cpu: bool) -> int:
    """The least pruning-cycle length of a time-limited plan that ``FitSettings.timed_cycle_min =
    0`` means, from ``prune_cycle_min`` and where the fit computes (``Engine.on_cpu``). A cycle's
    regrowth and pruning are events, and on a GPU each idles the device while the host works: a
    time limit pays for twice the cycles in more iterations than they are worth there, while a
    fixed plan's quality at its iterations gains from them for a few per cent of its wall time.
    On a CPU adapter an event costs little beside an iteration, so its time limits take
    prune_cycle_min's cycles too (docs/QUALITY.md, "Shorter pruning cycles")."""
    return cycle_min if on_cpu else max(cycle_min, TIMED_CYCLE_MIN_GPU)


def make_strategy(name: str, fit) -> FixedStrategy:
    """The strategy called ``name``, attached to ``fit``."""
    kinds = {"default": DefaultStrategy, "fixed": FixedStrategy}
    if name not in kinds:
        raise ValueError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
    return kinds[name](fit)


def probe_errors(images: np.ndarray, targets: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
    """(B, K) mean squared error of each image's K renders (B, K, H, W, 3) against its target
    (B, H, W, 3): weighted by the image's focus map (B, H, W) when there is one, as its loss is."""
    sq = (images - targets[:, None]) ** 2
    if weights is None:
        return sq.mean(axis=(2, 3, 4))
    w = weights[:, None, :, :, None].astype(sq.dtype)  # (in the renders' precision: ones give the plain mean's bits)
    return (sq * w).sum(axis=(2, 3, 4)) / (3.0 * w.sum(axis=(2, 3, 4)))


def plan_schedule(settings: FitSettings, short_side: int, sigma_fixed: float | None = None,
                  origin: float = 0.0) -> Schedule:
    """The sigma anneal and learning-rate decay over the plan, from ``origin`` (its progress 0) to
    ``settings.planned_iterations`` (sigma as a fraction of the shorter side; ``sigma_fixed`` pins it)."""
    span = max(1, settings.planned_iterations) - origin
    start, end = settings.sigma_start_px / short_side, settings.sigma_end_px / short_side
    if sigma_fixed is not None:
        start = end = sigma_fixed
    return Schedule(start, end, settings.sigma_fraction * span, span, settings.lr_final,
                    iter_offset=origin, lr_offset=origin)


class FixedStrategy:
    """A fixed triangle count and the plain schedules: the baseline, and what a user picks to
    see gradient descent alone."""

    name = "fixed"
    uses_coarse_stage = False

    def __init__(self, fit):
        self.fit = fit
        self.settings: FitSettings = fit.settings
        self.sigma_fixed: float | None = None  # set_sigma() pins sigma (fraction of the short side)
        self.time_budgeted = False             # the plan comes from a time limit (run.TimePlanner)
        self.plan_guessed = False              # ... made before the working size's speed was measured
        self.plan_origin = 0.0                 # the iteration at which the plan's progress is 0

    # ------------------------------------------------------------------ the plan's progress
    def replan(self, total: int) -> None:
        """The plan now ends at iteration ``total``: from the fit's iteration on, progress runs at
        the rate that brings it to 1 there, from where it is (``continuous_plans``; else, as
        records from before it ran, every schedule is re-stretched from iteration 0)."""
        self.plan_origin = self._origin_for(total)
        self.settings.planned_iterations = total

    def _origin_for(self, total: int) -> float:
        s, it = self.settings, self.fit.iteration
        if not s.continuous_plans or it <= 0 or total <= it:
            return 0.0  # (a plan that ends where the fit is or before it: every schedule at its end)
        origin, span = self.span()
        u = min(max((it - origin) / span, 0.0), PROGRESS_CAP)
        return (it - u * total) / (1.0 - u)

    def span(self, plan: int | None = None) -> tuple[float, float]:
        """(origin, length) of the plan's progress: of the plan in force, or of one to end at
        ``plan`` if it were made now."""
        s = self.settings
        if plan is None:
            return self.plan_origin, max(1, s.planned_iterations) - self.plan_origin
        origin = self._origin_for(plan)
        return origin, max(1, plan) - origin

    # ------------------------------------------------------------------ what the fitter asks
    def initial_count(self) -> int:
        return self.settings.triangles

    def coarse_until(self, plan: int | None = None, time_budgeted: bool | None = None) -> int:
        """Iteration at which the half-size stage ends (0: none), for this plan or ``plan``."""
        return 0

    def leaves_half_size(self, iteration: int) -> bool:
        """Whether the fit, at half size now, is at the working size after the event at ``iteration``."""
        return self.fit.coarse and iteration >= self.coarse_until()

    def counts_ahead(self) -> set[int]:
        """Every triangle count this strategy's plans can take (the fitter builds the pipelines
        of their loops before the first iteration)."""
        return {self.settings.triangles}

    def count_after(self, iteration: int) -> int | None:
        """The triangle count the event at ``iteration`` moves the fit to, as the plan stands now
        (None: it keeps the count): the fitter makes that count's loop while the chunks before
        the event run."""
        return None

    def probe_scenes(self) -> int:
        """Scenes per image the events score at once (the sigma probes'; 0: none)."""
        return 0

    def schedule(self, iteration: int) -> Schedule:
        """The schedule in force after the events at ``iteration``."""
        return plan_schedule(self.settings, self.fit.short_side, self.sigma_fixed, self.plan_origin)

    def next_event(self, iteration: int) -> int:
        """The first iteration after ``iteration`` at which :meth:`on_event` must run."""
        return _NEVER

    def wants_image(self, iteration: int) -> bool:
        """Whether the event at ``iteration`` may place triangles from the last forward's image
        (the chunk brings it back, where placement is on the host)."""
        return False

    def may_place(self, iteration: int) -> bool:
        """Whether the event at ``iteration`` may place triangles (where placement is on the
        device, the chunk brings back the error sums it starts from)."""
        return False

    def prunes(self, iteration: int) -> bool:
        """Whether the event at ``iteration`` ranks the triangles by removal cost (where events are
        on the device, the chunk brings the costs back)."""
        return False

    def needs_state(self, iteration: int) -> bool:
        """Whether the event at ``iteration`` reads the state on the host (the chunk brings it
        back with its losses; a wrong answer costs a round trip, never a different fit)."""
        return True

    def respawn_rule(self, iteration: int) -> float | None:
        """The opacity bound of the respawn check the event at ``iteration`` makes on the device
        with the loop that ran up to it (the chunk brings its flags back; a wrong answer costs
        a round trip, never a different fit), or None."""
        return None

    def keeps_loop(self, iteration: int) -> bool:
        """Whether the event at ``iteration`` leaves the fit at its count and working size, so
        that the next chunk runs on the same loop (its first part is then encoded while this
        chunk runs; a wrong answer costs host time, never a different fit)."""
        return True

    def on_event(self, iteration: int) -> None:
        pass

    def finish(self) -> None:
        """The run ended (a stop condition held)."""

    def took_replicas(self, source: np.ndarray) -> None:
        """Each slot of the fit's batch took slot ``source[b]``'s state (FitState.select_replicas):
        what this strategy keeps per slot follows."""

    # ------------------------------------------------------------------ live changes
    def refine(self) -> None:
        """The fit starts from a saved scene: keep its triangles (no coarse stage, no over-growth)."""
        self.settings.overgrow = 1.0

    def set_count(self, n: int) -> None:
        """A count set by hand is the count: grow where the error is largest or keep what would
        cost most to remove; no more over-growing."""
        self.settings.triangles = n
        self.settings.overgrow = 1.0
        fit = self.fit
        if n > fit.n_triangles:
            fit.add(self._place([n - fit.n_triangles] * fit.batch, n, rows=True))
        elif n < fit.n_triangles:
            fit.keep(fit.most_costly(n, transient=True))

    def set_sigma(self, sigma: float | None) -> None:
        self.sigma_fixed = sigma
        self.fit.use_schedule(self.schedule(self.fit.iteration))

    # ------------------------------------------------------------------ progress (checkpoints)
    def state(self) -> dict:
        """What this strategy has learned or been told so far, JSON-able (render/checkpoint.py)."""
        return {"sigma_fixed": self.sigma_fixed, "time_budgeted": self.time_budgeted,
                "plan_guessed": self.plan_guessed, "plan_origin": self.plan_origin}

    def load_state(self, state: dict) -> None:
        self.sigma_fixed = None if state.get("sigma_fixed") is None else float(state["sigma_fixed"])
        self.time_budgeted = bool(state.get("time_budgeted", False))
        self.plan_guessed = bool(state.get("plan_guessed", False))
        self.plan_origin = float(state.get("plan_origin", 0.0))
        if not math.isfinite(self.plan_origin):
            raise ValueError(f"plan_origin {state['plan_origin']!r} is not a number")

    # ------------------------------------------------------------------ helpers
    def _place(self, counts: list[int], n_after: int | None = None, rows: bool = False):
        """counts[b] new triangles for image b (values, (k, 10); None for none), where its error
        is largest, sized for ``n_after`` triangles (default: the count asked for). ``rows``: for
        the fitter's ``add`` or ``replace_on_device``, which take them as they were placed on the
        device where placement is there (``PlacedOnDevice``: no round trip)."""
        fit = self.fit
        if fit.places_on_device:
            return fit.place_on_device(counts, n_after, self.settings.insert_radius, rows=rows)
        image = fit.placement_image()
        return [new_triangles(fit.targets[b], k, image[b], fit.rngs[b], self.settings,
                              self.settings.insert_radius, n_after, None if fit.focus is None else fit.focus[b])
                if k else None
                for b, k in enumerate(counts)]


class DefaultStrategy(FixedStrategy):
    """Coarse stage, growth stages, over-growth with pruning cycles, respawn, sigma probes."""

    name = "default"
    uses_coarse_stage = True

    def __init__(self, fit):
        super().__init__(fit)
        self.pruning = False      # the count has begun to fall back to settings.triangles
        self.probes_done = 0      # probes due so far (one skipped as overdue counts)
        self.probes_run = 0       # ... and run
        self.sigma_scales = np.ones(fit.batch)  # each image's final-sigma factor, from the probes
        self._plan_key = None
        self._counts: list[tuple[int, int]] = []  # (first iteration, wanted count), by iteration
        # the pruning cycles' number, held from the first pruning on (continuous_plans): a re-plan
        # then stretches each cycle rather than moving the fit to another cycle's phase
        self.cycles_held: int | None = None
        # the fit's next triangle id where the last pruning cycle grew back: triangles placed
        # since are newcomers, which pruning weighs by prune_newcomers (None: none yet)
        self.newcomers_from: int | None = None

    def state(self) -> dict:
        return {**super().state(), "pruning": self.pruning, "probes_done": self.probes_done, "probes_run": self.probes_run,
                "sigma_scales": [float(k) for k in self.sigma_scales], "cycles_held": self.cycles_held,
                "newcomers_from": self.newcomers_from}

    def took_replicas(self, source: np.ndarray) -> None:
        self.sigma_scales = self.sigma_scales[source]

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.pruning = bool(state["pruning"])
        self.probes_done = int(state["probes_done"])
        self.probes_run = int(state.get("probes_run", self.probes_done))  # (a checkpoint from before: as many)
        held = state.get("cycles_held")
        self.cycles_held = None if held is None else max(1, int(held))
        mark = state.get("newcomers_from")  # (a checkpoint from before newcomers were weighed: none)
        self.newcomers_from = None if mark is None else int(mark)
        scales = np.asarray(state["sigma_scales"], dtype=np.float64)
        if scales.shape != self.sigma_scales.shape or not np.all(np.isfinite(scales)) or np.any(scales <= 0):
            raise ValueError(f"sigma_scales {state['sigma_scales']!r} do not fit this fit")
        self.sigma_scales = scales

    # ------------------------------------------------------------------ the plan
    def peak(self) -> int:
        """The most triangles the plan grows to: overgrow x the count, for counts up to overgrow_max."""
        s = self.settings
        if s.triangles > s.overgrow_max:
            return s.triangles
        return max(s.triangles, math.ceil(s.triangles * s.overgrow))

    def prune_cycles(self) -> int:
        """Pruning cycles in this plan: as many of at least prune_cycle_min iterations (a time
        limit's plan: timed_cycle_min) as fit between growth_until and prune_until, or where that
        is fewer than prune_cycles_floor, as many of half that length as fit up to the floor; at
        most overgrow_cycles (0: no cap), a longer plan than that making each cycle longer."""
        s = self.settings
        if self.cycles_held is not None:
            return self.cycles_held
        span = (s.prune_until - s.growth_until) * self.span()[1]
        least = max(1, s.timed_cycle_min if self.time_budgeted else s.prune_cycle_min)
        fit = int(span // least)
        if fit < s.prune_cycles_floor:
            fit = min(s.prune_cycles_floor, int(span // max(1, least // 2)))
        return max(1, min(s.overgrow_cycles, fit) if s.overgrow_cycles > 0 else fit)

    def cycles(self) -> tuple[float, float, int]:
        """(first iteration, length, count) of the pruning cycles in this plan."""
        s = self.settings
        n = self.prune_cycles()
        origin, span = self.span()
        length = max(1.0, (s.prune_until - s.growth_until) * span / n)
        return origin + s.growth_until * span, length, n

    def count_plan(self) -> list[tuple[int, int]]:
        """The wanted count as steps: [(first iteration, count)], increasing iterations. Growth
        stages up to the peak, then (over-grown) each pruning cycle: back up to its first step,
        down in prune_stages steps after holding for prune_hold of it, to the count asked for; the
        last cycle takes each drop after its first step in prune_last_steps equal steps, spread
        over the iterations up to where that drop falls in the other cycles."""
        s = self.settings
        key = (s.planned_iterations, self.plan_origin, self.prune_cycles(), s.triangles, s.overgrow, s.growth_stages,
               s.growth_until, s.prune_until, s.prune_stages, s.prune_last_steps, s.prune_hold)
        if key == self._plan_key:
            return self._counts
        peak, stages = self.peak(), max(1, s.growth_stages)
        steps = [(0, peak)]
        if stages > 1:
            origin, span = self.span()
            stage_len = max(1.0, s.growth_until * span / stages)
            steps = [(math.ceil(origin + k * stage_len - 1e-9), max(1, math.ceil(peak * (k + 1) / stages)))
                     for k in range(stages)]
        if peak > s.triangles:
            start, length, cycles = self.cycles()
            hold = s.prune_hold * length
            stage = max(length - hold, 1e-9) / s.prune_stages
            for j in range(cycles):
                c0 = start + j * length
                steps.append((math.ceil(c0 - 1e-6), peak))
                before = (c0 + hold, peak)
                for i in range(s.prune_stages):
                    drop = math.ceil((peak - s.triangles) * (i + 1) / s.prune_stages)
                    at, count = c0 + hold + i * stage, max(s.triangles, peak - drop)
                    # (the last cycle's drops after its first, each in steps)
                    parts = s.prune_last_steps if j == cycles - 1 and i > 0 else 1
                    for m in range(1, parts):
                        steps.append((math.ceil(before[0] + (at - before[0]) * m / parts - 1e-6),
                                      before[1] - math.ceil((before[1] - count) * m / parts - 1e-9)))
                    steps.append((math.ceil(at - 1e-6), count))
                    before = (at, count)
            steps.append((math.ceil(start + cycles * length - 1e-6), s.triangles))
        merged: dict[int, int] = {}
        for at, count in steps:  # a later step at the same iteration replaces an earlier one
            merged[max(at, 0)] = count
        self._counts = sorted(merged.items())
        self._plan_key = key
        return self._counts

    def counts_ahead(self) -> set[int]:
        return {c for _, c in self.count_plan()} | {self.settings.triangles}

    def probe_scenes(self) -> int:
        return len(PROBE_STEPS) if self.settings.sigma_probes > 0 else 0

    def wanted(self, iteration: int) -> int:
        """The count the plan wants at ``iteration`` (once pruning has begun, never the growth
        stages again, whatever re-planning does)."""
        if self.pruning and self.peak() > self.settings.triangles:
            iteration = max(iteration, math.ceil(self.cycles()[0] - 1e-6))
        count = self.settings.triangles
        for at, c in self.count_plan():
            if at > iteration:
                break
            count = c
        return count

    def initial_count(self) -> int:
        return self.wanted(0)

    def coarse_until(self, plan: int | None = None, time_budgeted: bool | None = None) -> int:
        s = self.settings
        if not self.fit.has_coarse_stage:
            return 0
        origin, span = self.span(plan)
        plan = s.planned_iterations if plan is None else plan
        share = s.coarse_fraction
        if (self.time_budgeted if time_budgeted is None else time_budgeted) and s.coarse_fraction > 0:
            # a short time-limited plan (a slow adapter) spends more of it at half size
            short = min(max((2000 - plan) / 1500, 0.0), 1.0)
            share += (max(s.coarse_max_fraction, s.coarse_fraction) - s.coarse_fraction) * short
        return int(origin + share * span)

    def respawn_until(self) -> float:
        """Respawns stop at respawn_until of the plan, or where pruning begins in an over-grown
        fit (pruning removes what stopped contributing anyway)."""
        s = self.settings
        origin, span = self.span()
        until = origin + s.respawn_until * span
        return min(until, origin + s.growth_until * span) if self.peak() > s.triangles else until

    def later_cycle_start(self, iteration: int) -> float | None:
        """First iteration of the pruning cycle after the first that ``iteration`` is in (the
        last once the cycles have ended), when cycles restart the learning rate; else None."""
        s = self.settings
        if s.cycle_lr <= 0 or self.peak() <= s.triangles:
            return None
        start, length, cycles = self.cycles()
        # (the same rounding as the count plan's cycle starts, so a restart lands on that event)
        j = min(int((iteration + 1e-6 - start) / length), cycles - 1) if iteration + 1e-6 >= start else 0
        return start + j * length if j >= 1 else None

    def probe_at(self, k: int) -> int:
        """Iteration of probe k: sigma_probes of them, evenly from the anneal's end to the plan's end."""
        s = self.settings
        origin, span = self.span()
        start = origin + s.sigma_fraction * span
        return math.ceil(start + k * (s.planned_iterations - start) / (s.sigma_probes + 1))

    def _probing(self) -> bool:
        """Probes left to run (none at half size, nor with sigma pinned by hand)."""
        s = self.settings
        return s.sigma_probes > 0 and self.sigma_fixed is None and self.probes_done < s.sigma_probes \
            and not self.fit.coarse

    def schedule(self, iteration: int) -> Schedule:
        """The plan's schedule with each image's probed final sigma; inside a pruning cycle after
        the first (cycle_lr), the learning rate restarts at the cycle's start, so the whole scene
        moves again around the triangles the cycle grew back."""
        main = plan_schedule(self.settings, self.fit.short_side, self.sigma_fixed, self.plan_origin)
        if self.sigma_fixed is None and np.any(self.sigma_scales != 1.0):
            main.sigma_ends = tuple(float(main.sigma_end * k) for k in self.sigma_scales)
        cycle_start = self.later_cycle_start(iteration)
        if cycle_start is None:
            return main
        main.lr_start = max(self.settings.cycle_lr, main.at(cycle_start)[1])
        main.lr_offset = cycle_start
        main.lr_decay_iters = self.settings.planned_iterations - cycle_start
        return main

    # ------------------------------------------------------------------ events
    def next_event(self, iteration: int) -> int:
        fit = self.fit
        found = [at for at, _ in self.count_plan() if at > iteration][:1]
        if fit.coarse:
            found.append(max(self.coarse_until(), iteration + 1))
        every = self.respawn_period()
        if every > 0:
            nxt = (iteration // every + 1) * every
            if nxt < self.respawn_until():
                found.append(nxt)
        if self._probing():
            found.append(max(self.probe_at(self.probes_done), iteration + 1))
        if self._count_change(iteration + 1) is not None:
            found.append(iteration + 1)  # a new plan left the count behind: catch up at once
        # (each pruning cycle's start, where the learning rate restarts, is a step of the count plan)
        return min(found) if found else _NEVER

    def _count_change(self, iteration: int) -> tuple[str, int] | None:
        """("grow", n) or ("prune", n) when the count at ``iteration`` is not what the plan wants
        there and may move to it (a later pruning cycle grows back first; with one cycle, once
        pruning has begun, the count only falls); else None."""
        s, n = self.settings, self.fit.n_triangles
        want = self.wanted(iteration)
        if want > n and (not self.pruning or self.prune_cycles() > 1):
            return "grow", want
        if self.peak() > s.triangles and max(want, s.triangles) < n:
            if s.growth_waits and not self.pruning and n <= self.peak() and \
                    ((self.plan_guessed and not self._prunes_at_half_size()) or iteration + 1e-6 < self.cycles()[0]):
                # pruning, once begun, ends the growth for good: not on a guessed plan (a time
                # limit's before the working size's speed is measured: the guess can be several
                # times short, and the cycles would begin a fraction of the way into the fit) --
                # unless the half-size stage itself lasts past the pruning's start, where the
                # working size cannot be measured before it and waiting would leave the cycles
                # to the plan's last part (prune_in_coarse) --, nor
                # where a longer plan moved the growth's steps later (the count waits for them)
                return None
            return "prune", max(want, s.triangles)
        return None

    def _prunes_at_half_size(self) -> bool:
        """The fit is at half size and, as planned, stays there past the pruning cycles' start (a
        short time-limited plan on a slow adapter), so the working size's speed cannot be measured
        before the pruning is due -- on a CPU adapter, where the plan made at half size is the
        measured one's equal (run.COARSE_COST_GUESS is what the two sizes cost there; on a
        launch-bound GPU the guess is 2-5x short: docs/QUALITY.md, "Time-limited plans")
        (prune_in_coarse)."""
        fit = self.fit
        return self.settings.prune_in_coarse and fit.coarse and fit.engine.on_cpu and self.coarse_until() > self.cycles()[0]

    def respawn_period(self) -> int:
        """Iterations between respawn checks (0: none): respawn_every, or longer where the plan
        would hold more than respawn_checks of them (0: no such cap)."""
        s = self.settings
        if s.respawn_every <= 0:
            return 0
        cap = math.ceil(self.span()[1] / s.respawn_checks) if s.respawn_checks > 0 else 0
        return max(s.respawn_every, cap)

    def _respawn_due(self, iteration: int) -> bool:
        every = self.respawn_period()
        return every > 0 and iteration % every == 0 and iteration < self.respawn_until()

    def wants_image(self, iteration: int) -> bool:
        if self.fit.coarse and iteration < self.coarse_until():
            return False  # placement renders at full size
        return self.may_place(iteration)

    def may_place(self, iteration: int) -> bool:
        change = self._count_change(iteration)
        return self._respawn_due(iteration) or (change is not None and change[0] == "grow")

    def prunes(self, iteration: int) -> bool:
        change = self._count_change(iteration)
        return change is not None and change[0] == "prune"

    def respawn_rule(self, iteration: int) -> float | None:
        fit = self.fit
        if not fit.places_on_device or not self._respawn_due(iteration) or not self.keeps_loop(iteration):
            return None  # (no check, or one after the count or the size changed: another loop)
        return self.settings.respawn_alpha

    def keeps_loop(self, iteration: int) -> bool:
        return self._count_change(iteration) is None and not self.leaves_half_size(iteration)

    def count_after(self, iteration: int) -> int | None:
        change = self._count_change(iteration) if iteration < _NEVER else None  # (no event ahead)
        return None if change is None else change[1]

    def needs_state(self, iteration: int) -> bool:
        """With events on the device no event reads the state: respawns, count changes (growth,
        pruning's removal costs), the half-size stage's end and the sigma probes are done there."""
        return not self.fit.places_on_device

    def on_event(self, iteration: int) -> None:
        fit = self.fit
        if self.leaves_half_size(iteration):
            fit.to_full_size()
        change = self._count_change(iteration)
        if change is not None and change[0] == "grow":
            if self.pruning:  # (a later cycle grows back: see newcomer_weights)
                fit.select_replicas()  # (each image's replicas go on from its best: render/replicas.py)
                self.newcomers_from = fit.next_triangle_id()
            fit.add(self._place([change[1] - fit.n_triangles] * fit.batch, change[1], rows=True))
        elif change is not None:
            self.pruning = True  # from here (with one cycle) the count only falls
            if self.settings.continuous_plans and self.cycles_held is None:
                self.cycles_held = self.prune_cycles()
            fit.keep(fit.most_costly(change[1], weights=self.newcomer_weights()))
        if self._respawn_due(iteration):
            self._respawn()
        schedule = self.schedule(iteration)
        if self._probing() and iteration >= self.probe_at(self.probes_done):
            if self.settings.probes_overdue == "skip":  # (a time limit's plan shrank past them)
                while self.probes_done + 1 < self.settings.sigma_probes and \
                        iteration >= self.probe_at(self.probes_done + 1):
                    self.probes_done += 1
            self._probe_sigma()
            schedule = self.schedule(iteration)
        if schedule != fit.schedule:
            fit.use_schedule(schedule)

    def newcomer_weights(self) -> np.ndarray | None:
        """(B, T) what pruning weighs each triangle's removal cost by: prune_newcomers for the
        triangles placed since the pruning cycle in progress grew back (grown then, or inserted
        since), 1 for the rest; None where that is 1 for all. A newcomer starts faint and small
        and has had part of a cycle to find its place, so what it costs to remove now
        understates what it will be worth; ranked as the rest, most cycles would remove what they
        grew and revise the same places again. The first pruning, after the growth stages, ranks
        all alike: the last stage's triangles had a stage (a sixth of the plan) to settle."""
        w = self.settings.prune_newcomers
        if w == 1.0 or self.newcomers_from is None:
            return None
        return np.where(self.fit.placed_since(self.newcomers_from), w, 1.0)

    def finish(self) -> None:
        """Stopped before pruning ended: keep the count asked for, by removal cost (unweighted:
        no iterations are left in which a newcomer could grow into its place)."""
        if self.fit.n_triangles > self.settings.triangles:
            self.pruning = True
            self.fit.keep(self.fit.most_costly(self.settings.triangles))

    # ------------------------------------------------------------------ the events' work
    def _respawn(self) -> None:
        """Re-place, on top, the triangles that stopped contributing (opacity under
        respawn_alpha, or under 1 px^2 of opacity-weighted area on the frame), where the error
        is largest; each image its own."""
        fit = self.fit
        on_device = fit.places_on_device
        dead = fit.stopped_on_device(self.settings.respawn_alpha) if on_device else \
            self.stopped_contributing(fit.values()[0])
        if not any(len(d) for d in dead):
            return
        new = self._place([len(d) for d in dead], rows=on_device)
        (fit.replace_on_device if on_device else fit.replace)(dead, new)

    def stopped_contributing(self, tris: np.ndarray) -> list[np.ndarray]:
        """Each image's triangles (indices) with opacity under respawn_alpha, or under 1 px^2 of
        opacity-weighted area on the frame: ``tris`` (B, T, 10) values."""
        s = self.settings
        return [np.flatnonzero((t[:, 9] < s.respawn_alpha) | (self._usefulness(t) / np.maximum(t[:, 9], 1e-9) < 1.0))
                for t in tris]

    def _usefulness(self, tris: np.ndarray) -> np.ndarray:
        """Opacity x on-frame area (in pixels) of each triangle: how much it can matter."""
        fit = self.fit
        v = np.clip(tris[:, :6].reshape(-1, 3, 2), 0.0, 1.0) * [fit.width, fit.height]
        return tris[:, 9] * triangle_areas(v)

    def _probe_sigma(self) -> None:
        """One Newton step on log(sigma) per image: render at sigma x e^(-eps, 0, +eps), fit a
        parabola to the loss, move the image's final-sigma factor to its minimum (at most 2 eps
        a probe; downhill by eps where the parabola is not convex). The scene has one sigma, and
        what suits a photograph differs from one to the next. The first probe after the anneal
        decides each image's direction at once: where it wants softer edges the image goes on to
        sigma_ceiling_px, where sharper to sigma_floor_px (never short of where its step itself
        would go), and its later probes move it from there -- a scene fitted at a sigma adapts its
        edges to it, so capped steps from the anneal's end stop short."""
        fit, s = self.fit, self.settings
        self.probes_done += 1
        eps = s.sigma_probe_eps
        err = fit.sigma_errors(np.exp(eps * np.array(PROBE_STEPS)))  # (the same bits as -eps, 0, eps)
        first = not self.probes_run
        most = max(SIGMA_FACTORS[1], SIGMA_MAX_PX / s.sigma_end_px)
        floor = s.sigma_floor_px / s.sigma_end_px if first and s.sigma_floor_px > 0 else None
        ceiling = s.sigma_ceiling_px / s.sigma_end_px if first and s.sigma_ceiling_px > 0 else None
        self.probes_run += 1
        for b, (lm, l0, lp) in enumerate(err.astype(np.float64)):
            curv, slope = (lp + lm - 2 * l0) / eps ** 2, (lp - lm) / (2 * eps)
            step = -slope / curv if curv > 0 else -math.copysign(eps, slope)
            step = min(max(step * s.sigma_probe_gain, -2 * eps), 2 * eps)
            if floor is not None and step < 0:
                step = min(step, math.log(floor))
            if ceiling is not None and step > 0:
                step = max(step, math.log(ceiling))
            self.sigma_scales[b] = min(max(self.sigma_scales[b] * math.exp(step), SIGMA_FACTORS[0]), most)
