"""The fitter's mechanics: B images' parameters and Adam moments in one fit loop, stepped in
lockstep, with the operations a strategy uses to change them.

``Fitter`` (one image) and ``BatchFitter`` (equal-size images) own the fit loop (on the device
for the GPU backend, render/gpu/fitloop.py; in numpy for the reference), fault recovery, host
snapshots, history and results. What happens when -- growth, pruning, respawn, sigma probes, the
coarse stage, the schedules -- is the strategy's (render/strategy.py); how long a fit runs, and
when it stops, is the run loop's (render/run.py). ``step(n)`` cuts its chunks at the strategy's
event iterations, so a fit's scene depends on the iterations run, never on how they were chunked.

The state and the operations that change it (``add``, ``keep``, ``replace``, ``use_schedule``,
``to_full_size``) are render/fitstate.py's.
"""

from __future__ import annotations

import functools
import logging
import os
import time
import warnings
from dataclasses import replace as dc_replace

import numpy as np

from . import __version__, edits, focus
from .checkpoint import Checkpoint, check_checkpoint, restore as restore_checkpoint, settings_of, take as take_checkpoint
from .engine import Engine
from .errors import BatchError, ImageError, NumericalFault, SettingsError, TrifitError
from .fitloop import CHANGE_KINDS, EXACT_STOP_TRANSMITTANCE, FitSettings, check_settings, raw_from_scene
from .fitstate import FitState, HostSnapshot, half_size
from .history import History, StepStats, loop_timings, psnr_from_mse, release_loop
from .imageio import as_target
from .limits import MAX_TRIANGLES_FIT, MAX_WORKING_SIZE, is_whole
from .placement import PLACEMENTS, initial_raw
from .replicas import auto_replicas, winners
from .scene import Scene, locked_indices
from .strategy import STRATEGIES, make_strategy, timed_cycle_min

log = logging.getLogger("trifit")

#: consecutive numerical faults after which the fit gives up
MAX_CONSECUTIVE_FAULTS = 8

__all__ = ["BatchFitter", "Fitter", "History", "StepStats", "MAX_TRIANGLES_FIT", "psnr_from_mse"]


def _whole(value, what: str) -> int:
    """``value`` as an int where it is a whole number (Python's or numpy's), else SettingsError:
    int() would take 2.5, True or "3"."""
    if not is_whole(value):
        raise SettingsError(f"{what} must be a whole number, got {value!r:.40}")
    return int(value)


def _rows(values, n: int) -> list[list[float]]:
    """``n`` triangles' 10 numbers each, as lists (SettingsError naming what came instead)."""
    try:
        rows = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise SettingsError(f"expected {n} triangle(s) of 10 numbers, got {values!r:.60}") from None
    if rows.size != 10 * n:
        raise SettingsError(f"expected {n} triangle(s) of 10 numbers, got {rows.size} numbers")
    return rows.reshape(n, 10).tolist()


def _while_open(method):
    """A Fitter method that needs the fit's buffers: refused once :meth:`Fitter.close` gave them back."""
    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        if self.closed:
            raise TrifitError(f"this fitter is closed: {method.__name__}() needs a fitter that is not")
        return method(self, *args, **kwargs)

    return guarded


class Fitter(FitState):
    """Fit ``triangles`` soft triangles to ``target_image`` (path, PIL image or array).

    The target is resized so its longer side is ``size`` px. ``step(n)`` runs n iterations;
    ``run(stop)`` runs until a stop condition holds (render/run.py); between steps the fit can
    be changed (``set_triangles``, ``set_sigma``, ``set_learning_rate``, ``set_locked``), and
    every change is recorded with its iteration in the scene's meta. ``strategy``: "default" or
    "fixed". ``weights``: a focus map (path to a grey image, PIL image or (H, W) array in [0, 1]
    of the target's aspect), resized to the working size: each pixel's loss term is weighted by
    it (render/focus.py). An ``init_scene`` with a ``locked`` key keeps those triangles as they are."""

    closed = False  # set by close()

    def __init__(self, target_image, triangles: int = 150, size: int = 176, seed: int = 0,
                 engine: Engine | None = None, *, init_scene: Scene | None = None,
                 source: str | None = None, weights=None, **settings):
        if source is None and isinstance(target_image, str):
            source = str(target_image)
        self._setup([target_image], [seed], [source], init_scene, triangles, size, engine, settings,
                    weights=None if weights is None else [weights])

    @classmethod
    def resume(cls, target_image, checkpoint: Checkpoint, engine: Engine | None = None, *,
               source: str | None = None, strategy=None, weights=None) -> Fitter:
        """The fit ``checkpoint`` was taken of (render/checkpoint.py), continuing as if it had only
        paused: its iteration, schedule, optimiser state, strategy progress and history.
        ``target_image`` must be the image it was fitting (it is checked by working size).
        ``strategy``: for a fit that went on under a strategy of its own (:meth:`use_strategy`),
        what makes that strategy for the new fitter (``strategy(fitter)``). ``weights``: the focus
        map it was fitting with, if any (a checkpoint keeps no pixels); its locks it keeps."""
        if source is None and isinstance(target_image, str):
            source = str(target_image)
        if not isinstance(checkpoint, Checkpoint):
            raise TypeError(f"resume takes a Checkpoint (Fitter.checkpoint(), load_checkpoint), got "
                            f"{type(checkpoint).__name__}")
        checkpoint = check_checkpoint(checkpoint)  # (one made or changed in memory: a file's rules)
        initial, now = settings_of(checkpoint)
        if cls is not Fitter or checkpoint.state["batch"] != initial.replicas:
            raise TrifitError("Fitter.resume continues a one-image fit")
        rest = {k: v for k, v in initial.as_dict().items() if k not in ("triangles", "size", "seed")}
        fit = cls.__new__(cls)
        fit._setup([target_image], [initial.seed], [source], None, initial.triangles, initial.size, engine, rest,
                   resume=(checkpoint, now), strategy=strategy, weights=None if weights is None else [weights])
        return fit

    @_while_open
    def checkpoint(self) -> Checkpoint:
        """Everything :meth:`resume` needs to go on from here (call between steps)."""
        return take_checkpoint(self)

    def _setup(self, images, seeds, sources, init_scene, triangles, size, engine, settings, resume=None,
               strategy=None, weights=None) -> None:
        named = {"triangles": triangles, "size": size, **{f"seeds[{b}]": v for b, v in enumerate(seeds)}}
        for key, value in named.items():
            _whole(value, key)
        if not 1 <= triangles <= MAX_TRIANGLES_FIT:
            raise TrifitError(f"triangle count must be between 1 and {MAX_TRIANGLES_FIT}, got {triangles}")
        if not 1 <= size <= MAX_WORKING_SIZE:  # (a path's size is checked by load_image; an array's here)
            raise ImageError(f"working size must be between 1 and {MAX_WORKING_SIZE} px, got {size}")
        if min(seeds) < 0:
            raise SettingsError(f"seeds must be >= 0, got {min(seeds)}")
        settings = {k: v.item() if isinstance(v, np.generic) else v for k, v in settings.items()}
        unknown = sorted(set(settings) - set(FitSettings.__dataclass_fields__))
        if unknown:
            raise SettingsError(f"unknown setting {unknown[0]!r}")
        self.closed = False
        self.engine = engine or Engine("auto")
        self.settings = FitSettings(triangles=int(triangles), size=int(size), seed=int(seeds[0]), **settings)
        s = self.settings
        if s.strategy not in STRATEGIES:
            raise TrifitError(f"unknown strategy {s.strategy!r}; choose one of {', '.join(STRATEGIES)}")
        if s.placement not in PLACEMENTS:
            raise TrifitError(f"unknown placement {s.placement!r}; choose one of {', '.join(PLACEMENTS)}")
        if s.probes_overdue not in ("skip", "run"):
            raise TrifitError(f"unknown probes_overdue {s.probes_overdue!r}; choose skip or run")
        if isinstance(s.cull_tolerance, (int, float)) and not 0 < s.cull_tolerance < 1:  # (other types: below)
            raise TrifitError(f"cull_tolerance must be in (0, 1), got {s.cull_tolerance}")
        if isinstance(s.stop_transmittance, (int, float)) and not EXACT_STOP_TRANSMITTANCE <= s.stop_transmittance < 1:
            raise TrifitError(f"stop_transmittance must be in [{EXACT_STOP_TRANSMITTANCE:g}, 1), got {s.stop_transmittance}")
        check_settings(s.as_dict())  # (every other setting's type and range, as a replayed record's)
        self._initial_settings = s.as_dict()
        targets = [as_target(t, s.size) for t in images]
        if len({t.shape for t in targets}) != 1:
            raise TrifitError(f"a batched fit needs images of one working size, got {sorted({t.shape for t in targets})}")
        self.images = len(targets)
        self.changes: list[list] = []  # [iteration, kind, value]: plans and live changes, in order
        self.changes_made = 0  # changes recorded by this fitter (what forget_before drops counts too)
        self.wall_s = 0.0
        self.respawned = 0   # triangles re-placed by the respawn rule so far
        self.faults = 0      # NaN/inf losses survived (rolled back, learning rates halved)
        self.recoveries = 0  # lost GPU devices survived
        self._lr_scale, self._lr_fault = 1.0, 1.0
        self._host_snapshot: HostSnapshot | None = None  # what a lost device resumes from
        self._cached = None         # (loop, iteration, raw, m, v): the state as last read or set
        self._loops: dict = {}      # fit loops by (count, working size), least recently used first
        self._loop = None
        self._loop_rendered = False  # whether the current loop has run an iteration (its image is this fit's)
        self._device_placement = None  # placement's buffers on the device, made at its first event
        if resume is not None:
            self.settings = resume[1]  # as the fit had them: planned length, live changes
        slots = (targets, seeds, sources, weights, init_scene, strategy, s)
        self._slots(*slots, s.replicas or 1)  # (0: chosen below, once the first triangles are placed)
        if resume is not None:
            restore_checkpoint(self, resume[0])
            return
        raw = self._first_raw(init_scene)
        if s.timed_cycle_min == 0:  # (as the replicas below: the adapter's type decides, recorded as chosen)
            s.timed_cycle_min = self._initial_settings["timed_cycle_min"] = timed_cycle_min(s.prune_cycle_min,
                                                                                            self.engine.on_cpu)
        if s.replicas == 0:  # the adapter's type decides, so a deferred engine's backend is made
            # here, after the host's work above (render/replicas.py auto_replicas)
            R = auto_replicas(self.engine.adapter.get("type", ""), self.width, self.height, s.triangles, s.strategy)
            s.replicas = self._initial_settings["replicas"] = R  # (recorded as chosen: a replay runs as many)
            if R > 1:
                first = self.rngs  # (replica 0's streams go on from where its first triangles left them)
                self._slots(*slots, R, first)
                raw = self._first_raw(init_scene, placed=raw)
        self._set(raw, None, None, self.n_triangles, 0)
        if init_scene is not None and init_scene.locked:
            self._lock_scene(init_scene)
        self._next_event = self.strategy.next_event(0)

    def _slots(self, targets, seeds, sources, weights, init_scene, strategy, initial: FitSettings, R: int,
               first_rngs=None) -> None:
        """Each image as ``R`` slots of the batch, image-major (render/replicas.py), and what the
        fit keeps per slot; replica 0 draws from the image's seed (``first_rngs``: those streams, one an image,
        already drawn from), the others from (seed, r). Then the policy (:meth:`_policy`)."""
        self.replicas = R
        self.targets = np.repeat(np.stack(targets), R, axis=0)
        self.targets.flags.writeable = False  # (the fit's own, never changed in place: a GPU pass keeps its upload)
        self.batch, self.height, self.width = self.targets.shape[:3]
        self.seeds, self.sources = [int(v) for v in seeds for _ in range(R)], [v for v in sources for _ in range(R)]
        self.rngs = [first_rngs[i] if r == 0 and first_rngs is not None else
                     np.random.default_rng(int(v) if r == 0 else [int(v), r]) for i, v in enumerate(seeds) for r in range(R)]
        self.histories = [History() for _ in range(self.batch)]
        self._half = half_size(self.targets, initial) if init_scene is None else None
        self._use_focus(None if weights is None else [w for w in weights for _ in range(R)])
        self.lock([np.zeros(0, np.int64)] * self.batch, [np.zeros((0, 10))] * self.batch)
        self._locked_raw: list[np.ndarray] = []  # the locked triangles' raw parameters, per slot
        self._policy(init_scene, strategy)

    def _policy(self, init_scene, strategy) -> None:
        """The strategy (``strategy(fit)``, or the settings' by name) and what it decides at the start."""
        self.strategy = make_strategy(self.settings.strategy, self) if strategy is None else strategy(self)
        if not self.strategy.uses_coarse_stage:
            self._half = None
        self.coarse = self._half is not None  # the loop works at half size
        self.full_from = 0                    # the iteration the full-size stage began
        if init_scene is not None:
            if init_scene.n_triangles < 1:
                raise TrifitError("the scene to refine has no triangles")
            self.strategy.refine()
        self.schedule = self.strategy.schedule(0)

    def _first_raw(self, init_scene, placed: np.ndarray | None = None) -> np.ndarray:
        """(slots, params): the first triangles' raw parameters -- the scene refined, or placed
        in each slot's target with its stream (``placed``: replica 0's rows, one an image, placed
        before the number of replicas was chosen, kept) -- and their count into ``n_triangles``."""
        if init_scene is not None:
            self.n_triangles, first = init_scene.n_triangles, init_scene.copy()
            first.sigma = self.schedule.sigma_start
            return np.stack([raw_from_scene(first)] * self.batch)
        n = self.n_triangles = self.strategy.initial_count()
        R = self.replicas
        return np.stack([placed[b // R] if placed is not None and b % R == 0 else
                         initial_raw(t, n, rng, self.settings, self.schedule.sigma_start, w)
                         for b, (t, rng, w) in enumerate(zip(self.targets, self.rngs, self._focus_per_image()))])

    # ------------------------------------------------------------------ what the strategy reads
    @property
    def short_side(self) -> int:
        return min(self.width, self.height)

    @property
    def has_coarse_stage(self) -> bool:
        return self._half is not None

    @property
    def coarse_until(self) -> int:
        """Iteration at which the half-size stage ends (where it did, once it has: a time limit's
        later plans would put it elsewhere, even before the fit's start); 0 when there is none."""
        if self.has_coarse_stage and not self.coarse:
            return self.full_from
        return self.strategy.coarse_until()

    @property
    def iteration(self) -> int:
        return self._loop.iter

    @property
    def next_event(self) -> int:
        """The iteration at which the strategy's next event runs (a chunk ends there)."""
        return self._next_event

    @property
    def target(self) -> np.ndarray:
        return self.targets[0]

    @property
    def history(self) -> History:
        """The first image's loss history (its leading replica's: :meth:`leaders`)."""
        return self.histories[self.leaders()[0]]

    @property
    def source(self) -> str | None:
        return self.sources[0]

    @property
    def initial_settings(self) -> dict:
        """The settings the fit was made with (FitSettings' fields; the replicas as chosen), a copy:
        what makes another fit like it (a clip's new shot, render/videofit.py)."""
        return dict(self._initial_settings)

    @property
    def lr_scale(self) -> float:
        """The learning-rate scale set by :meth:`set_learning_rate` (1.0 unless set)."""
        return self._lr_scale

    def _record(self, kind: str, value) -> None:
        assert kind in CHANGE_KINDS, kind  # (a replay refuses a recorded kind that is not listed there)
        self.changes.append([self.iteration, kind, value])
        self.changes_made += 1

    def plan(self, total_iterations: int, *, time_budgeted: bool = False, guessed: bool = False) -> None:
        """Fit the schedules (sigma anneal, lr decay, coarse stage, growth, pruning) to this many
        iterations; ``time_budgeted``: the plan comes from a time limit (run.TimePlanner);
        ``guessed``: ... before the working size's speed was measured (a time limit's first guess,
        or its half-size stage's guess of the working size's cost), so the strategy starts nothing
        it cannot take back on it (pruning)."""
        total = max(1, _whole(total_iterations, "a plan's iterations"))  # (fewer than one: a plan of one)
        guessed = bool(guessed and time_budgeted)
        self._record("guessed_plan" if guessed else "time_plan" if time_budgeted else "plan", total)
        self.strategy.replan(total)  # (the schedules' progress goes on from where it is)
        self.strategy.time_budgeted = time_budgeted
        self.strategy.plan_guessed = guessed
        self.use_schedule(self.strategy.schedule(self.iteration))
        self._next_event = self.strategy.next_event(self.iteration)

    def use_strategy(self, strategy) -> None:
        """Go on under another policy: ``strategy``, a strategy object attached to this fitter
        (render/strategy.py's kind), decides from the next step on (a video's later frames are
        refined by a policy of their own after the first frame's full fit, render/videofit.py)."""
        self.strategy = strategy
        self.use_schedule(strategy.schedule(self.iteration))
        self._next_event = strategy.next_event(self.iteration)

    @_while_open
    def step(self, iterations: int = 100) -> StepStats:
        """Run ``iterations`` iterations, cut at the strategy's events (which run at theirs).

        A NaN/inf loss rolls back to the last good parameters and halves the learning rates (with
        a warning); a lost GPU device is recreated and the fit resumes from the last host snapshot."""
        n = _whole(iterations, "iterations")
        if n < 0:
            raise ValueError("iterations must be >= 0")
        t0 = time.perf_counter()
        goal, consecutive = self.iteration + n, 0
        while self.iteration < goal:
            start = self.iteration
            k = min(goal, self._next_event) - start
            event = start + k == self._next_event
            # (the event's state comes back with the chunk when the strategy will read it; else
            # only a due crash-recovery snapshot brings it, counted apart)
            for_event = event and self.strategy.needs_state(start + k)
            snapshot = self._snapshot_due(start + k)
            read_state = for_event or snapshot
            rule = self.strategy.respawn_rule(start + k) if event else None
            on_device = self.places_on_device
            self._cached = None
            try:
                losses = self._loop.run(k, read_state=read_state,
                                        read_image=event and not on_device and self.strategy.wants_image(start + k),
                                        state_kind="state" if for_event else "snapshot",
                                        flags=None if rule is None else (rule, self.width, self.height),
                                        # (the tiles' error sums placement starts from)
                                        sums=self.device_placement() if event and on_device
                                        and self.strategy.may_place(start + k) else None,
                                        # (what pruning ranks by: removal_costs)
                                        costs=(self.targets, self.focus) if event and on_device
                                        and self.strategy.prunes(start + k) else None,
                                        ahead=not event or self.strategy.keeps_loop(start + k),
                                        idle=self._encode_kept_ahead, prepare=self._make_next_loop,
                                        read_records=snapshot)
            except NumericalFault as fault:
                consecutive += 1
                self._on_numerical_fault(fault, consecutive)
                continue
            except Exception as exc:  # (a lost device can fail the chunk's own buffers first)
                self._recover_device(exc)
                continue
            consecutive = 0
            self._loop_rendered = True  # (until an event makes another loop current)
            losses = np.asarray(losses).reshape(k, self.batch)
            for b, h in enumerate(self.histories):
                h.add(start + 1, losses[:, b])
            if snapshot:  # (before the event: the state came with the chunk, while the event's changes
                # would cost a round trip of their own; a recovery runs the event again)
                self._snapshot_on_host(*self._state("snapshot"), self.coarse, event, self._loop.brought_records())
            if event:
                try:
                    self.strategy.on_event(self.iteration)
                except Exception as exc:  # a device lost in the event: resumed from the last snapshot, it runs again
                    self._recover_device(exc)
                    continue
                self._next_event = self.strategy.next_event(self.iteration)
        dt = time.perf_counter() - t0
        self.wall_s += dt
        loss = self.last_losses().mean()
        return StepStats(self.iteration, n, float(loss),
                         psnr_from_mse(loss) if self.settings.loss == "mse" else float("nan"),
                         dt, n / dt if dt > 0 else float("inf"), self.n_triangles,
                         float(self._loop.sigmas[0]) * self.short_side)

    def forget_before(self, iteration: int) -> None:
        """Drop the loss history and the recorded changes before ``iteration``: a fit that goes on
        for ever (a video's, frame after frame) keeps only its recent record, and its
        checkpoints and scenes stay small."""
        for h in self.histories:
            h.forget_before(iteration)
        self.changes = [c for c in self.changes if c[0] >= iteration]

    def slot_losses(self) -> np.ndarray:
        """Each slot's loss at the latest iteration (NaN before the first): every replica of
        every image (image-major, render/replicas.py)."""
        return np.array([h.losses[-1] if len(h) else float("nan") for h in self.histories])

    def leaders(self) -> list[int]:
        """Each image's slot whose replica has the lowest latest loss: the one its scene, loss
        history and triangles are reported from (replica 0 before the first iteration)."""
        return [int(b) for b in winners(self.slot_losses(), self.replicas)[:: self.replicas]]

    def last_losses(self) -> np.ndarray:
        """(images,) each image's loss at the latest iteration, its leading replica's (NaN before the first)."""
        return self.slot_losses()[self.leaders()]

    def losses_since(self, first: int) -> np.ndarray:
        """(iterations, images): each image's loss at every iteration from history index ``first``
        on, the lowest of its replicas' at each."""
        per_slot = np.stack([np.asarray(h.losses[first:]) for h in self.histories], axis=1)
        return per_slot.reshape(len(per_slot), self.images, self.replicas).min(axis=2)

    def finish(self) -> None:
        """The run ended: let the strategy settle (an over-grown fit prunes to its count)."""
        self.strategy.finish()

    def _on_numerical_fault(self, fault: NumericalFault, consecutive: int) -> None:
        self.faults += 1
        for h in self.histories:
            h.truncate(self.iteration)
        if consecutive > MAX_CONSECUTIVE_FAULTS:
            raise TrifitError(f"the fit keeps diverging ({fault}); giving up after {MAX_CONSECUTIVE_FAULTS} rollbacks")
        self._lr_fault *= 0.5
        self._loop.set_optim(self._optim())
        msg = f"{fault}; learning rates halved (lr_vertex now {self._optim().lr_vertex:.3g})"
        log.warning(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)

    def _snapshot_due(self, iteration: int) -> bool:
        every = self.settings.host_snapshot_every
        last = self._host_snapshot.iteration if self._host_snapshot else -every
        return every > 0 and iteration - last >= every

    def _recover_device(self, exc: Exception) -> None:
        """Where ``exc`` says the device is lost (Engine.device_lost): recreate the device and resume
        from the last host snapshot (at most host_snapshot_every back); else raise ``exc`` again.
        Where no live change came since the snapshot, the fit's host-side state goes back with
        the parameters (the schedule, the strategy's progress, the random streams), and from a
        periodic snapshot the device's own scene records too, so the fit goes on to the bit as if
        the device had never been lost (tests/test_faults.py); a change since keeps its effect."""
        lost = self.engine.device_lost(exc)
        if lost is None:
            raise exc
        self.recoveries += 1
        snap = self._host_snapshot
        if self.recoveries > 3 or snap is None:
            raise lost
        it = snap.iteration
        msg = f"{lost}; recreating the device and resuming from iteration {it}"
        log.warning(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)
        self.engine.reset_device()
        self._loops.clear()  # their buffers died with the old device
        self._device_placement = None
        if snap.host is not None and snap.changes == self.changes_made:
            self.restore_host_state(snap.host)  # (before the loop is made: it takes the schedule)
        self.coarse = snap.coarse
        self._relocate_locks(snap.raw, snap.count)
        self._set(snap.raw, snap.m, snap.v, snap.count, it)
        if snap.records is not None:  # (a GPU loop's snapshot)
            self._loop.put_records(snap.records)  # (the device's own, not the host's rounding: an ulp apart)
        # (the counter does not go back: an id given since the snapshot is never given again)
        self.set_ids_state(snap.ids[0], max(snap.ids[1], self._next_id))
        for h in self.histories:
            h.truncate(it)
        self._next_event = self.strategy.next_event(it - 1 if snap.event_pending else it)

    def inject_fault(self, kind: str = "nan") -> None:
        """Testing aid: ``"nan"`` corrupts a parameter on the device; ``"device-lost"`` destroys the device."""
        if kind == "nan":
            self._loop.inject_fault()
        elif kind == "device-lost":
            self.engine.lose_device()
        else:
            raise ValueError(kind)

    # ------------------------------------------------------------------ live changes
    @_while_open
    def set_triangles(self, n: int) -> None:
        """Grow (new triangles where the error is largest) or shrink (keep those whose removal
        would cost most); a count set by hand ends over-growth."""
        n = _whole(n, "the triangle count")
        if not 1 <= n <= MAX_TRIANGLES_FIT:
            raise ValueError(f"triangle count must be between 1 and {MAX_TRIANGLES_FIT}, got {n}")
        if n < max(len(i) for i in self.locks):
            raise ValueError(f"{max(len(i) for i in self.locks)} triangles are locked: unlock some before asking for {n}")
        self._record("triangles", n)
        self.strategy.set_count(n)
        for key, loop in list(self._loops.items()):  # arbitrary counts: keep no loop for them
            if loop is not self._loop:
                release_loop(self._loops.pop(key))
        self._next_event = self.strategy.next_event(self.iteration)

    @_while_open
    def set_sigma(self, sigma_px: float | None) -> None:
        """Fix the edge softness at ``sigma_px`` pixels from the next step (None: back to the anneal)."""
        if sigma_px is not None and not (0 < float(sigma_px) <= 1000):
            raise ValueError(f"sigma must be in (0, 1000] px, got {sigma_px}")
        self._record("sigma", None if sigma_px is None else float(sigma_px))
        self.strategy.set_sigma(None if sigma_px is None else float(sigma_px) / self.short_side)
        self._next_event = self.strategy.next_event(self.iteration)

    @_while_open
    def set_learning_rate(self, scale: float) -> None:
        """Scale every learning-rate group by ``scale`` from the next step, on top of any halving
        after a numerical fault (1.0: the rates as set, halvings kept)."""
        if not (0 < float(scale) <= 100):
            raise ValueError(f"learning-rate scale must be in (0, 100], got {scale}")
        self._record("lr", float(scale))
        self._lr_scale = float(scale)
        self._loop.set_optim(self._optim())

    def apply(self, kind: str, value) -> None:
        """A change by name: a recorded one (what a replay of a scene's ``changes`` calls), or a
        focus map ("weights": :meth:`set_weights`, which is not recorded)."""
        if kind in ("plan", "time_plan", "guessed_plan"):
            self.plan(value, time_budgeted=kind != "plan", guessed=kind == "guessed_plan")
        else:
            {"triangles": self.set_triangles, "sigma": self.set_sigma, "lr": self.set_learning_rate,
             "locked": self.set_locked, "edit": self.edit, "weights": self.set_weights}[kind](value)

    def run(self, stop, callback=None, chunk: int | None = None) -> StepStats:
        """Step until a stop condition holds (render/run.py's FitRun); ``callback(stats)`` after
        each chunk, the last included, may return False to stop."""
        from .run import FitRun

        if not stop.any():
            raise ValueError("give at least one stop condition")
        return FitRun(self, stop, chunk=chunk).run(callback)

    # ------------------------------------------------------------------ edits by hand (issue 20)
    @_while_open
    def edit(self, request: dict) -> None:
        """Delete triangles, set one's numbers or put triangles back, from the next step on
        (render/edits.py: the payloads, by index or by id). Parameters and Adam moments stay
        consistent (an edited triangle's moments start again from zero) and so do the locks;
        recorded as a live change ``"edit"`` in its index form, so a replay does the same. An
        id-form ``lock`` is a :meth:`set_locked`. A request whose triangles are all gone does nothing.
        Replicas first all take their best's state: an edit names the triangles the user sees."""
        self.select_replicas()
        change = edits.resolve(self, request)
        if change is None:
            return
        if change[0] == "locked":
            self.set_locked(change[1])
            return
        done = edits.apply(self, change[1])
        self._record("edit", done)
        self._next_event = self.strategy.next_event(self.iteration)  # a count the plan wants may be short now
        self._remember_locked_raw()  # (and a host snapshot: a lost device resumes after the edit)

    def delete_triangles(self, indices) -> None:
        self.edit({"op": "delete", "indices": [_whole(i, "an index") for i in indices]})

    def set_triangle(self, index: int, values) -> None:
        """Triangle ``index`` gets these 10 numbers (moved, a vertex moved, recoloured)."""
        self.edit({"op": "set", "index": _whole(index, "the index"), "values": _rows(values, 1)[0]})

    def insert_triangles(self, indices, values, locked=()) -> None:
        """Put triangles at ``indices`` (ascending, in the order after the insert), ``locked``:
        those of them to lock at their values."""
        indices = [_whole(i, "an index") for i in indices]
        self.edit({"op": "insert", "indices": indices, "values": _rows(values, len(indices)),
                   "locked": [_whole(i, "a locked index") for i in locked]})

    @_while_open
    def triangles_now(self) -> tuple[np.ndarray, float, list[int]]:
        """The first image's triangles as the fit holds them now -- (T, 10) values in painting
        order (over-grown: all of them), locked ones at their values --, the sigma in force
        (frame units) and their ids (edits by id, render/edits.py)."""
        tris, _, sigmas = self.values()
        b = self.leaders()[0]
        return tris[b], float(sigmas[b]), [int(i) for i in self.triangle_ids_all()[b]]

    # ------------------------------------------------------------------ locks and focus (issue 20)
    @property
    def locked(self) -> list[int]:
        """The locked triangles (of the first image): their indices in the current painting
        order, which growth, respawn and pruning renumber as they go."""
        return [int(i) for i in self.locks[self.leaders()[0]]]

    @_while_open
    def set_locked(self, indices) -> None:
        """Lock these triangles (indices in the current painting order; every other one is
        unlocked), from the next step: their numbers stay to the bit -- the optimiser skips them
        on the device, respawn and pruning never pick them, and no operation moves them relative
        to each other (growth adds on top). At most the count asked for. Recorded as a live
        change, so a replay locks the same triangles at the same iteration."""
        given = [i.item() if isinstance(i, np.integer) else i for i in indices]  # (numpy's whole numbers too)
        idx = np.asarray(locked_indices(given, self.n_triangles), dtype=np.int64)
        if len(idx) > self.settings.triangles:
            raise ValueError(f"{len(idx)} triangles to lock, more than the {self.settings.triangles} the fit keeps")
        self._record("locked", [int(i) for i in idx])
        self.select_replicas()  # (the indices are the leading replica's: every replica takes its state)
        tris = self.with_locked_values(self._loop_values()[0])  # what the device renders; locked ones as given
        self.lock([idx] * self.batch, [t[idx] for t in tris])
        self._remember_locked_raw()

    @_while_open
    def set_weights(self, weights) -> None:
        """Weigh the loss by a new focus map from the next step on (None: every pixel alike), as
        ``Fitter(weights=)``; the fit loops hold their weights, so they are rebuilt for the
        current state. The map is not recorded as a change: a scene's meta names the map in force
        (``weights``: its source and digest), and a replay needs that map given again."""
        raw, m, v = self._state()
        self._use_focus(None if weights is None else [weights] * self.batch)
        self.drop_device_placement()
        for loop in self._loops.values():
            release_loop(loop)
        self._loops.clear()
        self._set(raw, m, v, self.n_triangles, self.iteration)

    def _use_focus(self, weights) -> None:
        """The focus maps: ``weights`` one per image (None: none), at the working size and half."""
        if weights is None:
            self.focus = self._focus_half = self.focus_sources = None
            return
        shape = self.targets.shape[1:3]
        self.focus = np.stack([focus.focus_map(w, shape) for w in weights])
        self._focus_half = None if self._half is None else focus.half_size(self.focus, self._half.shape[1:3])
        self.focus_sources = [str(w) if isinstance(w, (str, os.PathLike)) else None for w in weights]

    def _focus_per_image(self) -> list:
        return [None] * self.batch if self.focus is None else list(self.focus)

    def _lock_scene(self, scene: Scene) -> None:
        """Lock what ``scene`` (the scene a fit starts from) locks, at its exact values."""
        idx = np.asarray(locked_indices(scene.extra.get("locked", []), scene.n_triangles), dtype=np.int64)
        if len(idx) > self.settings.triangles:
            raise TrifitError(f"the scene locks {len(idx)} triangles; fit at least that many (asked for "
                              f"{self.settings.triangles})")
        self.lock([idx] * self.batch, [scene.triangles[idx]] * self.batch)
        self._remember_locked_raw()

    def _remember_locked_raw(self) -> None:
        """Keep the locked triangles' raw parameters (which no longer change) and take a host
        snapshot now: a lost device resumes from a snapshot, and finds them there by these."""
        raw, m, v = self._state()
        self._locked_raw = [raw[b, : self.n_triangles * 10].reshape(-1, 10)[idx] for b, idx in enumerate(self.locks)]
        self._snapshot_on_host(raw, m, v, self.coarse)

    def _relocate_locks(self, raw: np.ndarray, n: int) -> None:
        """The locked triangles' indices in a host snapshot's state ``raw`` of ``n`` triangles,
        found by their raw parameters (every operation since may have renumbered them)."""
        for b, rows in enumerate(self._locked_raw):
            tris = np.asarray(raw[b, : n * 10], dtype=np.float64).reshape(n, 10)
            found = [int(np.flatnonzero(np.all(tris == row, axis=1))[0]) for row in rows]
            self.locks[b] = np.asarray(found, dtype=np.int64)

    def _scene_extra(self, b: int, kept, meta: dict) -> dict:
        """Image b's scene keys beyond the model: ``locked`` (indices among the triangles written,
        ``kept`` (B, n) of them when over-grown) and, with a focus map, ``meta.weights``."""
        if self.focus is not None:
            meta["weights"] = {"source": self.focus_sources[b], "sha256": focus.digest(self.focus[b])}
        idx = self.locks[b]
        if not len(idx):
            return {}
        return {"locked": [int(i) for i in (idx if kept is None else np.searchsorted(kept[b], idx))]}

    # ------------------------------------------------------------------ results
    @_while_open
    def scenes_now(self) -> list[Scene]:
        """Each image's scene at the working size, with ``meta``: the count asked for -- while
        over-grown, what stopping now gives (:meth:`finish`: the triangles that would cost most to
        remove, kept by the strategy -- gathered on the device, or their state set afresh on the
        host), to the bit: a fit paused over-grown (the GUI's) and its replay, which ends with
        finish(), write the same bytes."""
        tris, bg, sigmas = self._loop_values()
        kept = None
        if self.n_triangles > self.settings.triangles:
            kept = self.most_costly(self.settings.triangles)  # as the strategy's finish() ranks them
            if not self.places_on_device:  # (a set state's records are an ulp from the device's own)
                tris, bg = self._values_as_set()
        tris = self.with_locked_values(tris)
        if kept is not None:
            tris = np.take_along_axis(tris, kept[:, :, None], axis=1)
        out = []
        for b in self.leaders():
            meta = {
                "software": f"trifit {__version__}", "seed": self.seeds[b], "source": self.sources[b],
                "iterations": self.iteration, "backend": self.engine.backend,
                "adapter": self.engine.adapter.get("name"),
                "settings": {**self._initial_settings, "seed": self.seeds[b]},
                "changes": [list(c) for c in self.changes],
            }
            if isinstance(self, BatchFitter):
                meta["batched"] = self.images
            out.append(Scene(self.width, self.height, float(sigmas[b]), np.clip(bg[b], 0, 1), tris[b].copy(),
                             {"meta": meta, **self._scene_extra(b, kept, meta)}))
        return out

    @property
    def scene(self) -> Scene:
        return self.scenes_now()[0]

    @_while_open
    def gpu_image(self):
        """(wgpu buffer, width, height, first) of the last forward's image for the GPU backend, else
        None: float32 rgb, row-major, the first image's leading replica's (render/replicas.py) from
        float ``first`` on. During the coarse stage it is the half-size image.
        Written by the fitting thread's submissions: draw it on the same device, never map it.
        None too where the loop made current by the last event (a count change, the half-size
        stage's end, a device's recovery) has run no iteration yet: its image buffer holds no
        render of this fit (a new one's is zeros, a kept one's an older count's), so a preview
        keeps its last frame until the next chunk."""
        got = self._loop.gpu_image() if self._loop_rendered else None
        if got is None:
            return None
        buffer, width, height = got
        return buffer, width, height, self.leaders()[0] * width * height * 3

    def timings(self, recent: int | None = None) -> dict:
        """Median per-pass GPU ms (sampled iterations), host phases, counters and pool use;
        ``recent=N`` takes the medians over the last N samples only (for live plots)."""
        return loop_timings(self._loop, self.engine, recent)

    def close(self) -> None:
        """Give the fit's GPU buffers back to the engine's pool; the fitter takes no more calls
        (a TrifitError says so: its buffers may be another fit's by then). Closing twice is fine."""
        for loop in self._loops.values():
            release_loop(loop)
        self._loops.clear()
        self.drop_device_placement()
        self.closed = True  # (what it ran stays readable: iteration, history, timings)


class BatchFitter(Fitter):
    """Equal-size images fitted in lockstep through one batched fit loop (one set of dispatches
    per iteration for all), by the same strategy as :class:`Fitter`: events at the same
    iterations for every image, what they do decided per image. Image b's scene is what
    ``Fitter(targets[b], seed=seeds[b])`` gives for the same iterations (float tolerance)."""

    def __init__(self, targets, triangles: int = 150, size: int = 176, seeds=0,
                 engine: Engine | None = None, *, sources=None, **settings):
        if isinstance(targets, (str, os.PathLike)) or (isinstance(targets, np.ndarray) and targets.ndim != 4) \
                or hasattr(targets, "getpixel"):  # (one image's path, array or PIL image: its rows are no batch)
            raise BatchError("BatchFitter takes a list of images (or a (B, H, W, 3) array); for one image use Fitter")
        targets = list(targets)
        if not targets:
            raise TrifitError("a batched fit needs at least one image")
        seeds = [seeds] * len(targets) if np.isscalar(seeds) else list(seeds)  # (each checked in _setup)
        if isinstance(sources, (str, os.PathLike)):
            raise BatchError("sources names each image's source: a list, one an image")
        sources = list(sources) if sources is not None else [None] * len(targets)
        if len(seeds) != len(targets) or len(sources) != len(targets):
            raise TrifitError(f"{len(seeds)} seeds and {len(sources)} sources for {len(targets)} images")
        self._setup(targets, seeds, sources, None, triangles, size, engine, settings)

    def __len__(self) -> int:
        return self.images

    @property
    def scenes(self) -> list[Scene]:
        return self.scenes_now()

    def member(self, b: int, scene: Scene | None = None) -> BatchMember:
        """A Fitter-like view of image ``b`` (for trifit.report.build_report)."""
        if not is_whole(b) or not 0 <= b < self.images:
            raise IndexError(f"image {b!r:.20} of a batch of {self.images}")
        return BatchMember(self, b, scene)


class BatchMember:
    """One image of a :class:`BatchFitter`, with the attributes a report reads off a Fitter."""

    def __init__(self, batch: BatchFitter, b: int, scene: Scene | None = None):
        self.batch, self.b = batch, b
        slot = batch.leaders()[b]
        self.engine, self.target = batch.engine, batch.targets[slot]
        self.width, self.height = batch.width, batch.height
        self.settings = dc_replace(batch.settings, seed=batch.seeds[slot])
        self.source, self.history = batch.sources[slot], batch.histories[slot]
        self.n_triangles, self.iteration = batch.n_triangles, batch.iteration
        self.wall_s = batch.wall_s  # the batch's time: the images ran together
        self.coarse_until, self.respawned = batch.coarse_until, batch.respawned
        self._scene = scene

    @property
    def scene(self) -> Scene:
        return self._scene if self._scene is not None else self.batch.scenes[self.b]

    def timings(self, recent: int | None = None) -> dict:
        return self.batch.timings(recent)
