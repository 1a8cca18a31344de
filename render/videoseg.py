"""A clip in independent segments: ``trifit video ... --segment K [--dask local[:N] | tcp://HOST:PORT]``.

One fit through a whole clip is sequential by nature (frame k starts from frame k - 1). Split into
segments, each fitted cold at its first frame (a full fit of ``first_frame_iters``) and warm-started
frame to frame within itself exactly as the whole-clip loop does (render/videorun.py), the segments
are independent: fitted one after another here, or in parallel as tasks on a Dask cluster
(render/videocluster.py), and joined in order. A cold start costs a fresh fit's iterations, so
segments are a trade of work for parallelism and for a clean start at a new scene.

**Where segments start**: at frame 0, at every scene cut, and every K frames within a shot (from
its first frame: a cut restarts the count, so no segment has more than K frames and none is cut
short by a boundary that ignores the cut). The cuts are found on the driver, in a pass over the
clip's fit-size targets (what the fit sees), by render/shots.py's rule, the one the whole-clip fit
starts a new fit by.

**Seeds**: the segment that starts at frame s fits with ``shots.shot_seed(seed, s)``: the clip's
seed at s = 0 (so one segment over the whole clip is the whole-clip run), otherwise a function of
the seed and where the segment starts, never of which task, worker or order fitted it. The scene
records it (``meta.seed``) and the segment's first frame (``meta.video.segment``).

**Progress and resumption**: the work folder (``.OUTPUT.trifit-video/``, as the whole-clip run's,
with ``segment`` in its record) keeps every frame's scene as it is finished. A re-run with the
same arguments keeps the segments whose scenes are all there and refits the others from their
first frame (the same bytes again); a kept segment's output frames are rendered from its stored
scenes (a folder's frames already there are kept). Output frames are encoded strictly in order:
frames of a segment finished early wait for those before them.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from .shots import TransitionWatch, find_cuts, measured, shot_seed
from .videorun import VideoResult, has_scene, kept_work, scene_path, start_work, video_meta


# ---------------------------------------------------------------------- where segments start
def frame_measures(clip, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """((count - 1,), (count,), (count,)): the mean absolute difference of each frame from the one
    before, each frame's content and whether it settles a transition by its own window
    (render/shots.py), at the fit size (a pass over the clip of its own: a few thumbnails and one
    frame at a time are held, whatever the clip's length)."""
    from .imageio import as_target

    changes, contents, watch = [], [], TransitionWatch()
    frames = clip.frames(0)
    try:
        for m in measured(as_target(image, size) for image in frames):
            if m.change is not None:
                changes.append(m.change)
            contents.append(m.content)
            watch.push(m.thumb, m.content)
    finally:
        frames.close()
    return np.asarray(changes, np.float64), np.asarray(contents, np.float64), np.asarray(watch.finish(), bool)


def split(count: int, every: int, cuts=()) -> list[tuple[int, int]]:
    """Segments ``[(start, end), ...]`` of ``count`` frames: the shots (from frame 0 and each cut
    to the next), each cut into pieces of ``every`` frames from its start (the last one shorter)."""
    shots = sorted({0, *(int(c) for c in cuts if 0 < c < count)})
    starts = [s for a, b in zip(shots, shots[1:] + [count]) for s in range(a, b, every)]
    return list(zip(starts, starts[1:] + [count]))


@dataclass
class SegmentPlan:
    segments: list[tuple[int, int]]   # (first frame, end), in order
    done: list[bool]                  # whose scenes an earlier run left, all of them
    shots: list[int] = field(default_factory=list)  # the frames that start new shots (render/shots.py)


def plan_segments(clip, work, settings: dict, note) -> SegmentPlan:
    """The clip's segments (settings' ``segment``: K) and which of them an earlier run with these
    settings finished; the work folder ready for this run (another run's progress removed). Where
    an earlier run's progress goes on, ``settings`` take what it goes on with (videorun.kept_work)."""
    from .videofit import FramePolicy

    kept = kept_work(work, settings, note)
    if kept is None:
        shutil.rmtree(work, ignore_errors=True)
    else:
        settings.update(kept)  # (the segments as that run split them, fitted as it fitted them)
    changes, contents, settles = frame_measures(clip, settings["size"])
    fades, transitions = FramePolicy.from_dict(settings["policy"]).shot_rules()
    cuts = find_cuts(changes, contents if fades else None, settles if transitions else None)
    segments = split(clip.count, settings["segment"], cuts)
    start_work(work, settings)
    return SegmentPlan(segments, [kept is not None and all(has_scene(work, k) for k in range(s, e))
                                  for s, e in segments], [c for c in cuts if 0 < c < clip.count])


# ---------------------------------------------------------------------- a segment's work (here, or a worker's)
def fit_options(clip, settings: dict) -> dict:
    """What a segment's fit and its pictures need, all plain values (they travel to workers)."""
    return {k: settings[k] for k in ("triangles", "size", "seed", "first_frame_iters", "iters_per_frame", "policy",
                                     "frames", "rate", "frame_size", "edges")} | {"source": str(clip.path)}


def fit_segment(targets, start: int, options: dict, engine, control=None) -> Iterator[tuple[int, bytes, np.ndarray, float]]:
    """Fit a segment's frames (``targets``: fit-size arrays of frames ``start``, ...) cold at the
    first and warm after it: per frame ``(k, its scene's JSON, its output frame's pixels, psnr)``.
    Stops early when ``control`` is cancelled (its ``current`` fit is the one it cancels)."""
    from .video import FramePictures
    from .videofit import ClipFit, FramePolicy

    fit = ClipFit(triangles=options["triangles"], size=options["size"], seed=shot_seed(options["seed"], start),
                  engine=engine, first_iters=options["first_frame_iters"], frame_iters=options["iters_per_frame"],
                  policy=FramePolicy.from_dict(options["policy"]), source=options["source"])
    pictures = FramePictures(engine, *options["frame_size"], options["edges"])
    if control is not None:
        control.current = fit
    try:
        for k, target in enumerate(targets, start):
            if control is not None and control.cancelled:
                return
            # a later frame is one chunk (as the whole-clip run's; chunks change no result)
            fit.start_frame(target, first_chunk=options["iters_per_frame"]).run()
            scene = fit.end_frame()
            if scene is None:  # cancelled
                return
            scene.extra["meta"]["video"] = video_meta(fit, k, options["frames"], options["rate"], start)
            data, pixels = scene.to_json().encode("utf-8"), pictures.of(scene)
            yield k, data, pixels, float(fit.fitter.step(0).psnr)
    finally:
        if control is not None:
            control.current = None
        fit.close()


def render_segment(scenes: list[bytes], options: dict, engine) -> list[np.ndarray]:
    """Output frames from stored scenes (a kept segment's, on a re-run): the pixels its fit gave."""
    from .scene import Scene
    from .video import FramePictures

    pictures = FramePictures(engine, *options["frame_size"], options["edges"])
    return [pictures.of(Scene.from_json(data)) for data in scenes]


class Control:
    """A segmented run's handle for a Ctrl+C handler (what ``on_clip`` gets): :meth:`cancel` ends
    the run at the next frame (a local fit at its next chunk); ``frames``: those an earlier run left."""

    def __init__(self, frames: int):
        self.frames, self.cancelled = frames, False
        self.current = None  # the local fit in progress

    def cancel(self) -> None:
        self.cancelled = True
        if self.current is not None:
            self.current.cancel()


class _InOrder:
    """The output's frames strictly in order: pixels that come early wait for those before them;
    ``present``: frames already there (a folder's, from an earlier run), not written again."""

    def __init__(self, output, present: set[int]):
        self.output, self.present = output, present
        self.next = 0
        self.held: dict[int, np.ndarray] = {}
        self._advance()

    def put(self, k: int, pixels: np.ndarray) -> None:
        if k >= self.next and k not in self.present:
            self.held[k] = pixels
        self._advance()

    def _advance(self) -> None:
        while self.next in self.held or self.next in self.present:
            if self.next in self.held:
                self.output.write(self.next, self.held.pop(self.next))
            self.next += 1


Job = tuple  # (start, end, targets or None, stored scenes or None): fit a segment, or render a kept one


def _jobs(plan: SegmentPlan, clip, work, size: int, out: _InOrder) -> Iterator[Job]:
    """The run's work in the clip's order: a segment to fit with its targets (decoded here, one
    segment at a time), or a kept segment whose output frames are missing with its stored scenes."""
    from .imageio import as_target

    frames, at = clip.frames(0), 0
    try:
        for (s, e), done in zip(plan.segments, plan.done):
            if done:
                if not all(k in out.present for k in range(s, e)):
                    yield s, e, None, [scene_path(work, k).read_bytes() for k in range(s, e)]
                continue
            targets = []
            for image in frames:
                at += 1
                if at > s:
                    targets.append(as_target(image, size))
                if at == e:
                    break
            yield s, e, targets, None
    finally:
        frames.close()


@contextlib.contextmanager
def connected(dask: str | None, backend: str, note):
    """With ``dask`` (``local[:N]`` or an address), a client of that cluster for the ``with``
    (render/cluster.py's connection, the dashboard told through ``note``); without, None."""
    if dask is None:
        yield None
        return
    from .cluster import parse_target, session

    with session(parse_target(dask), backend, note) as client:
        yield client


def run_segments(plan: SegmentPlan, clip, frames, settings: dict, *, engine, client, backend: str,
                 on_frame: Callable | None, on_clip: Callable | None) -> VideoResult:
    """Fit the segments the plan has left (here on ``engine``, or with a cluster's ``client`` as
    its tasks) and write every frame (``frames``: render/videorun.py's writer): scenes as they come,
    output frames in order. ``result.written``: the output's frames from the first on."""
    kept = sum(e - s for (s, e), done in zip(plan.segments, plan.done) if done)
    result = VideoResult(clip.count, kept, kept, 0.0, None)
    options = fit_options(clip, settings)
    control = Control(kept)
    out = _InOrder(frames.output, {k for (s, e), done in zip(plan.segments, plan.done) if done
                                   for k in range(s, e) if frames.output.has(k)})
    psnr: dict[int, float] = {}

    def deliver(items) -> None:
        """Frames back from a segment's fit ``(k, scene JSON, pixels, psnr)``, or from a render
        ``(k, None, pixels, None)``."""
        for k, data, pixels, p in items:
            if data is not None:
                frames.scene(k, data)
                result.done += 1
                psnr[k] = p
                if on_frame is not None:
                    on_frame(k, None, SimpleNamespace(psnr=p))
            out.put(k, pixels)
        result.written = out.next

    result.written = out.next
    jobs = _jobs(plan, clip, frames.work, settings["size"], out)
    if on_clip is not None:
        on_clip(control)
    try:
        if client is not None:
            from .videocluster import fit_on_cluster

            segment_of = {k: s for s, e in plan.segments for k in range(s, e)}
            fit_on_cluster(client, jobs, options, deliver, control, lambda: len({segment_of[k] for k in out.held}),
                           backend=backend)
        else:
            for s, e, targets, scenes in jobs:
                if control.cancelled:
                    break
                if scenes is not None:
                    deliver(zip(range(s, e), [None] * len(scenes), render_segment(scenes, options, engine),
                                [None] * len(scenes)))
                else:
                    for item in fit_segment(targets, s, options, engine, control):
                        deliver([item])
    finally:
        jobs.close()
        result.psnr = [psnr[k] for k in sorted(psnr)]
    result.interrupted = control.cancelled and result.written < clip.count
    return result


__all__ = ["Control", "SegmentPlan", "connected", "fit_segment", "frame_measures", "plan_segments", "render_segment",
           "run_segments", "split"]
