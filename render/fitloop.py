"""The optimisation loop's pieces shared by both backends: the raw parameter layout, the sigma
and learning-rate schedules, and the settings. The GPU loop (render/gpu/fitloop.py) evaluates the
same formulas in WGSL (shaders/schedule.wgsl, shaders/adam.wgsl); the reference loop below runs them
in float64 numpy and is what the GPU loop is compared against.

Raw parameters, per image: ``T * 10 + 3`` floats -- for each triangle its six vertex coordinates
as they are, then the logits of r, g, b and a; then the background's three logits. Values are
``sigmoid(logit)``, so every colour and opacity stays inside (0, 1) by construction.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from . import reference
from .errors import NumericalFault, SettingsError
from .limits import MAX_REPLICAS, MAX_TRIANGLES_FIT, MAX_WORKING_SIZE
from .scene import Scene

#: logits are clamped here when made from values, so 0 and 1 map to finite parameters (events.wgsl
#: gets it from render/gpu/shaders.py)
LOGIT_EPS = 1e-4
#: floats in a new triangle's row for a gather on the device: its 10 raw parameters, then the 10 record
#: values they materialise to (render/fitstate.py fresh_rows; render/gpu/fitloop.py permute / take and
#: render/gpu/events.py place_rows fill them, shaders/permute.wgsl reads them)
FRESH_ROW = 20


#: the working size (longer side, px) at which ``FitSettings.lr_vertex`` is in force as set; at
#: another size the fit scales it by LR_VERTEX_SIZE / size, so vertices move as many pixels a step
LR_VERTEX_SIZE = 176


#: how deep a walk with a loss goes: the engine's loss and gradient, and a fit's iterations by default
#: (exact gradients for hidden triangles), and the least a fit may ask for (below it the backward's
#: division could overflow)
EXACT_STOP_TRANSMITTANCE = 1e-30


@dataclass
class FitSettings:
    """Everything a fit is built from (recorded in each scene's meta). The measurements behind
    the defaults are in docs/QUALITY.md ("What the method is")."""

    triangles: int = 150
    size: int = 176
    seed: int = 0
    loss: str = "mse"
    strategy: str = "default"     # the fit policy (render/strategy.py): "default" or "fixed"
    sigma_start_px: float = 2.5   # edge softness at the start, in pixels of the working size
    sigma_end_px: float = 0.25    # ... annealed geometrically to this (the probes then move each image's from there)
    lr_vertex: float = 0.006      # per-group Adam learning rates (vertices in frame units at a working size of
                                  # LR_VERTEX_SIZE px; the fit scales it to the working size, render/fitstate.py)
    small_triangle_px: float = 6.0  # a triangle smaller than this (the square root of its area, in px of the working
                                  # size, as lr_vertex is) moves its vertices at lr_vertex x its size / this, down to a
                                  # quarter: a step is then a like share of each triangle's size, where one rate
                                  # for all made small triangles' steps large against them (0: every triangle at
                                  # lr_vertex, as records from before this setting ran)
    lr_colour: float = 0.05
    lr_alpha: float = 0.05
    lr_background: float = 0.05
    lr_final: float = 0.1         # cosine decay of every learning rate over the plan, to this fraction
    beta1: float = 0.9
    beta2: float = 0.99           # short memory: a fit changes its scene (growth, pruning) many times
    adam_eps: float = 1e-8
    chunk: int = 256              # iterations per GPU readback, at most (each readback is a turn the GPU idles;
                                  # the loss ring holds 256)
    first_submission: int = 8     # a longer chunk is submitted in parts, this many iterations first, then twice
                                  # as many each time or more (as the GPU's time for an iteration exceeds the
                                  # host's), so the GPU runs each part while the next is encoded
                                  # (0: one submission a chunk; render/gpu/encode.py submission_sizes)
    planned_iterations: int = 600 # the schedules below are fractions of this plan (the run loop plans it
                                  # from --iters, or from the measured speed and --time-limit)
    sigma_fraction: float = 0.6   # sigma anneals over this fraction of the plan,
    sigma_probes: int = 6         # then each image's final sigma is tuned by this many probes (Newton steps on
                                  # log sigma): photographs differ in the edge softness that suits them
    sigma_probe_eps: float = 0.15 # ... each rendering at sigma x e^(+-eps)
    sigma_probe_gain: float = 1.0 # ... and moving this many times the Newton step
    sigma_ceiling_px: float = 0.5 # where the first probe wants softer edges than the anneal's end, the image goes on
                                  # to this sigma at once, and its later probes move it from there (a scene adapts
                                  # its edges to its sigma, so one capped step at a time stops short; 0: off) ...
    sigma_floor_px: float = 0.25  # ... and where it wants sharper edges, on to this (inert with the anneal ending
                                  # there; 0: off)
    probes_overdue: str = "skip"  # probes a shorter plan left behind: "skip" them and run the latest, or "run"
                                  # them back to back (records from before this setting did; with no
                                  # iterations between them each measures the same scene, and their steps compound)
    coarse_fraction: float = 0.3  # the first fraction of the plan runs at half the working size;
    coarse_max_fraction: float = 0.7  # time-limited fits whose plan is short (a slow adapter) spend
                                      # up to this much there: 4x cheaper iterations buy more of them
                                      # (0.85 while such a plan's pruning waited for the stage's end:
                                      # prune_in_coarse; now more of its cycles run at the working size)
    coarse_min_size: int = 64     # ... when the half size is at least this
    respawn_every: int = 50       # every this many iterations, triangles that stopped contributing
    respawn_alpha: float = 0.02   # (opacity below this, or under 1 px^2 on the frame) are re-placed
    respawn_checks: int = 150     # ... and at most this many checks over the plan: a longer plan checks less
                                  # often, as its other events scale with it (each check ends a chunk; 0: no cap)
    respawn_until: float = 0.8    # ... until this fraction of the plan (over-grown fits: until pruning begins,
                                  # which removes what stopped contributing anyway)
    growth_stages: int = 3        # >1: start with 1/stages of the triangles and add as many again,
    growth_until: float = 0.5     # where the error is largest, in equal steps until this fraction of the plan
    init_alpha: float = 0.6       # opacity of the first triangles
    insert_alpha: float = 0.15    # triangles added later (growth, respawn, a larger count) start faint
    insert_radius: float = 0.6    # ... and small (x the first triangles' size), so adding one never
                                  # throws away what the fit has
    insert_shape: str = "residual"  # new triangles shaped to the residual around them (render/placement.py); "random"
    placement: str = "device"     # where growth and respawn find the error, shape new triangles and reorder the
                                  # state: "device" keeps the render and the state there (render/gpu/events.py;
                                  # the GPU backend), "host" reads them back (numpy; the reference backend's way)
    overgrow: float = 1.75        # grow to this many times the triangles, then prune back to them by exact
                                  # removal cost (render/placement.py): a greedy start, revised; 1 = off
    prune_until: float = 0.9      # ... in prune_stages equal steps between growth_until and this fraction of the plan
    prune_stages: int = 2         # (until 0.9, not 0.85: more cycles and a shorter polish after the last gained on
                                  # photographs not tuned on as on the samples, docs/QUALITY.md)
    prune_in_coarse: bool = True  # ... and on a CPU adapter pruning may begin on a plan made during the half-size
                                  # stage (the working size's cost then a guess, a good one there) where that
                                  # stage lasts past the pruning's start: a short time-limited plan spends up to
                                  # coarse_max_fraction at half size, and waiting for the working size's speed
                                  # left its cycles to the plan's last part, where a budgeted plan of its length
                                  # prunes from growth_until (False: records from before this setting waited)
    overgrow_cycles: int = 150    # ... in cycles (each after the first grows back, then prunes): as many as fit,
                                  # so a longer plan revises its scene more often, up to this many (0: no cap);
                                  # past it, revising more often is worth less than training each cycle longer
    prune_last_steps: int = 4     # ... and the last cycle, whose pruning leaves the scene the fit ends with, drops
                                  # in this many steps where the others drop in one, the removal costs ranked again
                                  # after each (1: as the others; docs/QUALITY.md, "The last cycle's pruning in steps")
    prune_hold: float = 0.0       # ... each cycle holding its peak for this fraction of it before the pruning steps,
    prune_cycle_min: int = 50     # ... each at least this many iterations long
    timed_cycle_min: int = 0      # ... and in a time-limited plan at least this many (0: the adapter's type decides,
                                  # recorded as chosen: render/strategy.py timed_cycle_min; a GPU's events cost
                                  # the clock iterations, a CPU adapter's hardly any)
    prune_cycles_floor: int = 10  # ... but a plan with room for fewer than this many has as many as fit at half
                                  # that length, up to this many: a short plan's few cycles gain from more,
                                  # a long plan's many hardly (0: no floor, as records from before it ran)
    prune_newcomers: float = 2.0  # ... and in each cycle after the first, the triangles it grew back (which had part
                                  # of a cycle to find their place, starting faint and small) rank by this many
                                  # times their removal cost (a negative one: divided by it): 1 = as the rest
    cycle_lr: float = 2.0         # >0: each pruning cycle after the first restarts the learning-rate scale at (at
                                  # least) this, cosine down to lr_final at the plan's end, so the whole scene
                                  # moves again around the triangles the cycle grew back
    overgrow_max: int = 1000      # ... for counts up to this (larger counts are not over-grown: not measured)
    growth_waits: bool = True     # ... and where a time limit's longer plan moves the growth's steps later, the
                                  # count waits for them (False: pruned at once to the count asked for, which
                                  # ended the growth -- records from before this setting did)
    continuous_plans: bool = True  # a plan changed mid-fit keeps each schedule's progress and changes its rate from
                                   # there (False: every schedule re-stretched from iteration 0 -- records from
                                   # before this setting did; a later plan could re-open what the fit had done)
    host_snapshot_every: int = 200  # parameters copied to the host this often (GPU; 0: never): what a lost device resumes from
    cull_tolerance: float = 1e-3  # the fit's iterations on the GPU skip coverage that could change a pixel by at most
                                  # this in all (below half an 8-bit level); renders, exports, scores and the
                                  # engine's passes keep render/gpu/workspace.py CULL_TOLERANCE (docs/PERFORMANCE.md)
    stop_transmittance: float = EXACT_STOP_TRANSMITTANCE  # ... and stop a pixel's walk once its transmittance is
                                       # below this; 1e-6, where renders stop, is measured in docs/QUALITY.md ("not mattering")
    recompute_below: float = 1.0 / 1024  # ... and in the backward, beneath a triangle whose 1 - alpha at a pixel is at
                                  # least this, recover the canvas by dividing by it (an error of a few float32
                                  # ulps times 1 / (1 - alpha): ~1e-4 of a colour at most, under cull_tolerance),
                                  # else re-composite it from the background; the engine's passes keep render/gpu/workspace.py
                                  # RECOMPUTE_BELOW (1/16: docs/PERFORMANCE.md, "The fit's division budget")
    replicas: int = 0             # each image fitted as this many replicas side by side, each growing with its own
                                  # random stream; at each later pruning cycle's start every replica takes the
                                  # state of the one with the lowest loss, and the scene is the lowest's at the end
                                  # (render/fitstate.py select_replicas). 0: chosen at the fit's start from the
                                  # adapter's type and the working size (render/replicas.py); a scene records
                                  # the number chosen

    def as_dict(self) -> dict:
        return asdict(self)


#: what a fit recorded before ``cull_tolerance`` existed culled its iterations at (the renders' budget)
LEGACY_CULL_TOLERANCE = 1e-5
#: ... and before ``recompute_below``, where its backward re-composited (the engine's passes' 1/16)
LEGACY_RECOMPUTE_BELOW = 1.0 / 16


def recorded_settings(d: dict) -> dict:
    """Settings as a scene's meta or a checkpoint recorded them, as this version reads them: a
    record from before ``placement`` existed was placed on the host, and one from before
    ``cull_tolerance`` culled its iterations as renders do, and so on for each setting below that
    a record may lack; each replays or resumes as it ran."""
    legacy = {"placement": "host", "cull_tolerance": LEGACY_CULL_TOLERANCE, "respawn_checks": 0, "probes_overdue": "run",
              "growth_waits": False, "continuous_plans": False, "prune_until": 0.85, "prune_newcomers": 1.0,
              "replicas": 1, "prune_in_coarse": False, "small_triangle_px": 0.0,
              "recompute_below": LEGACY_RECOMPUTE_BELOW, "sigma_floor_px": 0.0,
              "sigma_ceiling_px": 0.0, "prune_last_steps": 1, "prune_cycle_min": 100, "prune_cycles_floor": 0}
    out = {**{k: v for k, v in legacy.items() if k not in d}, **d}
    if "timed_cycle_min" not in out:  # (before it, a time-limited plan's cycles were prune_cycle_min's)
        out["timed_cycle_min"] = out["prune_cycle_min"]
    return out


#: the changes a scene's meta records, each [iteration, kind, value], which a replay applies
CHANGE_KINDS = ("plan", "time_plan", "guessed_plan", "triangles", "sigma", "lr", "locked", "edit")
#: the values a text setting can take
SETTING_CHOICES = {"loss": ("mse", "l1"), "strategy": ("default", "fixed"), "probes_overdue": ("skip", "run"),
                   "insert_shape": ("residual", "random"), "placement": ("device", "host")}
#: numeric settings' ranges, [lo, hi] (None: open): those not named take any number >= 0
_SETTING_RANGES = {"triangles": (1, MAX_TRIANGLES_FIT), "size": (1, MAX_WORKING_SIZE), "chunk": (1, None),
                   "planned_iterations": (1, None),
                   "sigma_start_px": (1e-6, None), "sigma_end_px": (1e-6, None), "adam_eps": (1e-30, None),
                   "beta1": (0.0, 0.999999), "beta2": (0.0, 0.999999), "overgrow": (1.0, None),
                   "cull_tolerance": (1e-30, 1.0), "stop_transmittance": (1e-38, 1.0), "insert_radius": (1e-6, None),
                   "recompute_below": (1e-6, 1.0),
                   "prune_cycle_min": (1, None), "timed_cycle_min": (0, None), "prune_stages": (1, None),
                   "prune_last_steps": (1, None),
                   "prune_newcomers": (1e-6, 1e6),
                   "replicas": (0, MAX_REPLICAS),
                   **{k: (0.0, 1.0) for k in ("lr_final", "sigma_fraction", "coarse_fraction", "coarse_max_fraction",
                                               "respawn_alpha", "respawn_until", "growth_until", "init_alpha",
                                               "insert_alpha", "prune_until", "prune_hold")}}


def check_settings(d: dict) -> None:
    """Raise SettingsError (a ValueError), one line, for a setting this version cannot run: of
    another type than FitSettings' (a whole number for an int, a number for a float, true or false
    for a flag), out of its range, or a text that is not one of its choices (a hand-edited scene's
    meta, or a Fitter's keyword arguments)."""
    defaults = FitSettings().as_dict()
    for key, value in d.items():
        if key not in defaults:
            raise SettingsError(f"unknown setting {key!r}")
        kind = type(defaults[key])
        if kind is bool:
            ok = isinstance(value, bool)
        elif kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        else:
            ok = isinstance(value, str) and value in SETTING_CHOICES.get(key, (value,))
        if not ok:
            want = {bool: "true or false", int: "a whole number", float: "a finite number"}.get(
                kind, f"one of {', '.join(SETTING_CHOICES.get(key, ()))}")
            raise SettingsError(f"setting {key!r} is {value!r:.40}, not {want}")
        if kind in (int, float):
            lo, hi = _SETTING_RANGES.get(key, (0, None))
            if value < lo or (hi is not None and value > hi):
                raise SettingsError(f"setting {key!r} is {value!r}, outside [{lo}, {hi if hi is not None else 'inf'}]")


@dataclass
class Schedule:
    """What schedule.wgsl evaluates each iteration (sigma as a fraction of the shorter side)."""

    sigma_start: float
    sigma_end: float
    sigma_iters: float
    lr_decay_iters: float
    lr_final: float
    iter_offset: float = 0.0  # the sigma anneal starts here
    lr_offset: float = 0.0    # the learning-rate cosine starts here, at lr_start
    lr_start: float = 1.0
    # each image's own final sigma (a batch anneals every image from sigma_start to its own end);
    # None: sigma_end for every image
    sigma_ends: tuple[float, ...] | None = None

    def _anneal(self, it: int) -> float:
        u = max(it - self.iter_offset, 0.0)
        return min(max(u / max(self.sigma_iters, 1.0), 0.0), 1.0)

    def at(self, it: int) -> tuple[float, float]:
        """(sigma towards sigma_end, learning-rate scale) at iteration ``it``."""
        sigma = self.sigma_start * (self.sigma_end / self.sigma_start) ** self._anneal(it)
        fl = min(max((it - self.lr_offset) / max(self.lr_decay_iters, 1.0), 0.0), 1.0)
        lr = self.lr_final + (self.lr_start - self.lr_final) * 0.5 * (1.0 + math.cos(math.pi * fl))
        return sigma, lr

    def ends(self, batch: int) -> np.ndarray:
        """(batch,) final sigmas: ``sigma_ends`` or ``sigma_end`` for every image."""
        if self.sigma_ends is None:
            return np.full(batch, self.sigma_end)
        if len(self.sigma_ends) != batch:
            raise ValueError(f"{len(self.sigma_ends)} final sigmas for {batch} images")
        return np.asarray(self.sigma_ends, dtype=np.float64)

    def sigmas(self, it: int, batch: int) -> np.ndarray:
        """(batch,) sigma of each image at iteration ``it`` (schedule.wgsl's schedule_sigma)."""
        return self.sigma_start * (self.ends(batch) / self.sigma_start) ** self._anneal(it)

    def current_sigmas(self, it: int, batch: int) -> np.ndarray:
        """(batch,) sigma of each image for a loop standing at iteration ``it``: the last iteration
        run's, or the first's before any has run -- what a scene taken there renders at. Every
        loop's reset, schedule change and scene read uses this one rule."""
        return self.sigmas(max(it, 1), batch)

    def pack(self) -> dict[str, float]:
        """The device's Schedule uniform by field name (the GPU fit loop lays it out and packs it:
        render/gpu/layouts.py SCHEDULE, whose fields are these); the per-image ends go separately."""
        return {k: float(v) for k, v in asdict(self).items() if k != "sigma_ends"}


def logit(v: np.ndarray) -> np.ndarray:
    v = np.clip(v, LOGIT_EPS, 1 - LOGIT_EPS)
    return np.log(v / (1 - v))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def raw_triangles(values) -> np.ndarray:
    """Triangles' raw parameters (..., 10) from their values: vertices as they are, colours and
    opacity as logits."""
    t = np.array(values, dtype=np.float64)
    t[..., 6:10] = logit(t[..., 6:10])
    return t


def raw_from_scene(scene: Scene) -> np.ndarray:
    return np.concatenate([raw_triangles(scene.triangles).ravel(), logit(scene.background)])


def values_from_raw(raw: np.ndarray, n_tris: int) -> tuple[np.ndarray, np.ndarray]:
    t = raw[: n_tris * 10].reshape(n_tris, 10).astype(np.float64).copy()
    t[:, 6:10] = sigmoid(t[:, 6:10])
    return t, sigmoid(raw[n_tris * 10 : n_tris * 10 + 3].astype(np.float64))


def lr_vector(settings: FitSettings, n_tris: int) -> np.ndarray:
    per_tri = np.array([settings.lr_vertex] * 6 + [settings.lr_colour] * 3 + [settings.lr_alpha])
    return np.concatenate([np.tile(per_tri, n_tris), [settings.lr_background] * 3])


#: the least of a small triangle's vertex rate factor (adam.wgsl's too: render/gpu/shaders.py constants)
SMALL_RATE_MIN = 0.25


def triangle_areas(v: np.ndarray) -> np.ndarray:
    """(T,) areas of triangles given by their corners ``v`` (T, 3, 2)."""
    e1, e2 = v[:, 1] - v[:, 0], v[:, 2] - v[:, 0]
    return 0.5 * np.abs(e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0])


def small_triangle_rates(raw: np.ndarray, n_tris: int, width: int, height: int, small_px: float) -> np.ndarray:
    """(n_params,) factors of each raw parameter's rate (FitSettings.small_triangle_px): a
    triangle's vertices its size (the square root of its area in pixels of a width x height
    frame) over ``small_px``, within [SMALL_RATE_MIN, 1]; everything else 1 (adam.wgsl small_rate)."""
    out = np.ones(len(raw))
    if small_px <= 0 or n_tris == 0:
        return out
    v = raw[: n_tris * 10].reshape(n_tris, 10)[:, :6].astype(np.float64).reshape(n_tris, 3, 2) * [width, height]
    rate = np.clip(np.sqrt(triangle_areas(v)) / small_px, SMALL_RATE_MIN, 1.0)
    out[: n_tris * 10].reshape(n_tris, 10)[:, :6] = rate[:, None]
    return out


class ReferenceFitLoop:
    """The fit loop in float64 numpy: advance -> loss_and_grad -> Adam, one iteration at a time.

    Like the GPU loop it takes one target (H, W, 3) with raw (n_params,), or a stack (B, H, W, 3)
    with raw (B, n_params) stepped in lockstep (then losses are (n, B) and states (B, n_params)),
    and focus maps ``weights`` shaped like the target's pixels (render/focus.py)."""

    def __init__(self, backend, target: np.ndarray, raw: np.ndarray, n_tris: int,
                 settings: FitSettings, schedule: Schedule, iteration: int = 0, weights: np.ndarray | None = None,
                 ahead=()):
        """``ahead``: the fit's other shapes (the GPU loop builds their pipelines; nothing to build here)."""
        self.backend = backend
        target = np.asarray(target, dtype=np.float64)
        self.batched = target.ndim == 4
        self.target_shape = target.shape
        self.targets = target if self.batched else target[None]
        self.batch = self.targets.shape[0]
        self.weights = None if weights is None else np.asarray(weights, dtype=np.float64).reshape(self.targets.shape[:3])
        self.n_tris = n_tris
        self.set_locked([np.zeros(0, int)] * self.batch, [np.zeros((0, 10))] * self.batch)
        self.set_anchor(None)
        raw = self._stack(raw)
        self.reset(raw, np.zeros_like(raw), np.zeros_like(raw), iteration, schedule, settings)

    def reset(self, raw, m, v, iteration: int, schedule: Schedule, settings: FitSettings) -> None:
        """Start over from this state at ``iteration`` (as GpuFitLoop.reset)."""
        self.settings = settings
        self.iter = iteration
        self.set_schedule(schedule)  # (and the current sigma under it)
        self.set_state(raw, m, v)
        self._good = [(self.get_state(), iteration)] * 2  # see GpuFitLoop: two verified snapshots
        self._turn = 0

    @property
    def sigma(self) -> float:
        """The first image's sigma at the current iteration."""
        return float(self.sigmas[0])

    def set_optim(self, settings: FitSettings) -> None:
        self.settings = settings

    def _stack(self, a) -> np.ndarray:
        a = np.asarray(a, dtype=np.float64)
        n = self.n_tris * 10 + 3
        if a.size != self.batch * n:
            raise ValueError(f"expected {self.batch} x {n} parameters, got shape {a.shape}")
        return a.reshape(self.batch, n)

    def inject_fault(self) -> None:
        self.raw[0, 0] = np.nan

    def set_schedule(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self.sigmas = schedule.current_sigmas(self.iter, self.batch)

    def set_state(self, raw, m, v, images=None) -> None:
        self.raw, self.m, self.v = (self._stack(a).copy() for a in (raw, m, v))

    def set_locked(self, locked, values, records: bool = True) -> None:
        """Lock triangles ``locked[b]`` of each image b at ``values[b]`` (k, 10), as
        GpuFitLoop.set_locked: Adam leaves their parameters and moments alone, and they render
        (and are reported) at exactly these values (``records``: the GPU loop's; none here)."""
        self._locks = [(np.asarray(i, dtype=np.int64), np.asarray(v, dtype=np.float64).reshape(-1, 10))
                       for i, v in zip(locked, values)]

    def set_anchor(self, anchor, weights=None) -> None:
        """Pull the triangles towards ``anchor`` (B, T, 10) values with ``weights`` (B, T, 10),
        as GpuFitLoop.set_anchor: each iteration adds the gradient of
        reference.anchor_penalty to the loss's (locked triangles stay as they are). None: no anchor."""
        if anchor is None:
            self._anchor = None
            return
        shape = (self.batch, self.n_tris, 10)
        self._anchor = (np.asarray(anchor, dtype=np.float64).reshape(shape),
                        np.asarray(weights, dtype=np.float64).reshape(shape))

    def _values(self, b: int):
        """Image b's triangles and background, the locked triangles at their locked values."""
        tris, bg = values_from_raw(self.raw[b], self.n_tris)
        idx, vals = self._locks[b]
        tris[idx] = vals
        return tris, bg

    def _hold_locked(self, b: int, before) -> None:
        """Put back the locked triangles' parameters and moments of image b as ``before`` had them."""
        idx = self._locks[b][0]
        cols = (idx[:, None] * 10 + np.arange(10)).ravel()
        for now, then in zip((self.raw, self.m, self.v), before):
            now[b, cols] = then[cols]

    def get_state(self, kind: str = "state"):
        if self.batched:
            return self.raw.copy(), self.m.copy(), self.v.copy()
        return self.raw[0].copy(), self.m[0].copy(), self.v[0].copy()

    def encode_ahead(self) -> bool:
        """The GPU loop's: nothing is encoded here (there is no command buffer to prepare)."""
        return False

    def run(self, n: int, read_state: bool = False, read_image: bool = False, state_kind: str = "state",
            flags=None, sums=None, costs=None, ahead=True, idle=None, read_records=False, prepare=None) -> np.ndarray:
        """Run n iterations in chunks of settings.chunk, with the GPU loop's rollback semantics
        (``read_state``, ``read_image``, ``flags``, ``sums``, ``costs``, ``ahead``, ``idle``,
        ``read_records`` and ``prepare`` are the GPU loop's hints;
        the state is on the host here anyway, and growth renders the scene itself: ``last_image`` is None)."""
        out = []
        done = 0
        while done < n:
            k = min(self.settings.chunk, n - done)
            slot = self._turn
            self._good[slot] = (self.get_state(), self.iter)
            losses = self._iterate(k)
            if not np.all(np.isfinite(losses)):
                bad = self.iter - k + 1 + int(np.argmax(~np.all(np.isfinite(losses), axis=1)))
                good = slot if np.all(np.isfinite(losses[0])) else slot ^ 1
                (raw, m, v), self.iter = self._good[good]
                self.set_state(raw, m, v)
                self._turn = good ^ 1
                raise NumericalFault(f"non-finite loss at iteration {bad}; rolled back to iteration {self.iter}", bad)
            self._turn = slot ^ 1
            out.append(losses)
            done += k
        losses = np.concatenate(out) if out else np.empty((0, self.batch))
        return losses if self.batched else losses[:, 0]

    def _iterate(self, n: int) -> np.ndarray:
        H, W = self.targets.shape[1:3]
        s = self.settings
        lr = lr_vector(s, self.n_tris)
        is_logit = np.ones(self.n_tris * 10 + 3, dtype=bool)
        is_logit[: self.n_tris * 10].reshape(self.n_tris, 10)[:, :6] = False
        losses = np.empty((n, self.batch))
        for k in range(n):
            self.iter += 1
            lr_scale = self.schedule.at(self.iter)[1]
            self.sigmas = self.schedule.sigmas(self.iter, self.batch)
            for b in range(self.batch):
                tris, bg = self._values(b)
                before = (self.raw[b].copy(), self.m[b].copy(), self.v[b].copy())
                scene = Scene(W, H, float(self.sigmas[b]), bg, tris)
                with self.backend.host.phase("forward+backward"):
                    loss, gt, gb = reference.loss_and_grad(scene, self.targets[b], s.loss,
                                                           None if self.weights is None else self.weights[b])
                if self._anchor is not None:
                    gt = gt + reference.anchor_penalty(tris, self._anchor[0][b], self._anchor[1][b])[1]
                g = np.concatenate([gt.ravel(), gb])
                # chain rule through the sigmoid of every logit
                vals = sigmoid(self.raw[b])
                g = np.where(is_logit, g * vals * (1 - vals), g)
                self.m[b] = s.beta1 * self.m[b] + (1 - s.beta1) * g
                self.v[b] = s.beta2 * self.v[b] + (1 - s.beta2) * g * g
                mhat = self.m[b] / (1 - s.beta1 ** self.iter)
                vhat = self.v[b] / (1 - s.beta2 ** self.iter)
                rate = lr * small_triangle_rates(before[0], self.n_tris, W, H, s.small_triangle_px)
                self.raw[b] = self.raw[b] - rate * lr_scale * mhat / (np.sqrt(vhat) + s.adam_eps)
                self._hold_locked(b, before)
                # as the GPU forward (forward_walk.wgsl): a non-finite parameter of the scene this
                # iteration renders is reported as a NaN loss (a NaN vertex is otherwise silently
                # invisible: its distance compares false everywhere)
                losses[k, b] = loss if np.all(np.isfinite(scene.triangles)) else np.nan
        return losses

    def values_as_set(self, raw):
        """Triangles (B, T, 10) and backgrounds (B, 3) that :meth:`current_values` reports right
        after ``set_state(raw)`` (as GpuFitLoop.values_as_set), without setting anything."""
        raw = self._stack(raw)
        vals = [values_from_raw(r, self.n_tris) for r in raw]
        tris = np.stack([t for t, _ in vals])
        for b, (idx, locked) in enumerate(self._locks):
            tris[b, idx] = locked
        return tris, np.stack([bg for _, bg in vals])

    def brought_records(self) -> None:
        """None: a reference loop keeps no scene records (the GPU loop's brought_records)."""
        return None

    def current_values(self):
        vals = [self._values(b) for b in range(self.batch)]
        if not self.batched:
            return vals[0][0], vals[0][1], self.sigma
        return np.stack([t for t, _ in vals]), np.stack([b for _, b in vals]), self.sigmas.copy()

    def gpu_image(self):
        return None

    def last_image(self):
        return None

    def read_image(self):
        return None  # no image is kept: placement renders the current values

    def gpu_phase_samples(self) -> dict[str, list[float]]:
        return {}
