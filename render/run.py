"""The run loop: how long a fit runs and what changes it on the way -- for every caller.

:class:`FitRun` drives a fitter (one image or a batch) until a stop condition holds, yielding a
:class:`Progress` after every chunk: the CLI's ``fit``, ``batch`` and the GUI's worker thread all
iterate it (the GUI's worker is a thread shell around it). It owns the stop conditions, chunk
sizing (chunks of about ``chunk_s`` seconds), the time budget (re-planning the schedules so they
end with a time limit), and live changes (count, sigma, learning rate), which it applies between
chunks; the fitter records each with its iteration in the scene's meta.

Same inputs, same bytes: chunk sizes follow the measured speed, but nothing a fit computes
depends on them -- the strategy's events land on their iterations whatever the chunking
(render/fitter.py), and the loss-based stops (target PSNR, plateau) are decided at multiples of
:data:`CHECK_EVERY` iterations only. What does depend on time -- a time limit's plans, a GUI
user's changes -- is recorded in the scene's ``meta.changes``, and :func:`replay_run` re-runs it
exactly (``trifit fit IMAGE --replay SCENE.json``).
"""

from __future__ import annotations

import math
import queue
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .errors import SettingsError
from .fitloop import CHANGE_KINDS
from .history import StepStats, psnr_from_mse
from .limits import is_whole

#: loss-based stops (target PSNR, plateau) are decided at multiples of this many iterations
CHECK_EVERY = 50
#: the CLI's chunks: about this long, from FIRST_STEP iterations up to the fit's ``chunk`` setting
RUN_STEP_S = 0.1
FIRST_STEP = 8
#: a sized chunk ends at the fitter's next event when that lies within this many chunks' length
EVENT_REACH = 1.5
#: a half-size iteration's cost as a fraction of a full-size one, until both are measured
COARSE_COST_GUESS = 0.4
#: a time limit's plan changes when it is off by more than this share of it -- in its last
#: PLAN_TAIL, of the iterations it has left (at least PLAN_FLOOR of it), so that it ends with the
#: limit: a fit cut short of its plan stops with its learning rate and sigma still on the way down
PLAN_TOLERANCE = 0.05
PLAN_TAIL = 0.1
PLAN_FLOOR = 0.002
#: live changes that never collapse to the last one asked: each edit by hand applies, in order
UNCOLLAPSED = ("edit",)
#: what :meth:`FitRun.request` takes
LIVE_CHANGES = ("triangles", "sigma", "lr", "locked", "edit", "weights", "stop")


@dataclass
class StopConditions:
    iterations: int | None = None
    time_limit: float | None = None   # seconds of fitting
    target_psnr: float | None = None  # dB (mse only; a batch: every image), checked every CHECK_EVERY iterations
    plateau: int | None = None        # stop when the loss has not improved by 0.1% in this many iterations

    def __post_init__(self):
        self.check()

    def check(self) -> None:
        """SettingsError (a ValueError) for a condition no run can keep: iterations or a plateau
        that are not whole numbers (iterations >= 0, a plateau >= 1), a time limit that is not a
        positive finite number of seconds, a target PSNR that is not finite."""
        for key, low in (("iterations", 0), ("plateau", 1)):
            v = getattr(self, key)
            if v is not None and (not is_whole(v) or v < low):
                raise SettingsError(f"stop condition {key} must be a whole number >= {low}, got {v!r:.40}")
        for key, positive in (("time_limit", True), ("target_psnr", False)):
            v = getattr(self, key)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v) \
                    or (positive and v <= 0):
                want = "a positive number of seconds" if positive else "a finite number of dB"
                raise SettingsError(f"stop condition {key} must be {want}, got {v!r:.40}")

    def any(self) -> bool:
        return any(v is not None for v in (self.iterations, self.time_limit, self.target_psnr, self.plateau))


@dataclass
class Progress:
    """What the run loop yields after each chunk."""

    stats: StepStats
    iterations: np.ndarray            # this chunk's iteration numbers
    losses: np.ndarray                # their losses (image 0's)
    chunk: int                        # iterations in this chunk
    reason: str | None = None         # on the last one: the stop condition that held
    applied: list = field(default_factory=list)  # [(kind, seconds since it was asked)] before this chunk


class ChunkSizer:
    """Iterations per chunk so that a chunk takes about ``target_s`` (a running average per
    iteration that follows slower chunks fast and faster ones slowly)."""

    def __init__(self, target_s: float, first: int = 1, cap: int = 256):
        self.target_s, self.first, self.cap = target_s, max(1, first), max(1, cap)
        self.seconds_per_iteration: float | None = None

    def reset(self) -> None:
        self.seconds_per_iteration = None  # a new count or size costs differently

    def next(self) -> int:
        if self.seconds_per_iteration is None:
            return min(self.first, self.cap)
        return int(min(max(self.target_s / self.seconds_per_iteration, 1), self.cap))

    def observe(self, iterations: int, seconds: float) -> None:
        if iterations <= 0:
            return
        per = seconds / iterations
        if self.seconds_per_iteration is None:
            self.seconds_per_iteration = per
        else:
            weight = 0.7 if per > self.seconds_per_iteration else 0.3
            self.seconds_per_iteration += weight * (per - self.seconds_per_iteration)


class TimePlanner:
    """Re-plans a fit so its schedules end when ``limit`` seconds of fitting end, from the speed
    measured since ``start`` -- each stage's on its own: a half-size iteration costs ~0.4 of a
    full one on a CPU adapter and about as much as one on a launch-bound GPU, so neither can be
    derived from the other (until the full-size stage has run, its cost is guessed)."""

    def __init__(self, fit, start: int, limit: float):
        self.fit, self.start, self.limit = fit, start, limit
        # (coarse?, first iteration, seconds then, whether the stage's first chunk is still to end)
        self._clock: tuple[bool, int, float, bool] | None = None
        self._t_full_guess: float | None = None

    def replan(self, elapsed: float) -> None:
        f = self.fit
        it, done = f.iteration, f.iteration - self.start
        if done <= 0 or elapsed <= 0:
            return
        coarse = f.coarse
        clock = self._clock
        if clock is None:
            clock = (coarse, self.start, 0.0, False)
        elif clock[0] != coarse:  # the full-size stage began since the last call: its clock starts after
            # its first chunk, which carries the stage's set-up (its loop's first submission, the
            # growth it starts with): a short first chunk measured with it would shrink the plan
            # several-fold, and the sigma probes, due at a fraction of it, would run mid-anneal
            clock = (coarse, it, elapsed, f.full_from >= it)
        elif clock[3]:
            clock = (coarse, it, elapsed, False)
        self._clock = clock
        in_stage = it - clock[1]
        t_stage = (elapsed - clock[2]) / in_stage if in_stage > 0 else None
        if not coarse and t_stage is None and self._t_full_guess is not None:
            return  # (the plan made from the half-size stage's guess holds until the stage is measured)
        if coarse:
            t_coarse = t_stage if t_stage is not None else elapsed / done
            t_full = self._t_full_guess = t_coarse / COARSE_COST_GUESS
        else:
            t_coarse = 0.0
            t_full = t_stage if t_stage is not None else (self._t_full_guess or elapsed / done)
        left = max(self.limit - elapsed, 0.0)
        planned = plan = f.settings.planned_iterations
        for _ in range(8):  # the coarse stage's length depends on the plan: a few fixed-point steps
            coarse_left = max(0, f.strategy.coarse_until(plan, time_budgeted=True) - it) if coarse else 0
            plan = it + coarse_left + max(0, int((left - coarse_left * t_coarse) / t_full))
        guessed = coarse  # (the working size's cost is COARSE_COST_GUESS's until its stage is measured)
        left_in_plan = planned - it
        tolerance = PLAN_TOLERANCE * (planned if left_in_plan > PLAN_TAIL * planned else left_in_plan)
        tolerance = max(tolerance, PLAN_FLOOR * planned)
        if abs(plan - planned) > tolerance or not f.strategy.time_budgeted or \
                f.strategy.plan_guessed != guessed:
            f.plan(max(plan, it + 1), time_budgeted=True, guessed=guessed)


class FitRun:
    """Run ``fitter`` until ``stop`` holds (none: until cancelled); iterate it for a :class:`Progress` per chunk, or call
    :meth:`run`. ``chunk``: fixed iterations per chunk (else sized to ``chunk_s`` seconds).
    ``script``: recorded changes ``[iteration, kind, value]`` to apply at their iterations
    (a replay; the run then plans nothing itself). :meth:`request` (any thread) asks for a live
    change at the next chunk boundary; :meth:`cancel` ends the run there."""

    def __init__(self, fitter, stop: StopConditions, *, chunk: int | None = None, chunk_s: float = RUN_STEP_S,
                 first_chunk: int = FIRST_STEP, script: list | None = None, clock=time.perf_counter):
        if not isinstance(stop, StopConditions):
            raise TypeError(f"stop must be StopConditions, got {type(stop).__name__}")
        stop.check()  # (its fields may have been set since it was made)
        self.fit, self.stop, self.clock = fitter, stop, clock
        self.chunk = chunk
        self.sizer = ChunkSizer(chunk_s, first_chunk, min(fitter.settings.chunk, 256))
        self.script = deque(sorted(check_script(script), key=lambda c: c[0])) if script is not None else None
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._cancelled = False

    def request(self, kind: str, value) -> None:
        """A live change ("triangles", "sigma", "lr", "locked", "edit", "weights" or "stop" with
        new StopConditions). A kind it does not know, or a stop that is not StopConditions, is a
        SettingsError here, on the caller's thread, not later in the run."""
        if kind not in LIVE_CHANGES:
            raise SettingsError(f"unknown live change {kind!r}; one of {', '.join(LIVE_CHANGES)}")
        if kind == "stop":
            if not isinstance(value, StopConditions):
                raise SettingsError(f"a stop request takes StopConditions, got {type(value).__name__}")
            value.check()
        self._requests.put((kind, value, self.clock()))

    def cancel(self) -> None:
        self._cancelled = True

    def apply_pending(self) -> list:
        """Apply the live changes asked for and not yet applied (the caller ends the run)."""
        return self._apply_requests()

    def run(self, callback=None) -> StepStats:
        """Run to the end; ``callback(stats)`` after each chunk, the last included (a progress bar
        counts every iteration), may return False to stop."""
        stats = None
        for progress in self:
            stats = progress.stats
            if callback is None or (progress.reason is not None and not progress.chunk):
                continue  # (a run that ends before a chunk yields the last chunk's stats again)
            if callback(stats) is False and progress.reason is None:
                self.cancel()
        if self._cancelled:
            self.fit.finish()  # stopped by the caller: the scene still has the count asked for
        return stats if stats is not None else self.fit.step(0)

    def __iter__(self):
        f = self.fit
        self.start_iteration, self.t0 = f.iteration, self.clock()
        self._plan_for(self.stop)
        self._best, self._best_at = float("inf"), f.iteration
        last = None  # (iterations, seconds) of the previous chunk
        stats = None
        while True:
            applied = self._apply_requests()
            if self._cancelled:
                return
            self._apply_script()
            reason, cap = self._reason_before(last)
            if reason is None:
                most = min(cap, self._next_cut() - f.iteration)
                n = min(self.chunk or self.sizer.next(), most)
                if self.planner is not None and last is None:
                    # (the plan is a blind guess until a chunk is timed: a fixed chunk -- a
                    # timelapse's frames -- runs no further into it than a sized first chunk)
                    n = min(n, self.sizer.first)
                if self.chunk is None:
                    n = self._end_at_event(n, min(most, self.sizer.cap))
                t = self.clock()
                first = len(f.history)
                stats = f.step(n)
                last = (n, self.clock() - t)
                self.sizer.observe(*last)
                self._apply_script()
                its = np.asarray(f.history.iterations[first:])
                if self.stop.plateau is not None:
                    self._track(its, first)
                reason = self._reason_after(stats)
                if reason is None and self.planner is not None:
                    self.planner.replan(self.clock() - self.t0)
                progress = Progress(stats, its, np.asarray(f.history.losses[first:]), n, None, applied)
            else:
                stats = stats if stats is not None else f.step(0)
                progress = Progress(stats, np.empty(0, int), np.empty(0), 0, None, applied)
            if reason is not None:
                f.finish()
                progress.reason = reason
                yield progress
                return
            yield progress

    # ------------------------------------------------------------------ pieces
    def _plan_for(self, stop: StopConditions) -> None:
        f = self.fit
        self.planner = None
        if self.script is not None:
            return  # a replay: the recorded plans are in the script
        if stop.iterations is not None:
            f.plan(self.start_iteration + stop.iterations)
        elif stop.time_limit is not None:
            f.plan(f.iteration + 100, time_budgeted=True, guessed=True)  # a first guess, corrected from the speed
            self.planner = TimePlanner(f, self.start_iteration, stop.time_limit)

    def _apply_requests(self) -> list:
        latest: dict = {}
        asked = 0
        while True:  # changes that piled up collapse to the last of each kind; edits all apply, in order
            try:
                kind, value, at = self._requests.get_nowait()
            except queue.Empty:
                break
            asked += 1
            key = (kind, asked) if kind in UNCOLLAPSED else kind
            latest.pop(key, None)
            latest[key] = (value, at)
        applied = []
        for key, (value, at) in latest.items():
            kind = key[0] if isinstance(key, tuple) else key
            if kind == "stop":
                self.stop = value
                self._plan_for(value)
            else:
                self.fit.apply(kind, value)
                if kind == "triangles":
                    self.sizer.reset()
            applied.append((kind, self.clock() - at))
        return applied

    def _apply_script(self) -> None:
        while self.script and self.script[0][0] <= self.fit.iteration:
            _, kind, value = self.script.popleft()
            self.fit.apply(kind, value)

    def _next_cut(self) -> int:
        """The next iteration a chunk must end at: the iteration limit, a scripted change, a
        loss-based stop's check."""
        f, stop = self.fit, self.stop
        cuts = [f.iteration + (1 << 30)]
        if stop.iterations is not None:
            cuts.append(self.start_iteration + stop.iterations)
        if self.script:
            cuts.append(self.script[0][0])
        if stop.target_psnr is not None or stop.plateau is not None:
            cuts.append((f.iteration // CHECK_EVERY + 1) * CHECK_EVERY)
        return max(min(cuts), f.iteration + 1)

    def _end_at_event(self, n: int, most: int) -> int:
        """``n``, or the iterations to the fitter's next event where it lies within EVENT_REACH
        times ``n`` (and ``most``). Why: an event ends a chunk on the device whatever the run loop
        asks (its data comes back with that chunk), and each chunk end leaves the GPU idle while
        the host reads back and encodes the next; a run chunk that ends near an event, not at it,
        adds a second such turn. Results do not depend on the chunking, only the turns do."""
        gap = getattr(self.fit, "next_event", self.fit.iteration) - self.fit.iteration
        return gap if 0 < gap <= min(most, int(n * EVENT_REACH)) else n

    def _reason_before(self, last) -> tuple[str | None, int]:
        """(why the run ends before another chunk, or None; the most iterations that chunk may have)."""
        f, stop = self.fit, self.stop
        if stop.iterations is not None and f.iteration - self.start_iteration >= stop.iterations:
            return f"reached {stop.iterations} iterations", 0
        if stop.time_limit is not None and last is not None and last[0] > 0 and self.script is None:
            # end within the limit, not a chunk past it: as many iterations as the last chunk's
            # speed says still fit
            fit_in = int((stop.time_limit - (self.clock() - self.t0)) * last[0] / max(last[1], 1e-9))
            if fit_in <= 0:
                return f"reached the time limit of {stop.time_limit:g} s", 0
            return None, fit_in
        return None, 1 << 30

    def _track(self, its: np.ndarray, first: int) -> None:
        """The best loss so far, iteration by iteration (a batch: the mean over its images)."""
        losses = self.fit.losses_since(first).mean(axis=1)
        for it, loss in zip(its, losses):
            if loss < self._best * (1 - 1e-3):
                self._best, self._best_at = float(loss), int(it)

    def _reason_after(self, stats: StepStats) -> str | None:
        f, stop = self.fit, self.stop
        if stop.iterations is not None and f.iteration - self.start_iteration >= stop.iterations:
            return f"reached {stop.iterations} iterations"
        if stop.time_limit is not None and self.script is None and self.clock() - self.t0 >= stop.time_limit:
            return f"reached the time limit of {stop.time_limit:g} s"
        if f.iteration % CHECK_EVERY:
            return None
        if stop.target_psnr is not None and f.settings.loss == "mse":
            worst = min(psnr_from_mse(v) for v in f.last_losses())
            if worst >= stop.target_psnr:
                return f"reached {worst:.2f} dB (target {stop.target_psnr:g} dB)"
        if stop.plateau is not None and f.iteration - self._best_at >= stop.plateau:
            return f"no 0.1% improvement in {stop.plateau} iterations"
        return None


def replay_run(fitter, meta: dict) -> FitRun:
    """The run that repeats a scene's fit exactly: its iterations, with the plans and live
    changes recorded in ``meta`` at their iterations (on the same adapter, the same bytes)."""
    if not isinstance(meta, dict) or "iterations" not in meta:
        raise SettingsError("replay_run takes a fitted scene's meta (its iterations and changes)")
    return FitRun(fitter, StopConditions(iterations=meta["iterations"]), script=meta.get("changes", []))


def check_script(script) -> list[list]:
    """A script's entries as lists, each [iteration >= 0, a recorded kind, value] (SettingsError
    naming the first that is not: a run would fail on it only when it got there)."""
    out = []
    for c in script:
        entry = list(c) if isinstance(c, (list, tuple)) else c
        if not (isinstance(entry, list) and len(entry) == 3 and not isinstance(entry[0], bool)
                and isinstance(entry[0], (int, np.integer)) and entry[0] >= 0 and entry[1] in CHANGE_KINDS):
            raise SettingsError(f"a script entry is [iteration, kind, value] with a kind of "
                                f"{', '.join(CHANGE_KINDS)}; got {c!r:.60}")
        out.append(entry)
    return out
