"""Fitting a clip: one fit carried from frame to frame, so triangles persist and move.

A clip is fitted by **one** :class:`trifit.fitter.Fitter` a shot: the first frame gets a full fit
(the default strategy: coarse stage, growth, pruning cycles, respawn, sigma probes), and every
later frame starts from the previous frame's triangles *and* Adam moments (``Fitter.use_targets``)
and is refined for a fixed number of iterations under :class:`FrameStrategy`. A frame that starts
a new shot (render/shots.py's cut, which the caller finds from the changes either side: the frame
loop of render/videorun.py) gets a full fit of its own, with the shot's seed
(``shots.shot_seed``), as `trifit video --segment` fits a segment's first frame: the last shot's
triangles would be moved into a picture they were not placed for. Each frame is one
:class:`trifit.run.FitRun` with an iteration stop, so a frame's scene depends only on the
inputs, the settings, the seed and the iterations (frame ``k`` of the shot that starts at frame
``s`` ends at the shot's fit's iteration ``first_iters + (k - s) * frame_iters``), never on timing
or chunking; a checkpoint taken after a frame resumes the clip exactly (:meth:`ClipFit.resume`).

Why a strategy of its own for the later frames: the default strategy plans a fit from nothing (a
half-size stage, growth from a third of the count, over-growth and pruning, a sigma anneal from
2.5 px) and would throw the previous frame's scene away. A frame of a clip mostly needs the scene
it has, moved a little: the count stays, the edges are as soft as a crisp picture's at the
working size, as a shot's first frame's fit ended (``FramePolicy.sigma_px``: the frames are
written crisp, and the sigma probes choose suits the fit's soft render instead), and the learning
rate restarts at a fraction of a fresh fit's and decays over the frame. What changes between
frames is handled at the frame's start: triangles that stopped contributing, plus the few whose
removal would cost least, are re-placed where the new frame's error is largest (new content gets
triangles, vanished content releases them); a frame that changed as much as a new shot does
(:func:`is_cut`) but is none (fast motion, or a cut with the cold start off) re-places a larger
share whatever its cost, so the new picture gets triangles placed for it rather than only the
last picture's moved. The policy's numbers (:class:`FramePolicy`) were picked by measuring PSNR
and flicker against cold per-frame fits and each other (tools/video_measure.py; docs/QUALITY.md,
"Video").

The optional temporal term (``FramePolicy.steady``, `trifit video --steady W`) keeps triangles
still where the picture is still: at each frame's start every triangle is anchored where the
previous frame left it, with a weight that is W times its **stillness** -- 1 where nothing in its
bounding box changed between the two frames, falling to 0 as the box's share of changed pixels
grows (:func:`stillness`) -- so moving content is free to move. The fit adds the anchor's
gradient on the device (``Fitter.set_anchor``; reference.anchor_penalty is the float64 oracle).
The weights are in the loss's own units (:func:`steady_weights`): W = 1 makes moving a vertex of
a still triangle by one pixel cost as much as one channel of one pixel off by 1, and changing its
colour or opacity by d as much as its whole footprint off by d.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import numpy as np

from .errors import TrifitError
from .fitloop import Schedule
from .fitter import Fitter
from .run import FitRun, StopConditions
from .scene import Scene
from .shots import CONTENT_MIN, frame_change, frame_content, frame_thumb, shot_seed
from .strategy import DefaultStrategy, FixedStrategy


@dataclass(frozen=True)
class FramePolicy:
    """How a later frame of a clip is refined (the first frame gets a full fit)."""

    lr_start: float = 1.0       # the learning-rate scale each frame restarts at (x the settings' rates),
                                # cosine down to lr_final at the frame's end
    sigma_boost: float = 1.0    # each frame starts at this many times the final sigma and anneals back
    sigma_fraction: float = 0.5  # ... over this fraction of the frame
    renew: float = 0.02         # at most this fraction of the count is re-placed at each frame's start: the
                                # triangles whose removal costs least (and any that stopped contributing), moved
                                # to where the new frame's error is largest,
    renew_below: float = 0.25   # ... of those, only the ones whose removal costs under this fraction of the
                                # median triangle's: content that vanished, not a still region's triangles
    cut_change: float = 0.1     # a frame this different from the one before (mean absolute change at the working
                                # size, values in [0, 1]: render/shots.py's absolute test for a cut) but no new shot,
    cut_renew: float = 0.3      # ... and this fraction of the count is re-placed at its start, the ones whose removal
                                # costs least whatever their cost (0: a cut is refined like any other frame)
    cut_restart: float = 1.0    # 1: a frame the caller says starts a new shot (render/shots.py) gets a cold fit of its
                                # own, as a clip's first frame does; 0: it is refined from the last shot's scene
    fade_restart: float = 1.0   # 1: content that appears after blank frames (a fade in: render/shots.py) starts a
                                # new shot too; 0: only cuts do (the callers that find shots read it)
    transition_restart: float = 1.0  # 1: a gradual transition that ends (a dissolve, a fade's end: render/shots.py)
                                # starts a new shot too (the callers that find shots read it)
    exposure: float = 1.0       # 1: at a later frame's start the scene's colours follow the picture's change of
                                # exposure (a fade, a light change): per channel, the map that takes the last frame's
                                # mean and spread of values to this one's (:func:`exposure_change`); 0: kept
    sigma_px: float = 0.25      # the frames' edge softness, px of the working size: a crisp picture's at that size
                                # (export.CRISP_SIGMA_PX), the edges `trifit video` writes by default; a shot's first
                                # frame anneals to it without probes (0: the sigma its probes choose, which suits the
                                # fit's own soft render, for every frame of the shot)
    steady: float = 0.0         # W: the temporal term's weight (0: off), x each triangle's stillness
    moving_above: float = 0.04  # a pixel whose mean change over its channels exceeds this (in [0, 1]) has moved:
                                # above sensor noise, below what motion at an edge makes
    moving_free: float = 0.1    # a triangle is free (stillness 0) when this fraction of its box moved, and
                                # still (1) when none did, linearly between
    moving_margin: float = 4.0  # its bounding box grown by this many pixels of the working size (more than content
                                # moves in a frame, so the triangles next to it are free too)

    def as_dict(self) -> dict:
        return asdict(self)

    def shot_rules(self) -> tuple[bool, bool]:
        """(fades, transitions): whether content that appears and a transition that ends start a
        shot besides cuts (render/shots.py; what every caller that finds shots passes on)."""
        return self.fade_restart > 0, self.transition_restart > 0

    @classmethod
    def from_dict(cls, d: dict) -> FramePolicy:
        """A policy as recorded (a checkpoint's); a field a record from before it lacks is off
        (:data:`ADDED_OFF`), so an older clip's fit goes on as it began."""
        known = {f.name for f in fields(cls)}
        return cls(**{**ADDED_OFF, **{k: float(v) for k, v in d.items() if k in known}})


#: FramePolicy's fields added after clips were first recorded, with the value that turns each off
ADDED_OFF = {"cut_renew": 0.0, "cut_restart": 0.0, "sigma_px": 0.0, "fade_restart": 0.0, "transition_restart": 0.0,
             "exposure": 0.0}


class FrameStrategy(DefaultStrategy):
    """The policy of a clip's later frames: the count kept, re-placement at the frame's start,
    a short sigma and learning-rate schedule over the frame (planned by the frame's FitRun)."""

    name = "video-frame"
    uses_coarse_stage = False

    def __init__(self, fit, policy: FramePolicy | None = None):
        super().__init__(fit)
        self.policy = policy or FramePolicy()
        self.frame_start = 0  # set by after() / begin_frame(), or a checkpoint's state
        self.shot = 0         # the clip's frame this fit started at (its shot's first)
        self.clip_seed = int(fit.initial_settings["seed"])  # the clip's seed (a later shot's fit has its own)
        self._thumbs = None   # (the targets, their thumbnails): the next frame's exposure map reuses them

    @classmethod
    def after(cls, previous: DefaultStrategy, policy: FramePolicy | None = None, *, shot: int = 0,
              clip_seed: int | None = None) -> FrameStrategy:
        """The frame strategy that takes over from a shot's first frame's: its probed final sigmas
        and any sigma pinned by hand are kept. ``shot``: the frame the shot starts at, ``clip_seed``:
        the clip's seed (both kept in checkpoints, so a resumed clip starts its next shots alike)."""
        new = cls(previous.fit, policy)
        new.frame_start = previous.fit.iteration
        new.shot = int(shot)
        if clip_seed is not None:
            new.clip_seed = int(clip_seed)
        new.sigma_scales = np.array(previous.sigma_scales, dtype=np.float64)
        new.sigma_fixed = previous.sigma_fixed
        return new

    # ------------------------------------------------------------------ the frame
    def begin_frame(self, previous: np.ndarray | None = None, thumb: np.ndarray | None = None, *,
                    previous_thumb: np.ndarray | None = None, change: float | None = None) -> None:
        """A new frame's targets are in (``Fitter.use_targets``): re-place what the new frame
        needs elsewhere; the frame's schedule starts here (the FitRun plans its length).
        ``previous``: the last frame's targets (B, H, W, 3) at the working size (a new shot
        re-places ``cut_renew`` of the count: :func:`is_cut`); with an ``exposure`` policy the
        colours follow the change of light first (:func:`exposure_change`); with a ``steady``
        policy, every triangle is anchored where it is (the re-placed ones free). What the caller
        measured of one image's frames already, where it has it (else made here): ``thumb`` and
        ``previous_thumb``, the new and the last target's thumbnails, and ``change``, the
        :func:`frame_change` between the two."""
        fit = self.fit
        self.frame_start = fit.iteration
        p, n = self.policy, fit.n_triangles
        if p.exposure > 0 and previous is not None:
            kept = self._thumbs
            before = kept[1] if kept is not None and kept[0] is previous else _thumbs_of(previous, previous_thumb)
            self._thumbs = (fit.targets, _thumbs_of(fit.targets, thumb))
            gain, offset = exposure_change(before, self._thumbs[1])
            if np.any(gain != 1.0) or np.any(offset != 0.0):
                fit.recolour(gain, offset)
        # (per image: a new shot's frame renews more, whatever the cost)
        cut = is_cut(previous, fit.targets, p, None if change is None else [change])
        ks = [min(n - 1, math.ceil(share * n)) if share > 0 else 0 for share in
              (p.cut_renew if c else p.renew for c in cut)]
        renew = [set(d.tolist()) for d in self.stopped_contributing(fit.values()[0])]
        if any(ks):
            for b, costs in enumerate(fit.removal_costs()):
                cheapest = np.argsort(costs, kind="stable")[:ks[b]]
                if not cut[b]:
                    cheapest = cheapest[costs[cheapest] < p.renew_below * np.median(costs)]
                renew[b] |= set(cheapest.tolist())
        renew = [np.array(sorted(d), dtype=np.int64) for d in renew]
        placed = [int(np.sum(~np.isin(d, lk))) for d, lk in zip(renew, fit.locks)]  # (replace spares locks)
        if any(len(d) for d in renew):
            fit.replace(renew, self._place([len(d) for d in renew]))
        if p.steady > 0 and previous is not None:
            tris = fit.values()[0]
            still = stillness(tris, previous, fit.targets, p)
            for b, k_new in enumerate(placed):
                still[b, n - k_new:] = 0.0  # re-placed on top: new content
            fit.set_anchor(tris, steady_weights(tris, still, p.steady, fit.width, fit.height))

    def schedule(self, iteration: int) -> Schedule:
        """Sigma from ``sigma_boost`` x each image's final sigma back to it, the learning rate
        from ``lr_start`` down to lr_final, both over the frame (from frame_start to the plan's end)."""
        s, p = self.settings, self.policy
        length = max(1, s.planned_iterations - self.frame_start)
        if self.sigma_fixed is not None:
            ends = np.full(self.fit.batch, self.sigma_fixed)
        elif p.sigma_px > 0:  # (the probed sigma suits the soft render; the pictures are drawn crisp)
            ends = np.full(self.fit.batch, p.sigma_px / self.fit.short_side)
        else:
            ends = s.sigma_end_px / self.fit.short_side * self.sigma_scales
        return Schedule(float(ends[0] * p.sigma_boost), float(ends[0]), max(1.0, p.sigma_fraction * length), length,
                        s.lr_final, iter_offset=self.frame_start, lr_offset=self.frame_start, lr_start=p.lr_start,
                        sigma_ends=tuple(float(e) for e in ends))

    # no events inside a frame, and the count never grows past the one asked for: the fixed strategy's
    next_event, wants_image = FixedStrategy.next_event, FixedStrategy.wants_image
    may_place, prunes = FixedStrategy.may_place, FixedStrategy.prunes
    on_event, finish = FixedStrategy.on_event, FixedStrategy.finish

    # ------------------------------------------------------------------ progress (checkpoints)
    def state(self) -> dict:
        return {**super().state(), "frame_start": int(self.frame_start), "policy": self.policy.as_dict(),
                "shot": int(self.shot), "clip_seed": int(self.clip_seed)}

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.frame_start = int(state["frame_start"])
        self.policy = FramePolicy.from_dict(state["policy"])
        self.shot = int(state.get("shot", 0))  # (a checkpoint from before new shots: the clip's one fit)
        self.clip_seed = int(state.get("clip_seed", self.fit.initial_settings["seed"]))
        if self.shot < 0 or self.clip_seed < 0:
            raise ValueError(f"shot {self.shot} / clip_seed {self.clip_seed} below 0")


def frames_done(checkpoint, first_iters: int, frame_iters: int) -> int | None:
    """The frames a clip's ``checkpoint`` (taken after a frame) has finished, from its shot's first
    frame and its iteration; None when that iteration is no frame's end."""
    it = checkpoint.iteration
    if it < first_iters or (it - first_iters) % frame_iters:
        return None
    shot = int(checkpoint.state.get("strategy", {}).get("shot", 0))
    return shot + 1 + (it - first_iters) // frame_iters


def frame_thumbs(targets) -> np.ndarray:
    """(B, h, w, 3) float64: each image's thumbnail (render/shots.py ``frame_thumb``: block means,
    which a map of the values takes alike, at a small share of a frame's cost)."""
    return np.stack([frame_thumb(t) for t in targets]).astype(np.float64)


def _thumbs_of(targets, thumb: np.ndarray | None) -> np.ndarray:
    """:func:`frame_thumbs` of ``targets``, or the one image's thumbnail ``thumb`` the caller made of
    them already (render/shots.py ``frame_thumb``), in the same form."""
    return frame_thumbs(targets) if thumb is None else np.asarray(thumb, np.float64)[None]


def exposure_change(previous: np.ndarray, current: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(gain (B, 3), offset (B, 3)): per image and channel, the map ``gain x value + offset`` that
    takes the previous frame's mean and standard deviation of values to the current frame's (both
    (B, H, W, 3) in [0, 1]: the frames at the working size, or their :func:`frame_thumbs`, as the
    frame loop passes them), where it explains most of the change: the mapped
    previous frame is nearer the current one by at least half their mean absolute difference. A
    fade or a change of light scales and shifts the values, and the map takes one frame to the
    next; motion, noise or a new picture it hardly explains, and the scene keeps its colours (a
    moving picture's values are never mapped to their best fit, which would shrink its contrast).
    The identity too where either frame has no content (render/shots.py): a blank frame's spread is
    its noise."""
    prev, cur = np.asarray(previous, np.float64), np.asarray(current, np.float64)
    gain, offset = np.ones((len(cur), 3)), np.zeros((len(cur), 3))
    for b, (q, c) in enumerate(zip(prev, cur)):
        if frame_content(q) < CONTENT_MIN or frame_content(c) < CONTENT_MIN:
            continue
        mq, mc = q.mean(axis=(0, 1)), c.mean(axis=(0, 1))
        dq, dc = q - mq, c - mc  # (deviations from the mean colour: the spread, the map's error)
        sq, sc = np.sqrt(np.mean(dq * dq, axis=(0, 1))), np.sqrt(np.mean(dc * dc, axis=(0, 1)))
        g = np.where(sq > 0, sc / np.where(sq > 0, sq, 1.0), 1.0)
        if np.mean(np.abs(g * dq - dc)) <= 0.5 * np.mean(np.abs(q - c)):  # (g q + o - c, o = mc - g mq)
            gain[b], offset[b] = g, mc - g * mq
    return gain, offset


def is_cut(previous: np.ndarray | None, current: np.ndarray, policy: FramePolicy,
           changes: list[float] | None = None) -> list[bool]:
    """Whether each image's new frame changed as much as a new shot does: its mean absolute change
    from the frame before (both (B, H, W, 3) at the working size, in [0, 1]; ``changes``: each
    image's :func:`frame_change` of the two, where the caller has them) is at least
    ``policy.cut_change``, the absolute half of render/shots.py's cut test. A frame refined from the
    last (no new shot: fast motion, or ``cut_restart`` off) that passes it is a new picture, or motion
    so fast that most of the scene must move anyway."""
    if previous is None or policy.cut_renew <= 0:
        return [False] * len(current)
    if changes is None:
        changes = [frame_change(q, c) for q, c in zip(previous, current)]
    return [c >= policy.cut_change for c in changes]


def stillness(triangles: np.ndarray, previous: np.ndarray, current: np.ndarray, policy: FramePolicy) -> np.ndarray:
    """(B, T) in [0, 1]: how still the picture is where each triangle is, from two frames
    (B, H, W, 3) in [0, 1] at the working size and the triangles' values (B, T, 10): 1 minus the
    share of changed pixels (mean change over the channels above ``moving_above``) in the
    triangle's bounding box grown by ``moving_margin`` px, over ``moving_free``, clipped to
    [0, 1]. A box outside the frame is still (nothing there to show)."""
    moved = np.abs(np.asarray(current, np.float64) - np.asarray(previous, np.float64)).mean(axis=-1) > policy.moving_above
    B, H, W = moved.shape
    counts = np.zeros((B, H + 1, W + 1))
    counts[:, 1:, 1:] = moved.cumsum(axis=1).cumsum(axis=2)  # summed-area table
    t = np.asarray(triangles, np.float64)
    xs, ys, m = t[..., 0:6:2] * W, t[..., 1:6:2] * H, policy.moving_margin
    x0, x1 = (np.clip(f(v), 0, W).astype(np.int64) for f, v in ((np.floor, xs.min(-1) - m), (np.ceil, xs.max(-1) + m)))
    y0, y1 = (np.clip(f(v), 0, H).astype(np.int64) for f, v in ((np.floor, ys.min(-1) - m), (np.ceil, ys.max(-1) + m)))
    b = np.arange(B)[:, None]
    moving = counts[b, y1, x1] - counts[b, y0, x1] - counts[b, y1, x0] + counts[b, y0, x0]
    area = (x1 - x0) * (y1 - y0)
    share = np.where(area > 0, moving / np.maximum(area, 1), 0.0)
    return np.clip(1.0 - share / policy.moving_free, 0.0, 1.0)


def steady_weights(triangles: np.ndarray, still: np.ndarray, steady: float, width: int, height: int) -> np.ndarray:
    """(B, T, 10): the anchor's weights for triangles (B, T, 10) of stillness ``still`` (B, T),
    in the mse's units (a mean over the frame's ``width x height x 3`` values): a vertex coordinate
    by the squared pixels it moves, a colour or opacity by the triangle's area in pixels (its
    footprint's squared change), all x ``steady`` x stillness."""
    t = np.asarray(triangles, np.float64)
    x, y = t[..., 0:6:2] * width, t[..., 1:6:2] * height
    area = 0.5 * np.abs((x[..., 1] - x[..., 0]) * (y[..., 2] - y[..., 0]) - (x[..., 2] - x[..., 0]) * (y[..., 1] - y[..., 0]))
    w = np.empty(t.shape)
    w[..., 0:6:2], w[..., 1:6:2] = float(width) ** 2, float(height) ** 2
    w[..., 6:10] = np.minimum(area, width * height)[..., None]
    return w * (steady * np.asarray(still, np.float64) / (width * height * 3))[..., None]


class ClipFit:
    """A clip's frames fitted in order: :meth:`fit_frame` for each, or :meth:`start_frame` /
    :meth:`end_frame` around a run the caller steps (the first frame, and each frame the caller
    says starts a new shot, gets ``first_iters`` iterations of a full fit; every other one
    ``frame_iters`` from the previous frame's state under :class:`FrameStrategy`). ``fitter`` is
    the current shot's fit: a new shot closes the last one's. :meth:`cancel` (e.g. from a Ctrl+C
    handler) ends the frame in progress at its next chunk; that frame is then not finished."""

    def __init__(self, *, triangles: int = 150, size: int = 176, seed: int = 0, engine=None,
                 first_iters: int = 600, frame_iters: int = 100, policy: FramePolicy | None = None,
                 source: str | None = None, **settings):
        if first_iters < 1 or frame_iters < 1:
            raise TrifitError("a clip's fit needs at least one iteration per frame")
        self.first_iters, self.frame_iters = int(first_iters), int(frame_iters)
        self.policy = policy or FramePolicy()
        if settings.get("replicas", 1) not in (0, 1):
            raise TrifitError("a clip is fitted as one replica (a frame starts from the scene the frame before ended with)")
        settings["replicas"] = 1
        if self.policy.sigma_px > 0:  # every shot's first frame is fitted for crisp frames too: annealed to sigma_px,
            settings.setdefault("sigma_end_px", self.policy.sigma_px)  # not probed (what the probes choose suits
            settings.setdefault("sigma_probes", 0)                     # the soft render: docs/QUALITY.md)
        self._make = dict(triangles=triangles, size=size, seed=seed, engine=engine, source=source, **settings)
        self.seed = int(seed)  # the clip's (a later shot's fit draws from shots.shot_seed)
        self.fitter: Fitter | None = None
        self.frames = 0        # frames finished
        self.shot = 0          # the frame the current fit started at
        self.run: FitRun | None = None
        self.cancelled = False

    @classmethod
    def resume(cls, last_target, checkpoint, *, first_iters: int, frame_iters: int, engine=None,
               source: str | None = None) -> ClipFit:
        """The clip's fit after the frame ``checkpoint`` was taken at (``last_target``: that frame)."""
        done = frames_done(checkpoint, first_iters, frame_iters)
        if done is None:
            raise TrifitError(f"the checkpoint is at iteration {checkpoint.iteration}, not at the end of a frame of "
                              f"{first_iters} + k x {frame_iters} iterations")
        if checkpoint.state.get("strategy", {}).get("name") != FrameStrategy.name:
            raise TrifitError("the checkpoint is not of a clip's fit")
        clip = cls(first_iters=first_iters, frame_iters=frame_iters, engine=engine, source=source)
        clip.fitter = Fitter.resume(last_target, checkpoint, engine=engine, source=source, strategy=FrameStrategy)
        strategy = clip.fitter.strategy
        clip.policy, clip.frames, clip.shot, clip.seed = strategy.policy, done, strategy.shot, strategy.clip_seed
        return clip

    def frame_end(self, k: int) -> int:
        """The iteration of the current shot's fit at which frame ``k`` (from 0, of the clip) ends."""
        return self.first_iters + (k - self.shot) * self.frame_iters

    def fit_frame(self, target, callback=None) -> Scene | None:
        """Fit the next frame to ``target`` (path, PIL image or array; resized to the working
        size); its scene, or None when cancelled before it was done. ``callback(stats)`` after
        each chunk, as FitRun.run's."""
        if self.cancelled:
            return None
        self.start_frame(target).run(callback)
        return self.end_frame()

    def start_frame(self, target, new_shot: bool = False, thumb: np.ndarray | None = None, *,
                    previous_thumb: np.ndarray | None = None, change: float | None = None, **run_options) -> FitRun:
        """The next frame's run, not started: iterate it (a chunk at a time, as the window's
        worker does, pausing between chunks as it likes) or call its ``run()``, then
        :meth:`end_frame`. ``new_shot``: the frame starts a new shot (render/shots.py), so it gets a
        fit of its own (``FramePolicy.cut_restart``). ``thumb``, ``previous_thumb``: the target's and
        the last target's thumbnails, and ``change``: the frame's change from the last
        (render/shots.py ``frame_thumb``, ``frame_change``), where the caller made them (the frame
        loop's decoding thread does), so the fit's thread does not. ``run_options``: FitRun's chunk sizing
        (``chunk_s``, ``first_chunk``); the frame's length is its iteration stop, whatever the chunks."""
        first = self.fitter is None
        if first:
            self.fitter = Fitter(target, **self._make)
        elif new_shot and self.policy.cut_restart > 0:
            self._new_shot(target)
            first = True
        else:
            f = self.fitter
            previous = f.targets
            f.use_targets([target])
            f.forget_before(f.iteration)  # the clip keeps only the current frame's record
            f.strategy.begin_frame(previous, thumb, previous_thumb=previous_thumb, change=change)
        self.run = FitRun(self.fitter, StopConditions(iterations=self.first_iters if first else self.frame_iters),
                          **run_options)
        if self.cancelled:  # cancelled between two frames: this one ends before its first chunk
            self.run.cancel()
        return self.run

    def end_frame(self) -> Scene | None:
        """The frame whose run has ended: its scene, or None when it was cancelled or did not
        reach its last iteration (the frame is then not finished)."""
        if self.cancelled or self.fitter is None or self.fitter.iteration != self.frame_end(self.frames):
            return None
        if self.frames == self.shot:
            self.fitter.use_strategy(FrameStrategy.after(self.fitter.strategy, self.policy, shot=self.shot,
                                                         clip_seed=self.seed))
        self.frames += 1
        return self.fitter.scene

    def _new_shot(self, target) -> None:
        """Frame ``frames`` starts a new shot: a fit of its own, made as the last one was (its
        settings; the count, a sigma and a learning-rate scale set by hand carried over), drawing
        from the shot's seed. The last shot's fit is closed once the new one is made."""
        old = self.fitter
        made = old.initial_settings
        made.update(seed=shot_seed(self.seed, self.frames), triangles=old.settings.triangles,
                    overgrow=old.settings.overgrow)  # (a count set by hand ends over-growth: set_count)
        new = Fitter(target, engine=old.engine, source=self._make["source"], **made)
        try:
            if old.strategy.sigma_fixed is not None:
                new.set_sigma(old.strategy.sigma_fixed * new.short_side)
            if old.lr_scale != 1.0:
                new.set_learning_rate(old.lr_scale)
        except BaseException:
            new.close()
            raise
        self.fitter, self.shot = new, self.frames
        old.close()

    def cancel(self) -> None:
        self.cancelled = True
        if self.run is not None:
            self.run.cancel()

    def checkpoint(self):
        """The whole state after the last finished frame (render/checkpoint.py)."""
        return self.fitter.checkpoint()

    def close(self) -> None:
        if self.fitter is not None:
            self.fitter.close()


__all__ = ["ClipFit", "FramePolicy", "FrameStrategy", "frames_done", "is_cut", "steady_weights", "stillness"]
