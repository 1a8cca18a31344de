"""The fitter: N soft triangles fitted to a target image by Adam through the engine.

``Fitter`` owns the schedule, initialisation, live changes (triangle count, sigma, learning rate),
stop conditions and history. The iterations themselves run in a backend's fit loop -- on the
device for the GPU (render/gpu/fitloop.py), in numpy for the reference -- obtained through the
engine's backend; this module never branches on which.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from array import array
from dataclasses import dataclass, field

import numpy as np

from . import __version__
from .engine import Engine
from .errors import DeviceLostError, NumericalFault, TrifitError

log = logging.getLogger("trifit")

#: consecutive numerical faults after which the fit gives up
MAX_CONSECUTIVE_FAULTS = 8
from .fitloop import FitSettings, Schedule, logit, raw_from_scene, values_from_raw
from .imageio import as_target
from .placement import initial_raw, new_triangles
from .scene import Scene

MAX_TRIANGLES_FIT = 20000


@dataclass
class StopConditions:
    iterations: int | None = None
    time_limit: float | None = None   # seconds of fitting
    target_psnr: float | None = None  # dB, from the loss of the latest iteration (mse only)
    plateau: int | None = None        # stop when the best loss has not improved by 0.1% in this many iterations

    def any(self) -> bool:
        return any(v is not None for v in (self.iterations, self.time_limit, self.target_psnr, self.plateau))


@dataclass
class StepStats:
    iteration: int
    iterations: int
    loss: float
    psnr: float
    wall_s: float
    it_per_s: float
    n_triangles: int
    sigma_px: float


@dataclass
class History:
    """Every iteration's number and loss, in typed arrays: 16 bytes an iteration (Python lists of
    ints and floats took ~85, which a long fit or a soak saw as steady RSS growth)."""

    iterations: array = field(default_factory=lambda: array("q"))
    losses: array = field(default_factory=lambda: array("d"))

    def add(self, first_iter: int, losses: np.ndarray) -> None:
        self.iterations.extend(range(first_iter, first_iter + len(losses)))
        self.losses.frombytes(np.ascontiguousarray(losses, dtype=np.float64).tobytes())

    def truncate(self, last_iter: int) -> None:
        """Forget iterations after ``last_iter`` (a rollback went back to it)."""
        while self.iterations and self.iterations[-1] > last_iter:
            self.iterations.pop()
            self.losses.pop()

    def __len__(self) -> int:
        return len(self.losses)


def psnr_from_mse(mse: float) -> float:
    return float("inf") if mse <= 0 else 10.0 * math.log10(1.0 / mse)


def default_schedule(settings: FitSettings, short_side: int, sigma_fixed: float | None = None) -> Schedule:
    """The sigma anneal and lr decay over ``settings.planned_iterations`` (sigma: fraction of the short side)."""
    plan = max(1, settings.planned_iterations)
    start, end = settings.sigma_start_px / short_side, settings.sigma_end_px / short_side
    if sigma_fixed is not None:
        start = end = sigma_fixed
    return Schedule(start, end, settings.sigma_fraction * plan, plan, settings.lr_final)


def loop_timings(loop, engine: Engine, recent: int | None = None) -> dict:
    """Timings of a fit loop and its engine: median GPU ms per pass, host phases, counters, pool."""
    tail = slice(-recent, None) if recent else slice(None)
    gpu = {k: float(np.median(s[tail])) for k, s in loop.gpu_phase_samples().items() if s}
    host = {k: float(np.median(s[tail])) for k, s in engine.impl.host.samples.items() if s}
    return {"gpu_ms": gpu, "host_ms": host, "counters": engine.counters(), "pool": engine.pool_stats()}


def release_loop(loop) -> None:
    """Give a fit loop's device buffers back to the pool (the reference loop holds none)."""
    release = getattr(loop, "release", None)
    if release is not None:
        release()

#: iterations per submission of a BatchFitter (B images each)
BATCH_SUBMISSION = 25
#: Fitter.run's steps: about this long, from FIRST_RUN_STEP iterations up to MAX_RUN_STEP
RUN_STEP_S = 0.1
FIRST_RUN_STEP = 8
MAX_RUN_STEP = 256
#: a half-size iteration's cost as a fraction of a full-size one, until both are measured
#: (lavapipe, 176 px, 150 triangles: 14 / 35 ms)
COARSE_COST_GUESS = 0.4
#: fit loops a Fitter keeps, by triangle count and working size (pruning cycles revisit a few counts;
#: a count set by hand keeps none but its own)
MAX_CACHED_LOOPS = 8


class Fitter:
    """Fit ``triangles`` soft triangles to ``target_image`` (path, PIL image or array).

    The target is resized so its longer side is ``size`` px. ``step(n)`` runs n iterations; the
    fit can be changed between steps (``set_triangles``, ``set_sigma``, ``set_learning_rate``).
    """

    def __init__(self, target_image, triangles: int = 150, size: int = 176, seed: int = 0,
                 engine: Engine | None = None, *, init_scene: Scene | None = None,
                 source: str | None = None, **settings):
        self.engine = engine or Engine("auto")
        self.settings = FitSettings(triangles=int(triangles), size=int(size), seed=int(seed), **settings)
        if not 1 <= self.settings.triangles <= MAX_TRIANGLES_FIT:
            raise TrifitError(f"triangle count must be between 1 and {MAX_TRIANGLES_FIT}, got {triangles}")
        self.target = as_target(target_image, self.settings.size)
        self.height, self.width = self.target.shape[:2]
        self.source = source if source is not None else (str(target_image) if isinstance(target_image, str) else None)
        self.history = History()
        self.wall_s = 0.0
        self.respawned = 0  # triangles re-placed by the respawn rule so far
        self.faults = 0     # NaN/inf losses survived (rolled back, learning rate halved)
        self.recoveries = 0  # lost GPU devices survived
        self._host_snapshot = None  # (raw, m, v, iteration): survives a lost device
        self._rng = np.random.default_rng(self.settings.seed)
        self._sigma_fixed: float | None = None  # set_sigma() pins sigma (fraction of the short side)
        self._sigma_scale = 1.0  # the final sigma's factor, learned by probes after the anneal (sigma_probes)
        self._probes_done = 0
        self._time_budgeted = False  # a time limit plans the fit (replan_for_time)
        self._pruning = False  # overgrow: the count has begun to fall back to settings.triangles
        self._stage_clock: tuple[bool, int, float] | None = None  # (coarse?, first iteration, seconds then)
        self._last_replan: tuple[int, float] = (0, 0.0)
        self._full_from = 0  # the iteration the full-size stage began
        self._t_full_guess: float | None = None
        self._schedule = self._default_schedule()
        self._coarse_target = self._half_size_target()
        if init_scene is not None:
            raw, n = self._raw_from_init_scene(init_scene)
            self._coarse_target = None  # refining: no coarse stage,
            self.settings.overgrow = 1.0  # and no over-growth: the scene's triangles are kept
        else:
            n = self._growth_target(0)
            raw = self._initial_raw(n)
        self.n_triangles = n
        self._loops: dict = {}  # fit loops by (triangle count, working size), least recently used first
        self._loop = self._make_loop(raw, n, 0)

    # ------------------------------------------------------------------ setup
    @property
    def short_side(self) -> int:
        return min(self.width, self.height)

    def _default_schedule(self) -> Schedule:
        """The plan's schedule; inside a pruning cycle after the first (with cycle_lr), its
        learning rate restarts at the cycle's start: a warm restart lets the whole scene move again
        around the triangles the cycle grew back, instead of only the new ones."""
        main = default_schedule(self.settings, self.short_side, self._sigma_fixed)
        if self._sigma_fixed is None and self._sigma_scale != 1.0:
            main.sigma_end *= self._sigma_scale
        loop = getattr(self, "_loop", None)
        cycle_start = self._later_cycle_start(loop.iter) if loop is not None else None
        if cycle_start is None:
            return main
        restart = Schedule(**vars(main))
        restart.lr_start = max(self.settings.cycle_lr, main.at(cycle_start)[1])
        restart.lr_offset = cycle_start
        restart.lr_decay_iters = self.settings.planned_iterations - cycle_start
        return restart

    def _later_cycle_start(self, iteration: int) -> float | None:
        """First iteration of the pruning cycle after the first that ``iteration`` is in (the last
        one once the cycles have ended), when cycles restart the learning rate; else None."""
        s = self.settings
        if s.cycle_lr <= 0 or self._peak() <= s.triangles:
            return None
        start, length, cycles = self._cycles()
        j = min(int((iteration - start) / length + 1e-9), cycles - 1) if iteration >= start else 0
        return start + j * length if j >= 1 else None

    def plan(self, total_iterations: int) -> None:
        """Fit the schedules (sigma anneal, lr decay, coarse stage, respawns) to this many iterations."""
        self.settings.planned_iterations = max(1, int(total_iterations))
        self._schedule = self._default_schedule()
        self._loop.set_schedule(self._schedule)

    @property
    def coarse_until(self) -> int:
        """Iteration at which the coarse (half-size) stage ends; 0 when there is none."""
        if self._coarse_target is None:
            return 0
        return int(self._coarse_share(self.settings.planned_iterations) * self.settings.planned_iterations)

    def _coarse_share(self, plan: int) -> float:
        """Fraction of the plan at half size: coarse_fraction, rising to coarse_max_fraction for
        time-limited fits whose plan is short (<= 500 iterations; unchanged from 2000 up).
        Measured on lavapipe, 12 s, 150 triangles: astronaut 21.28 -> 21.82 dB, chelsea 28.14 ->
        28.50 dB at 0.85 (0.93: 21.52 / 28.34); at a fixed iteration count it does not help."""
        s = self.settings
        if not self._time_budgeted or s.coarse_fraction <= 0:
            return s.coarse_fraction
        short = min(max((2000 - plan) / 1500, 0.0), 1.0)
        return s.coarse_fraction + (max(s.coarse_max_fraction, s.coarse_fraction) - s.coarse_fraction) * short

    def _half_size_target(self) -> np.ndarray | None:
        s = self.settings
        if s.coarse_fraction <= 0 or max(self.width, self.height) // 2 < s.coarse_min_size:
            return None
        from PIL import Image

        im = Image.fromarray((np.clip(self.target, 0, 1) * 255 + 0.5).astype(np.uint8), "RGB")
        small = im.resize((max(1, self.width // 2), max(1, self.height // 2)), Image.Resampling.LANCZOS)
        return np.asarray(small, dtype=np.float32) / 255.0

    def _working_target(self, iteration: int) -> np.ndarray:
        if self._coarse_target is not None and iteration < self.coarse_until:
            return self._coarse_target
        return self.target

    def _make_loop(self, raw, n: int, iteration: int, state=None):
        """The fit loop for n triangles from this state: a kept one reset (pruning cycles return to
        the same few counts; a new loop's buffers, bind groups and snapshots cost ~3 ms on the
        H200, dozens of times a second) or a new one."""
        target = self._working_target(iteration)
        key = (n, target.shape)
        loop = self._loops.pop(key, None)
        if loop is None:
            loop = self.engine.impl.fit_loop(target, raw, n, self.settings, self._schedule, iteration)
            if state is not None:
                loop.set_state(*state)
        else:
            zeros = np.zeros_like(np.asarray(raw, dtype=np.float64))
            loop.reset(*(state if state is not None else (raw, zeros, zeros)), iteration, self._schedule,
                       self.settings)
        self._loops[key] = loop
        while len(self._loops) > MAX_CACHED_LOOPS:  # the current loop is the newest: never evicted
            release_loop(self._loops.pop(next(iter(self._loops))))
        return loop

    def _peak(self) -> int:
        """The most triangles the schedule grows to: overgrow x the count, for counts up to overgrow_max."""
        s = self.settings
        if s.triangles > s.overgrow_max:
            return s.triangles
        return max(s.triangles, math.ceil(s.triangles * s.overgrow))

    def _growth_target(self, iteration: int) -> int:
        """How many triangles the growth (and, with overgrow > 1, pruning) schedule wants at ``iteration``.

        Over-grown fits prune between growth_until and prune_until in ``overgrow_cycles`` cycles of
        prune_stages steps each (after holding the peak for prune_hold of the cycle); every cycle
        after the first begins by growing back."""
        s = self.settings
        stages = max(1, s.growth_stages)
        peak = self._peak()
        start, cycle, cycles = self._cycles()
        if peak > s.triangles and (self._pruning or iteration >= start):
            u = max(0.0, iteration - start)
            j = int(u / cycle + 1e-9)  # (the fractions of the plan are not exact in binary)
            if j >= cycles:
                return s.triangles
            hold = s.prune_hold * cycle  # each cycle keeps its peak this long before pruning
            uc = u - j * cycle
            k = 0 if uc < hold - 1e-9 else \
                min(s.prune_stages, int((uc - hold) * s.prune_stages / max(cycle - hold, 1e-9) + 1e-9) + 1)
            return max(s.triangles, peak - math.ceil((peak - s.triangles) * k / s.prune_stages))
        if stages == 1:
            return peak
        stage_len = max(1.0, s.growth_until * s.planned_iterations / stages)
        k = min(stages, int(iteration // stage_len) + 1)
        return max(1, math.ceil(peak * k / stages))

    def _prune_cycles(self) -> int:
        """Pruning cycles in this plan: as many of at least prune_cycle_min iterations as fit
        between growth_until and prune_until, up to overgrow_cycles (with the defaults, a 12 s
        lavapipe plan of ~1,000 iterations has three, a 7,500-iteration plan twenty-four)."""
        s = self.settings
        span = (s.prune_until - s.growth_until) * s.planned_iterations
        return max(1, min(s.overgrow_cycles, int(span // max(1, s.prune_cycle_min))))

    def _cycles(self) -> tuple[float, float, int]:
        """(first iteration, length, count) of the pruning cycles in this plan."""
        s = self.settings
        cycles = self._prune_cycles()
        length = max(1.0, (s.prune_until - s.growth_until) * s.planned_iterations / cycles)
        return s.growth_until * s.planned_iterations, length, cycles

    def _next_prune_at(self, it: int) -> int:
        """The first iteration after ``it`` at which the pruning schedule wants another count."""
        s = self.settings
        start, cycle, cycles = self._cycles()
        hold = s.prune_hold * cycle
        stage = max(cycle - hold, 1e-9) / s.prune_stages
        for j in range(max(0, math.floor((it - start) / cycle)), cycles + 1):
            c0 = start + j * cycle  # the stage boundaries of cycle j, in order
            for b in [c0] + [c0 + hold + i * stage for i in range(s.prune_stages)]:
                at = max(it + 1, math.ceil(b - 1e-6))
                if b > it - 1e-9 and self._growth_target(at) != self.n_triangles:
                    return at
        return it + (1 << 30)

    def _new_triangles(self, n: int, image: np.ndarray | None, radius_scale: float = 1.0,
                       n_after: int | None = None) -> np.ndarray:
        return new_triangles(self.target, n, image, self._rng, self.settings, radius_scale, n_after)

    def _initial_raw(self, n: int) -> np.ndarray:
        return initial_raw(self.target, n, self._rng, self.settings, self._schedule.sigma_start)

    def _raw_from_init_scene(self, scene: Scene):
        if scene.n_triangles < 1:
            raise TrifitError("the scene to refine has no triangles")
        s = scene.copy()
        s.sigma = self._schedule.sigma_start
        return raw_from_scene(s), scene.n_triangles

    # ------------------------------------------------------------------ stepping
    @property
    def iteration(self) -> int:
        return self._loop.iter

    def step(self, iterations: int = 100) -> StepStats:
        """Run ``iterations`` iterations (on the device for the GPU backend).

        A NaN/inf loss rolls back to the last good parameters and halves the learning rates (with
        a warning); a lost GPU device is recreated and the fit resumes from the last host snapshot."""
        n = int(iterations)
        if n < 0:
            raise ValueError("iterations must be >= 0")
        t0 = time.perf_counter()
        target_iter = self._loop.iter + n
        consecutive = 0
        while self._loop.iter < target_iter:
            start = self._loop.iter + 1
            to_event = self._iterations_to_next_event()
            k = min(target_iter - self._loop.iter, to_event)
            # an event (or a host snapshot) after this chunk reads the state: bring it back with
            # the chunk's losses rather than in a round trip of its own
            read_state = k == to_event or self._snapshot_due(self._loop.iter + k)
            # ... and the last forward's image, for growth or a respawn to place against
            read_image = k == to_event and self._may_place_at(self._loop.iter + k)
            try:
                losses = self._loop.run(k, read_state=read_state, read_image=read_image)
            except NumericalFault as fault:
                consecutive += 1
                self._on_numerical_fault(fault, consecutive)
                self.history.truncate(self._loop.iter)
                continue
            except DeviceLostError as lost:
                self._recover_device(lost)
                self.history.truncate(self._loop.iter)
                continue
            consecutive = 0
            self.history.add(start, losses)
            self._handle_events()
            self._maybe_snapshot()
        dt = time.perf_counter() - t0
        self.wall_s += dt
        loss = self.history.losses[-1] if len(self.history) else float("nan")
        return StepStats(self._loop.iter, n, loss, psnr_from_mse(loss) if self.settings.loss == "mse" else float("nan"),
                         dt, n / dt if dt > 0 else float("inf"), self.n_triangles,
                         self._loop.sigma * self.short_side)

    def _on_numerical_fault(self, fault: NumericalFault, consecutive: int) -> None:
        self.faults += 1
        if consecutive > MAX_CONSECUTIVE_FAULTS:
            raise TrifitError(f"the fit keeps diverging ({fault}); giving up after {MAX_CONSECUTIVE_FAULTS} rollbacks")
        for name in ("lr_vertex", "lr_colour", "lr_alpha", "lr_background"):
            setattr(self.settings, name, getattr(self.settings, name) * 0.5)
        self._loop.set_optim(self.settings)
        msg = f"{fault}; learning rates halved (lr_vertex now {self.settings.lr_vertex:.3g})"
        log.warning(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)

    def _snapshot_due(self, iteration: int) -> bool:
        every = self.settings.host_snapshot_every
        last = self._host_snapshot[3] if self._host_snapshot else -every
        return every > 0 and iteration - last >= every

    def _maybe_snapshot(self) -> None:
        if self._snapshot_due(self._loop.iter):
            self._host_snapshot = (*self._loop.get_state(), self._loop.iter)

    def _recover_device(self, lost: DeviceLostError) -> None:
        """Recreate the device and resume from the last host snapshot (at most host_snapshot_every back)."""
        self.recoveries += 1
        if self.recoveries > 3:
            raise lost
        msg = f"{lost}; recreating the device and resuming from iteration {self._host_snapshot[3] if self._host_snapshot else 0}"
        log.warning(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)
        self.engine.reset_device()
        if self._host_snapshot is None:
            raise lost
        raw, m, v, it = self._host_snapshot
        self._loops.clear()  # their buffers died with the old device
        self._loop = self._make_loop(raw, self.n_triangles, it, state=(raw, m, v))

    def inject_fault(self, kind: str = "nan") -> None:
        """Testing aid: ``"nan"`` corrupts a parameter on the device; ``"device-lost"`` destroys the device."""
        if kind == "nan":
            self._loop.inject_fault()
        elif kind == "device-lost":
            self.engine.lose_device()
        else:
            raise ValueError(kind)

    def _iterations_to_next_event(self) -> int:
        it = self._loop.iter
        events = []
        if self._loop_is_coarse():
            events.append(self.coarse_until - it)
        every = self.settings.respawn_every
        if every > 0 and it < self._respawn_until():
            events.append(every - it % every)
        if self.n_triangles < self._peak() and self.settings.growth_stages > 1 and not self._pruning:
            s = self.settings
            stage_len = max(1, int(s.growth_until * s.planned_iterations / s.growth_stages))
            events.append(stage_len - it % stage_len)
        if self._pruning or self.n_triangles > self.settings.triangles:
            events.append(self._next_prune_at(it) - it)
        probe = self._next_probe_at()
        if probe is not None:
            events.append(probe - it)
        return max(1, min(events)) if events else 1 << 30

    def _next_probe_at(self) -> int | None:
        """Iteration of the next sigma probe: sigma_probes of them, evenly from the anneal's end
        to the plan's end (None: no more, or sigma is pinned by hand)."""
        s = self.settings
        if s.sigma_probes <= 0 or self._sigma_fixed is not None or self._probes_done >= s.sigma_probes \
                or self._loop_is_coarse():
            return None
        plan = s.planned_iterations
        start = s.sigma_fraction * plan
        return math.ceil(start + self._probes_done * (plan - start) / (s.sigma_probes + 1))

    def _probe_sigma(self) -> None:
        """One Newton step on log(sigma) for the loss at the current triangles: render at sigma
        x e^(-eps, 0, +eps), fit a parabola, move the final sigma's factor to its minimum
        (at most 2 eps a probe; downhill by eps where the parabola is not convex). The scene's
        sigma is one number, and what suits a photograph differs (H200, 5,000 iterations: a fixed
        0.4 px suited astronaut better than 0.5, 0.7 px chelsea; the probes end near 0.36 and 0.58).
        The three renders go through a cached workspace (the engine keeps four): left alone, a fit
        probes at most two counts."""
        self._probes_done += 1
        eps = self.settings.sigma_probe_eps
        _, tris, bg, sigma = self._state_now()  # (the state came back with the chunk's losses)
        scenes = [Scene(self.width, self.height, sigma * math.exp(k * eps), np.clip(bg, 0, 1), tris)
                  for k in (-1, 0, 1)]
        target = self._working_target(self._loop.iter)
        images = self.engine.render_many(scenes, target.shape[1], target.shape[0])
        lm, l0, lp = (float(np.mean((im - target) ** 2)) for im in images)
        curv, slope = (lp + lm - 2 * l0) / eps ** 2, (lp - lm) / (2 * eps)
        step = -slope / curv if curv > 0 else -math.copysign(eps, slope)
        step = min(max(step * self.settings.sigma_probe_gain, -2 * eps), 2 * eps)
        self._sigma_scale = min(max(self._sigma_scale * math.exp(step), 0.25), 4.0)
        self._schedule = self._default_schedule()
        self._loop.set_schedule(self._schedule)

    def _loop_is_coarse(self) -> bool:
        return self._loop.target_shape != self.target.shape

    def _handle_events(self) -> None:
        it = self._loop.iter
        if self._later_cycle_start(it) is not None:
            sched = self._default_schedule()
            if sched != self._schedule:  # a cycle began: its learning rate restarts
                self._schedule = sched
                self._loop.set_schedule(sched)
        if self._loop_is_coarse() and it >= self.coarse_until:
            self._rebuild(*self._loop.get_state(), self.n_triangles)  # now at full size
            self._full_from = it
        want = self._growth_target(it)
        if want > self.n_triangles and (not self._pruning or self._prune_cycles() > 1):
            self._grow(want)  # (a later pruning cycle grows back first)
        elif want < self.n_triangles and self._peak() > self.settings.triangles:
            self._pruning = True  # from here (with one cycle) the count only falls, whatever re-planning does
            self._prune(max(want, self.settings.triangles))
        if self._respawn_due(it):
            self._respawn()
        probe = self._next_probe_at()
        if probe is not None and it >= probe:
            self._probe_sigma()

    def _respawn_until(self) -> float:
        """Iteration at which respawns stop: respawn_until of the plan, or where pruning begins
        in an over-grown fit: pruning removes what stopped contributing, and each check is a
        readback that a 1 s fit pays for in iterations (QUALITY.md)."""
        s = self.settings
        until = s.respawn_until * s.planned_iterations
        return min(until, s.growth_until * s.planned_iterations) if self._peak() > s.triangles else until

    def _respawn_due(self, iteration: int) -> bool:
        """Whether ``iteration`` has a respawn check (every respawn_every, until _respawn_until)."""
        every = self.settings.respawn_every
        return every > 0 and iteration % every == 0 and iteration < self._respawn_until()

    def _may_place_at(self, iteration: int) -> bool:
        """Whether an event at ``iteration`` may place new triangles (growth or a respawn) at full
        size, so the chunk before it should bring the loop's image back."""
        if self._loop_is_coarse() and iteration < self.coarse_until:
            return False
        return self._respawn_due(iteration) or self._growth_target(iteration) > self.n_triangles

    def _render_now(self, tris, bg, sigma) -> np.ndarray:
        """The current scene at the working size, for a growth or respawn error map: the GPU loop's
        last forward when it came back with the chunk (one Adam step older than ``tris``; no
        render of its own), else a render. Transient: the triangle count changes from event to
        event, and a cached render workspace per count holds buffers the pool could otherwise
        hand to the next loop (docs/RELIABILITY.md, soak 2)."""
        image = self._loop.last_image()
        if image is not None and image.shape == self.target.shape:
            return image
        scene = Scene(self.width, self.height, sigma, np.clip(bg, 0, 1), tris)
        return self.engine.render_many([scene], self.width, self.height, transient=True)[0]

    def _respawn(self) -> int:
        """Re-place triangles that stopped contributing where the error is largest; returns how many."""
        parts, tris, bg, sigma = self._state_now()
        dead = np.flatnonzero((tris[:, 9] < self.settings.respawn_alpha) | (self._usefulness(tris) / np.maximum(tris[:, 9], 1e-9) < 1.0))
        if len(dead) == 0:
            return 0
        image = self._render_now(tris, bg, sigma)
        new = self._new_triangles(len(dead), image, radius_scale=self.settings.insert_radius)
        new[:, 6:10] = logit(new[:, 6:10])
        alive = np.ones(self.n_triangles, dtype=bool)
        alive[dead] = False
        keep = np.flatnonzero(alive)  # (np.setdiff1d's first call imports numpy.ma: 50 ms of a 1 s fit)
        order = np.concatenate([keep, dead])  # respawned triangles go on top
        state = []
        for k, (tri, rest) in enumerate(parts):
            tri = tri[order].copy()
            tri[len(keep):] = new if k == 0 else 0  # fresh Adam moments
            state.append(np.concatenate([tri.ravel(), rest]))
        self._loop.set_state(*state)
        self.respawned += len(dead)
        return len(dead)

    def run(self, stop: StopConditions, callback=None, chunk: int | None = None) -> StepStats:
        """Step until a stop condition holds; ``callback(stats)`` after each chunk (return False to stop).

        ``chunk``: iterations per step; by default sized from the measured speed so a step takes
        about RUN_STEP_S, at most one submission (settings.chunk): a few iterations on lavapipe,
        a whole submission on a discrete GPU, so a time limit ends within ~0.1 s.
        The schedules are planned to end with the fit: on ``stop.iterations`` when given, else,
        with a time limit, on the iteration count the measured speed predicts (re-estimated
        after every chunk)."""
        if not stop.any():
            raise ValueError("give at least one stop condition")
        fixed = chunk
        cap = max(1, min(self.settings.chunk, MAX_RUN_STEP))  # at most one submission per step
        start_iter, t0 = self.iteration, time.perf_counter()
        if stop.iterations is not None:
            self.plan(start_iter + stop.iterations)
        elif stop.time_limit is not None:
            self.plan(start_iter + 100)  # a first guess, corrected from the speed
        best, best_at = float("inf"), self.iteration
        stats = None
        last = None  # (iterations, seconds) of the previous step
        while True:
            if fixed:
                n = fixed
            elif last is None or last[0] <= 0:
                n = min(FIRST_RUN_STEP, cap)
            else:  # sized from the previous step's speed (a stage change shows at once)
                n = int(min(max(RUN_STEP_S * last[0] / max(last[1], 1e-9), 1), cap))
            if stop.iterations is not None:
                n = min(n, stop.iterations - (self.iteration - start_iter))
                if n <= 0:
                    break
            if stop.time_limit is not None and last is not None and last[0] > 0:
                # end within the limit, not a step past it: as many iterations as the last step's
                # speed says still fit (a host event inside the step can still overrun by its cost)
                left = stop.time_limit - (time.perf_counter() - t0)
                n = min(n, int(left * last[0] / max(last[1], 1e-9)))
                if n <= 0:
                    break
            before, t_step = self.iteration, time.perf_counter()
            stats = self.step(n)
            last = (self.iteration - before, time.perf_counter() - t_step)
            elapsed = time.perf_counter() - t0
            if callback is not None and callback(stats) is False:
                break
            if stop.time_limit is not None and elapsed >= stop.time_limit:
                break
            if stop.time_limit is not None and stop.iterations is None:
                self.replan_for_time(start_iter, elapsed, stop.time_limit)
            if stop.target_psnr is not None and stats.psnr >= stop.target_psnr:
                break
            if stats.loss < best * (1 - 1e-3):
                best, best_at = stats.loss, self.iteration
            elif stop.plateau is not None and self.iteration - best_at >= stop.plateau:
                break
        if self.n_triangles > self.settings.triangles:  # stopped before pruning ended: finish it
            self._pruning = True
            self._prune(self.settings.triangles)
        return stats if stats is not None else self.step(0)

    def replan_for_time(self, start_iter: int, elapsed: float, limit: float) -> None:
        """Re-plan the schedules so they end when ``limit`` seconds of fitting end, from the speed
        measured since ``start_iter`` (``elapsed`` seconds ago). Fitter.run calls it after every
        chunk of a time-limited fit; a GUI driving step() itself can call it too.

        Each stage's speed is measured on its own: a half-size iteration costs about 0.4 of a
        full one on lavapipe (14 vs 35 ms at 176 px, 150 triangles) and about as much as one on a
        launch-bound GPU, so neither can be derived from the other by the pixel count. Until the
        full-size stage has run, its cost is guessed as COARSE_COST_GUESS."""
        done = self.iteration - start_iter
        if done <= 0 or elapsed <= 0:
            return
        self._time_budgeted = True
        coarse_now = self._loop_is_coarse()
        clock = self._stage_clock
        if clock is None or clock[1] < start_iter:
            clock = (coarse_now, start_iter, 0.0)
        elif clock[0] != coarse_now:  # the full-size stage began since the previous call
            # its clock starts there: at this call when it began with no full-size iteration run yet,
            # else at the previous call (exact when chunks end at the switch, as Fitter.run's do)
            clock = (coarse_now, self.iteration, elapsed) if self._full_from >= self.iteration \
                else (coarse_now, *self._last_replan)
        self._stage_clock = clock
        self._last_replan = (self.iteration, elapsed)
        in_stage = self.iteration - clock[1]
        t_stage = (elapsed - clock[2]) / in_stage if in_stage > 0 else None
        if coarse_now:
            t_coarse = t_stage if t_stage is not None else elapsed / done
            t_full = self._t_full_guess = t_coarse / COARSE_COST_GUESS
        else:
            t_coarse = 0.0
            t_full = t_stage if t_stage is not None else (self._t_full_guess or elapsed / done)
        left = max(limit - elapsed, 0.0)
        it = self.iteration
        plan = self.settings.planned_iterations
        for _ in range(8):  # the coarse share depends on the plan: a few fixed-point steps
            coarse_left = max(0, int(self._coarse_share(plan) * plan) - it) if coarse_now else 0
            t_left = left - coarse_left * t_coarse
            plan = it + coarse_left + max(0, int(t_left / t_full))
        if abs(plan - self.settings.planned_iterations) > 0.05 * self.settings.planned_iterations:
            self.plan(max(plan, self.iteration + 1))

    # ------------------------------------------------------------------ live changes
    def set_sigma(self, sigma_px: float | None) -> None:
        """Fix the edge softness at ``sigma_px`` pixels from the next step (None: back to the anneal)."""
        if sigma_px is None:
            self._sigma_fixed = None
        else:
            if not (0 < float(sigma_px) <= 1000):
                raise ValueError(f"sigma must be in (0, 1000] px, got {sigma_px}")
            self._sigma_fixed = float(sigma_px) / self.short_side
        self._schedule = self._default_schedule()
        self._loop.set_schedule(self._schedule)

    def set_learning_rate(self, scale: float) -> None:
        """Scale every learning-rate group (1.0 = the defaults) from the next step."""
        if not (0 < float(scale) <= 100):
            raise ValueError(f"learning-rate scale must be in (0, 100], got {scale}")
        base = FitSettings()
        for name in ("lr_vertex", "lr_colour", "lr_alpha", "lr_background"):
            setattr(self.settings, name, getattr(base, name) * float(scale))
        self._rebuild(*self._loop.get_state(), self.n_triangles)

    def set_triangles(self, n: int) -> None:
        """Grow (new triangles where the error is largest) or shrink (keep those whose removal would cost most)."""
        n = int(n)
        if not 1 <= n <= MAX_TRIANGLES_FIT:
            raise ValueError(f"triangle count must be between 1 and {MAX_TRIANGLES_FIT}, got {n}")
        self.settings.triangles = n
        self.settings.overgrow = 1.0  # a count set by hand is the count: no more over-growing
        if n > self.n_triangles:
            self._grow(n)
        elif n < self.n_triangles:
            self._prune(n, transient=True)  # the costs' workspace: a shape for this one call
        self._release_other_loops()  # live changes pick arbitrary counts: keep nothing for them

    def _state_now(self):
        """The loop's state split per triangle ([(tri, rest)] for raw, m and v) and the scene's
        triangles, background and sigma, from one readback: the values are the raw parameters'
        sigmoids on the host (reading the device's scene record too would be a second sync)."""
        raw, m, v = self._loop.get_state()
        T = self.n_triangles
        parts = [(a[: T * 10].reshape(T, 10), a[T * 10:]) for a in (raw, m, v)]
        tris, bg = values_from_raw(raw, T)
        return parts, tris, bg, self._loop.sigma

    def _join_state(self, parts, n: int) -> None:
        raw, m, v = (np.concatenate([tri.ravel(), bg]) for tri, bg in parts)
        self._rebuild(raw, m, v, n)

    def _grow(self, n: int) -> None:
        """Add triangles on top, where the current render is furthest from the target."""
        parts, tris, bg, sigma = self._state_now()
        image = self._render_now(tris, bg, sigma)
        new = self._new_triangles(n - self.n_triangles, image, radius_scale=self.settings.insert_radius, n_after=n)
        new[:, 6:10] = logit(new[:, 6:10])
        parts = [(np.concatenate([tri, new if k == 0 else np.zeros_like(new)]), rest)
                 for k, (tri, rest) in enumerate(parts)]
        self._join_state(parts, n)

    def _most_costly(self, tris, bg, sigma, n: int, transient: bool = False) -> np.ndarray:
        """Indices (in painting order) of the n triangles whose removal would cost most against
        the working-size target: one forward and backward pass on the GPU (the backward sums the
        costs), host work with the reference backend. ``transient``: a one-off count, whose
        workspace should not stay cached."""
        scene = Scene(self.width, self.height, sigma, np.clip(bg, 0, 1), tris)
        costs = self.engine.removal_costs(scene, self.target, transient=transient)
        return np.sort(np.argsort(-costs, kind="stable")[:n])

    def _prune(self, n: int, transient: bool = False) -> None:
        """Keep the n triangles whose removal would cost most, in their painting order."""
        if n >= self.n_triangles:
            return
        parts, tris, bg, sigma = self._state_now()
        keep = self._most_costly(tris, bg, sigma, n, transient)
        self._join_state([(tri[keep], rest) for tri, rest in parts], n)

    def _usefulness(self, tris: np.ndarray) -> np.ndarray:
        """Opacity x on-frame area (in pixels) of each triangle: how much it can matter."""
        v = tris[:, :6].reshape(-1, 3, 2).copy()
        v = np.clip(v, 0.0, 1.0)
        v[..., 0] *= self.width
        v[..., 1] *= self.height
        e1, e2 = v[:, 1] - v[:, 0], v[:, 2] - v[:, 0]
        area = 0.5 * np.abs(e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0])
        return tris[:, 9] * area

    def _release_other_loops(self) -> None:
        """Give every kept loop but the current one back to the pool."""
        for key, loop in list(self._loops.items()):
            if loop is not self._loop:
                release_loop(self._loops.pop(key))

    def _rebuild(self, raw, m, v, n: int) -> None:
        it = self._loop.iter
        self.n_triangles = n
        self._loop = self._make_loop(raw, n, it, state=(raw, m, v))

    # ------------------------------------------------------------------ results
    @property
    def scene(self) -> Scene:
        """The current scene at the working size, with ``meta`` filled in: the requested number
        of triangles -- while the fit is over-grown, the ones that would cost most to remove."""
        tris, bg, sigma = self._loop.current_values()
        if len(tris) > self.settings.triangles:  # over-grown
            tris = tris[self._most_costly(tris, bg, sigma, self.settings.triangles)]
        meta = {
            "software": f"trifit {__version__}",
            "seed": self.settings.seed,
            "source": self.source,
            "iterations": self.iteration,
            "backend": self.engine.backend,
            "adapter": self.engine.adapter.get("name"),
            "settings": self.settings.as_dict(),
        }
        return Scene(self.width, self.height, float(sigma), np.clip(bg, 0, 1), tris.copy(), {"meta": meta})

    def gpu_image(self):
        """(wgpu buffer, width, height) of the last forward's image for the GPU backend, else None.

        During the coarse stage the image is the half-size one the fit works on (width and height
        say so); float32 rgb, interleaved, row-major. The buffer is written by the fitting thread's
        submissions: draw it from the same device, never map it from another thread."""
        return self._loop.gpu_image()

    def timings(self, recent: int | None = None) -> dict:
        """Median per-pass GPU ms (sampled iterations), host phases, counters and pool use;
        ``recent=N`` takes the medians over the last N samples only (for live plots)."""
        return loop_timings(self._loop, self.engine, recent)

    def close(self) -> None:
        for loop in self._loops.values():
            release_loop(loop)
        self._loops.clear()


# ---------------------------------------------------------------------- batched fits
#: what the batched path always runs with: nothing changes the triangle count or the frame size
BATCH_FIXED = {"growth_stages": 1, "respawn_every": 0, "coarse_fraction": 0.0, "overgrow": 1.0, "sigma_probes": 0}


class BatchFitter:
    """Fit ``triangles`` soft triangles to each of several equal-size images, in lockstep, through
    one batched fit loop (one set of dispatches per iteration for the whole batch).

    Each image is initialised as :class:`Fitter` initialises it (same helpers, its own seed's
    random stream) and stepped with the same Adam and schedules. The batched path is simpler
    than Fitter's: a **fixed triangle count** (no growth stages), **no respawn** and **no
    coarse stage**, **no sigma probes** (:data:`BATCH_FIXED` overrides those settings, and the scenes' meta records
    it), one stop condition (an iteration count, :meth:`run`), and shared learning rates: a
    NaN/inf loss in any image rolls the whole batch back and halves every image's learning
    rates. A lost device is not recovered here (DeviceLostError propagates). So image ``b``
    equals, to float tolerance, ``Fitter(targets[b], triangles, size, seeds[b], **BATCH_FIXED)``
    run for the same iterations -- the other images never change its result.
    """

    def __init__(self, targets, triangles: int = 150, size: int = 176, seeds=0,
                 engine: Engine | None = None, *, sources=None, **settings):
        self.engine = engine or Engine("auto")
        targets = [as_target(t, int(size)) for t in targets]
        if not targets:
            raise TrifitError("a batched fit needs at least one image")
        shapes = {t.shape for t in targets}
        if len(shapes) != 1:
            raise TrifitError(f"a batched fit needs images of one working size, got {sorted(shapes)}")
        B = len(targets)
        seeds = [int(seeds)] * B if np.isscalar(seeds) else [int(s) for s in seeds]
        if len(seeds) != B:
            raise TrifitError(f"{len(seeds)} seeds for {B} images")
        self.sources = list(sources) if sources is not None else [None] * B
        if len(self.sources) != B:
            raise TrifitError(f"{len(self.sources)} sources for {B} images")
        # run(n) is one call with no time-based steps: keep each submission to 25 iterations of
        # the whole batch, so one submission stays short on slow adapters
        settings = {"chunk": BATCH_SUBMISSION, **settings, **BATCH_FIXED}
        self.settings = [FitSettings(triangles=int(triangles), size=int(size), seed=s, **settings) for s in seeds]
        if not 1 <= self.settings[0].triangles <= MAX_TRIANGLES_FIT:
            raise TrifitError(f"triangle count must be between 1 and {MAX_TRIANGLES_FIT}, got {triangles}")
        self.targets = targets
        self.height, self.width = targets[0].shape[:2]
        self.n_triangles = self.settings[0].triangles
        self.history = [History() for _ in range(B)]
        self.wall_s = 0.0
        self.faults = 0
        self._schedule = default_schedule(self.settings[0], min(self.width, self.height))
        raws = [initial_raw(t, self.n_triangles, np.random.default_rng(s.seed), s, self._schedule.sigma_start)
                for t, s in zip(targets, self.settings)]
        self._loop = self.engine.impl.fit_loop(np.stack(targets), np.stack(raws), self.n_triangles,
                                               self.settings[0], self._schedule, 0)

    def __len__(self) -> int:
        return len(self.targets)

    @property
    def iteration(self) -> int:
        return self._loop.iter

    def plan(self, total_iterations: int) -> None:
        """Fit the schedules (sigma anneal, lr decay) to this many iterations."""
        for s in self.settings:
            s.planned_iterations = max(1, int(total_iterations))
        self._schedule = default_schedule(self.settings[0], min(self.width, self.height))
        self._loop.set_schedule(self._schedule)

    def run(self, iterations: int) -> np.ndarray:
        """Plan for and run ``iterations`` more iterations; returns each image's last loss (B,)."""
        self.plan(self.iteration + int(iterations))
        return self.step(iterations)

    def step(self, iterations: int) -> np.ndarray:
        """Run ``iterations`` iterations (no re-planning); returns each image's last loss (B,)."""
        n = int(iterations)
        if n < 0:
            raise ValueError("iterations must be >= 0")
        t0 = time.perf_counter()
        target_iter = self._loop.iter + n
        consecutive = 0
        while self._loop.iter < target_iter:
            start = self._loop.iter + 1
            try:
                losses = self._loop.run(target_iter - self._loop.iter)
            except NumericalFault as fault:
                consecutive += 1
                self.faults += 1
                if consecutive > MAX_CONSECUTIVE_FAULTS:
                    raise TrifitError(f"the batched fit keeps diverging ({fault}); giving up after "
                                      f"{MAX_CONSECUTIVE_FAULTS} rollbacks") from None
                for s in self.settings:
                    for name in ("lr_vertex", "lr_colour", "lr_alpha", "lr_background"):
                        setattr(s, name, getattr(s, name) * 0.5)
                self._loop.set_optim(self.settings[0])
                msg = f"{fault}; learning rates of the whole batch halved"
                log.warning(msg)
                warnings.warn(msg, RuntimeWarning, stacklevel=2)
                for h in self.history:
                    h.truncate(self._loop.iter)
                continue
            consecutive = 0
            for b, h in enumerate(self.history):
                h.add(start, losses[:, b])
        self.wall_s += time.perf_counter() - t0
        return np.array([h.losses[-1] if len(h) else float("nan") for h in self.history])

    @property
    def scenes(self) -> list[Scene]:
        """Each image's current scene at the working size, with ``meta`` as :attr:`Fitter.scene`'s."""
        tris, bg, sigma = self._loop.current_values()
        out = []
        for b, s in enumerate(self.settings):
            meta = {
                "software": f"trifit {__version__}",
                "seed": s.seed,
                "source": self.sources[b],
                "iterations": self.iteration,
                "backend": self.engine.backend,
                "adapter": self.engine.adapter.get("name"),
                "settings": s.as_dict(),
                "batched": len(self),
            }
            out.append(Scene(self.width, self.height, float(sigma), np.clip(bg[b], 0, 1), tris[b].copy(),
                             {"meta": meta}))
        return out

    def member(self, b: int, scene: Scene | None = None) -> "BatchMember":
        """A Fitter-like view of image ``b`` (for render.report.build_report)."""
        return BatchMember(self, b, scene)

    def timings(self, recent: int | None = None) -> dict:
        """Median per-pass GPU ms (sampled iterations), host phases, counters and pool use;
        ``recent=N`` takes the medians over the last N samples only (for live plots)."""
        return loop_timings(self._loop, self.engine, recent)

    def close(self) -> None:
        release_loop(self._loop)


class BatchMember:
    """One image of a :class:`BatchFitter`, with the attributes a report reads off a Fitter."""

    def __init__(self, batch: BatchFitter, b: int, scene: Scene | None = None):
        self.batch, self.b = batch, b
        self.engine = batch.engine
        self.target = batch.targets[b]
        self.width, self.height = batch.width, batch.height
        self.settings = batch.settings[b]
        self.source = batch.sources[b]
        self.history = batch.history[b]
        self.n_triangles = batch.n_triangles
        self.iteration = batch.iteration
        self.wall_s = batch.wall_s  # the batch's time: the images ran together
        self.coarse_until = 0
        self.respawned = 0
        self._scene = scene

    @property
    def scene(self) -> Scene:
        return self._scene if self._scene is not None else self.batch.scenes[self.b]

    def timings(self, recent: int | None = None) -> dict:
        return self.batch.timings(recent)
