"""A clip fitted frame by frame: the frame loop that `trifit video` and the window share, and the
command's resumable run.

:class:`FrameLoop` is the loop itself: the clip's frames decoded and resized ahead on a thread
of their own (render/background.py), fitted in order by one :class:`trifit.videofit.ClipFit`,
one :class:`trifit.run.FitRun` per frame. The loop finds where new shots start as the frames
come (render/shots.py: a cut is judged from the changes either side, so the loop holds a few
frames more than it fits), and the fit starts a cold fit at each. :meth:`FrameLoop.begin` hands out the next frame's
run and :meth:`FrameLoop.end` takes its scene, so a caller steps a frame as it likes: the
command runs each to its end, the window's worker a chunk at a time between its other work
(pause, live changes, exports).

:func:`run_video` keeps the command's progress in a folder beside the output
(``.OUTPUT.trifit-video/``): every frame's scene, and the fit's checkpoint after the first
frame and then about every :data:`CHECKPOINT_EVERY_S` seconds. A re-run with the same
arguments resumes from the checkpoint and refits the frames after it: a frame's fit depends
only on the inputs, the settings and its iterations, so they come out the same bytes and the
whole output is that of an uninterrupted run; the folder is removed when the clip is done.
Those progress files are renamed into place without an fsync (only the command reads them, and
a resume checks they load). Writing -- scenes, SVGs, encoding the output frames, checkpoints --
happens behind the fit on a thread of its own, in order; ``overlap=False`` makes every call in
line instead, with the same bytes.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .background import Behind, Prefetch
from .errors import SceneError, TrifitError
from .fileutil import atomic_write_bytes, check_distinct, check_writable, make_folder
from .fitloop import check_settings
from .shots import CONTEXT, CutLookahead, measured
from .video import Clip, ClipOutput, FramePictures, OutputSpec, open_clip, output_kind

log = logging.getLogger("trifit")

WORK_VERSION = 1
#: the fit's checkpoint is written after a run's first frame and then at most this often
CHECKPOINT_EVERY_S = 1.0
#: frames decoded ahead of the fit, and finished frames waiting to be written
DECODE_AHEAD = 4
WRITE_BEHIND = 4


# ---------------------------------------------------------------------- the loop
class FrameLoop:
    """The frames of ``clip`` from ``start`` on, fitted in order by ``fit`` (a ClipFit)."""

    def __init__(self, clip: Clip, fit, frames: CutLookahead, start: int):
        self.clip, self.fit = clip, fit
        self.next = start             # the frame the next begin() fits
        self.target = None            # the current frame's target (float32, the working size)
        self._frames = frames

    @classmethod
    def start(cls, clip: Clip, *, size: int, overlap: bool = True, **fit_args) -> FrameLoop:
        """From the first frame; ``fit_args`` as ClipFit's (triangles, seed, engine, first_iters, ...)."""
        from .videofit import ClipFit

        fit = ClipFit(size=size, **fit_args)
        fades, transitions = fit.policy.shot_rules()
        frames = CutLookahead(_targets(clip, size, 0, overlap), fades=fades, transitions=transitions)
        return cls(clip, fit, frames, 0)

    @classmethod
    def resume(cls, clip: Clip, checkpoint, done: int, *, size: int, first_iters: int, frame_iters: int,
               engine=None, source: str | None = None, overlap: bool = True) -> FrameLoop:
        """After ``done`` frames, from the checkpoint taken at the end of frame ``done - 1``."""
        from .videofit import ClipFit

        # that frame's target first, then on from there; the frames before it for the decisions' context
        first = max(0, done - 1 - CONTEXT)
        frames = CutLookahead(_targets(clip, size, first, overlap), first, done - 1)
        try:
            last, _ = next(frames)
            fit = ClipFit.resume(last, checkpoint, first_iters=first_iters, frame_iters=frame_iters,
                                 engine=engine, source=source)
            # (as the clip's policy was recorded)
            frames.fades, frames.transitions = fit.policy.shot_rules()
        except BaseException:
            frames.close()
            raise
        return cls(clip, fit, frames, done)

    @property
    def fitter(self):
        """The fit's Fitter (None until the first frame has begun)."""
        return self.fit.fitter

    @property
    def finished(self) -> bool:
        return self.next >= self.clip.count

    def begin(self, **run_options):
        """The next frame's FitRun (FitRun's chunk options pass through), or None after the last frame."""
        if self.finished:
            return None
        self.target, cut = next(self._frames)
        k, frames = self.next, self._frames  # (what the decoding thread measured: the fit's thread need not)
        return self.fit.start_frame(self.target, new_shot=cut, thumb=frames.thumb(k), previous_thumb=frames.thumb(k - 1),
                                    change=frames.change(k), **run_options)

    def end(self):
        """The frame's scene (with ``meta.video``), once its run has ended; None when it did not finish."""
        scene = self.fit.end_frame()
        if scene is None:
            return None
        scene.extra["meta"]["video"] = video_meta(self.fit, self.next, self.clip.count, self.clip.rate)
        self.next += 1
        return scene

    def close(self) -> None:
        """Stop decoding and release the fit."""
        self._frames.close()
        self.fit.close()


def video_meta(fit, frame: int, frames: int, rate, segment: int | None = None) -> dict:
    """A frame's ``meta.video``: where it is in the clip and how it was fitted (``fit``: its
    ClipFit); ``segment``: the first frame of its segment, in a segmented run (render/videoseg.py)."""
    video = {"frame": frame, "frames": frames, "rate": str(rate), "first_frame_iters": fit.first_iters,
             "iters_per_frame": fit.frame_iters}
    if segment is not None:
        video["segment"] = segment
    elif fit.shot:  # (absent for the clip's first shot: its scenes as before shots had fits of their own)
        video["shot"] = fit.shot
    if fit.policy.steady > 0:  # (absent: off, and the scene as it was before the term existed)
        video["steady"] = fit.policy.steady
    return video


def _targets(clip: Clip, size: int, start: int, overlap: bool) -> Prefetch:
    def make():
        from .imageio import as_target

        frames = clip.frames(start)
        try:  # (measured here: the decoding thread reads what the shot rules need, not the fit's)
            yield from measured(as_target(image, size) for image in frames)
        finally:
            frames.close()
    return Prefetch(make, DECODE_AHEAD, threaded=overlap, name="trifit-video-decode")


# ---------------------------------------------------------------------- the command's run
@dataclass
class VideoResult:
    frames: int                 # frames in the clip
    done: int                   # frames finished (all of them unless interrupted)
    resumed_from: int           # frames that an earlier run had finished
    seconds: float
    output: Path | None         # None when no frame was finished
    psnr: list[float] = field(default_factory=list)  # this run's frames, at the working size
    interrupted: bool = False
    written: int = 0            # a segmented run's output frames written, from the first on (render/videoseg.py)
    shots: list[int] = field(default_factory=list)  # frames that started new shots: the segmented run's all,
                                # the whole-clip run's among the frames it fitted (render/shots.py)


def work_folder(output) -> Path:
    """Where a clip's progress is kept: ``.NAME.trifit-video`` beside the output."""
    p = Path(output)
    return p.parent / f".{p.name}.trifit-video"


def run_video(input_path, output, *, triangles: int = 150, size: int = 176, iters_per_frame: int = 100,
              first_frame_iters: int = 600, seed: int = 0, fps: float | None = None, scale: float | None = None,
              width: int | None = None, edges: str = "crisp", scenes_dir=None, svg_dir=None, engine=None,
              backend: str = "auto", policy=None, clip: Clip | None = None, spec: OutputSpec | None = None,
              segment: int | None = None, dask: str | None = None,
              on_frame: Callable | None = None, on_clip: Callable | None = None,
              note: Callable[[str], None] = log.warning, overlap: bool = True) -> VideoResult:
    """Fit ``input_path`` frame by frame into ``output``; see the module doc. ``on_clip(clip_fit)``
    once the fit exists (a Ctrl+C handler cancels it); ``on_frame(k, scene, stats)`` after each
    finished frame (on the calling thread; its files may still be being written). ``segment``:
    independent segments of at most that many frames, split at scene cuts too, fitted one after
    another here or, with ``dask`` (``local[:N]`` or a scheduler's address), as tasks on a Dask
    cluster (render/videoseg.py: there ``on_clip`` gets the run's control, and ``on_frame`` no scene (None)
    and stats with the psnr only)."""
    from .export import picture_size
    from .scene import Scene
    from .videofit import FramePolicy

    t0 = time.perf_counter()
    if dask is not None and not segment:
        raise TrifitError("--dask needs --segment K: a task fits one segment of at most K frames")
    check_settings({"triangles": triangles, "size": size, "seed": seed})  # (the fit's caps, before any folder)
    spec = spec or output_kind(output)
    outputs = {"the output": spec.path, "the scenes": Path(scenes_dir) if scenes_dir else None,
               "the SVG frames": Path(svg_dir) if svg_dir else None}
    check_distinct({role: path for role, path in outputs.items() if path is not None}, [Path(input_path)])
    clip = clip or open_clip(input_path, fps)
    policy = policy or FramePolicy()
    out_w, out_h = spec.frame_size(*picture_size(clip.size, scale=scale, width=width))
    spec.check_frame_size(out_w, out_h)
    if engine is None and dask is None:  # (no adapter: said before anything is written; a cluster's driver needs none)
        from .engine import Engine

        engine = Engine(backend)
    if not spec.folder:
        check_writable(spec.path)  # (before any folder is made: a refusal leaves none behind)
    for d in [Path(d) for d in (scenes_dir, svg_dir) if d] + ([spec.path] if spec.folder else []):
        make_folder(d)
    work = work_folder(spec.path)
    settings = {"version": WORK_VERSION, "input": str(Path(input_path).resolve()), "frames": clip.count,
                "source_size": list(clip.size), "rate": str(clip.rate), "triangles": triangles, "size": size,
                "iters_per_frame": iters_per_frame, "first_frame_iters": first_frame_iters, "seed": seed,
                "policy": policy.as_dict(), "output": str(spec.path.resolve()), "frame_size": [out_w, out_h],
                "edges": edges}
    if segment:
        from .videoseg import connected, plan_segments, run_segments

        settings["segment"] = int(segment)  # (absent: one fit through the clip, the record as before segments)
        with connected(dask, backend, note) as client:  # (a cluster first: a bad address is said before any work)
            plan = plan_segments(clip, work, settings, note)  # (the output is opened after: an error here leaves none)
            frames = _Frames(work, ClipOutput(spec, clip, (out_w, out_h), note), clip.size, scenes_dir, svg_dir)
            try:
                result = run_segments(plan, clip, frames, settings, engine=engine, client=client, backend=backend,
                                      on_frame=on_frame, on_clip=on_clip)
            except BaseException:
                frames.output.discard()
                raise
            result.shots = plan.shots
        complete = result.written == clip.count
    else:
        done = _progress(work, settings, note)
        result = VideoResult(clip.count, done, done, 0.0, None)
        pictures = FramePictures(engine, out_w, out_h, edges)
        frames = _Frames(work, ClipOutput(spec, clip, (out_w, out_h), note), clip.size, scenes_dir, svg_dir)
        behind = Behind(WRITE_BEHIND, threaded=overlap, name="trifit-video-write")
        try:
            for k in range(done):  # an earlier run's frames again, from their scenes (a folder: those missing)
                if not frames.output.has(k):
                    behind.call(frames.output.write, k, pictures.of(Scene.load(scene_path(work, k))))
            _fit_frames(clip, frames, behind, settings, result, pictures, policy, engine, overlap, on_frame, on_clip)
            behind.close()  # every frame finished is written
        except BaseException:
            behind.close(abort=True)
            frames.output.discard()
            raise
        complete = result.done == clip.count
    if frames.output.close(complete=complete):
        result.output = spec.path
    if result.done in (0, clip.count):
        shutil.rmtree(work, ignore_errors=True)  # the clip is done, or nothing was: nothing to resume
    result.seconds = time.perf_counter() - t0
    return result


class _Frames:
    """What a finished frame writes (behind the fit, in order): its scene in the work folder,
    the scene and SVG asked for, the output frame, and now and then the fit's checkpoint --
    last, so a checkpoint never claims a frame whose files are not there."""

    def __init__(self, work: Path, output: ClipOutput, svg_size, scenes_dir, svg_dir):
        self.work, self.output, self.svg_size = work, output, svg_size
        self.scenes_dir = Path(scenes_dir) if scenes_dir else None
        self.svg_dir = Path(svg_dir) if svg_dir else None

    def write(self, k: int, scene, pixels, checkpoint) -> None:
        from .checkpoint import save_checkpoint

        self.scene(k, scene.to_json().encode("utf-8"), scene)
        self.output.write(k, pixels)
        if checkpoint is not None:  # from here on, frames up to k are done
            save_checkpoint(checkpoint, self.work / "checkpoint.npz")

    def scene(self, k: int, data: bytes, scene=None) -> None:
        """Frame ``k``'s scene (``data``: its JSON) in the work folder, and as a scene and an SVG
        where asked for (``scene``: the same, loaded; read from ``data`` when needed)."""
        from .export import save_svg
        from .scene import Scene

        name = f"frame_{k:04d}"
        atomic_write_bytes(scene_path(self.work, k), data, sync=False)
        if self.scenes_dir:
            atomic_write_bytes(self.scenes_dir / f"{name}.trifit.json", data)
        if self.svg_dir:
            save_svg(scene if scene is not None else Scene.from_json(data), self.svg_dir / f"{name}.svg",
                     *self.svg_size)


def _fit_frames(clip: Clip, frames: _Frames, behind: Behind, settings: dict, result: VideoResult,
                pictures: FramePictures, policy, engine, overlap: bool, on_frame, on_clip) -> None:
    """Fit frames ``result.done``, ... of the clip, each written behind the fit as it is finished."""
    from .checkpoint import load_checkpoint

    done = result.done
    if done == clip.count:
        return
    source, fit_args = str(clip.path), dict(first_iters=settings["first_frame_iters"],
                                            frame_iters=settings["iters_per_frame"])
    if done == 0:
        loop = FrameLoop.start(clip, size=settings["size"], triangles=settings["triangles"], seed=settings["seed"],
                               engine=engine, policy=policy, source=source, overlap=overlap, **fit_args)
    else:
        loop = FrameLoop.resume(clip, load_checkpoint(frames.work / "checkpoint.npz"), done, size=settings["size"],
                                engine=engine, source=source, overlap=overlap, **fit_args)
    if on_clip is not None:
        on_clip(loop.fit)
    saved = -float("inf")  # when the last checkpoint was taken: the first frame of a run always gets one
    try:
        # a later frame is one chunk (one readback; chunks change no result), the first frame's by speed
        while (run := loop.begin(first_chunk=settings["iters_per_frame"])) is not None:
            run.run()
            k, scene = loop.next, loop.end()
            if scene is None:
                result.interrupted = True
                return
            checkpoint = None
            if time.perf_counter() - saved >= CHECKPOINT_EVERY_S:
                checkpoint, saved = loop.fit.checkpoint(), time.perf_counter()
            behind.call(frames.write, k, scene, pictures.of(scene), checkpoint)
            result.done = k + 1
            if k > 0 and loop.fit.shot == k:
                result.shots.append(k)
            stats = loop.fitter.step(0)
            result.psnr.append(stats.psnr)
            if on_frame is not None:
                on_frame(k, scene, stats)
    finally:
        loop.close()


def scene_path(work: Path, k: int) -> Path:
    return work / "scenes" / f"frame_{k:04d}.trifit.json"


def _progress(work: Path, settings: dict, note) -> int:
    """Frames an earlier run with these settings finished (0: none, or other settings -- then
    its progress is removed); the work folder is ready for this run. Where the progress goes on,
    ``settings`` take what it goes on with (:func:`kept_work`)."""
    from .checkpoint import CheckpointError, load_checkpoint
    from .videofit import frames_done

    done = 0
    kept = kept_work(work, settings, note)
    if kept is not None and (work / "checkpoint.npz").is_file():
        try:
            done = frames_done(load_checkpoint(work / "checkpoint.npz"), settings["first_frame_iters"],
                               settings["iters_per_frame"]) or 0
            done = min(done, settings["frames"])
        except CheckpointError as exc:
            note(f"cannot resume ({exc}); starting over")
        if not all(has_scene(work, k) for k in range(done)):
            note(f"{work} misses scenes of finished frames; starting over")
            done = 0
    if done:
        settings.update(kept)  # (the record's, which the checkpoint's fit goes on with)
    else:
        shutil.rmtree(work, ignore_errors=True)
    start_work(work, settings)
    return done


def kept_work(work: Path, settings: dict, note) -> dict | None:
    """The settings an earlier run's progress in ``work`` goes on with, or None where it holds none
    (said through ``note`` where it holds another run's): ``settings`` where the run was made with
    them, or -- where it was made before some of the frame policy's fields existed, and
    ``settings`` leave those at their defaults -- ``settings`` with the record's policy, those
    fields off (FramePolicy.from_dict, as the run's own checkpoint restores its fit): an upgrade
    between two runs keeps the progress, and the clip goes on as it began."""
    record = work / "clip.json"
    if not record.is_file():
        return None
    try:
        recorded = json.loads(record.read_text())
    except (OSError, ValueError):
        recorded = None
    if recorded == settings:
        return settings
    older = _before_added_fields(recorded, settings)
    if older is not None:
        return older
    note(f"{work} holds the progress of a run with other settings or input; starting over")
    return None


def _before_added_fields(recorded, settings: dict) -> dict | None:
    """``settings`` with ``recorded``'s frame policy where ``recorded`` is these settings but for
    policy fields it lacks, each at its default in ``settings``; else None."""
    from .videofit import ADDED_OFF, FramePolicy

    old, new = (d.get("policy") if isinstance(d, dict) else None for d in (recorded, settings))
    if not isinstance(old, dict) or not isinstance(new, dict):
        return None
    added, defaults = set(new) - set(old), FramePolicy().as_dict()
    if not added or set(old) - set(new) or any(old[k] != new[k] for k in old) or \
            any(new[k] not in (defaults.get(k), ADDED_OFF.get(k)) for k in added):
        return None  # (a field set by hand now, or one the record has otherwise: another run)
    if {**recorded, "policy": new} != settings:
        return None
    return {**settings, "policy": FramePolicy.from_dict(old).as_dict()}


def start_work(work: Path, settings: dict) -> None:
    """The work folder ready for a run with ``settings`` (what it holds already is kept)."""
    make_folder(work / "scenes")
    atomic_write_bytes(work / "clip.json", json.dumps(settings, indent=1).encode("utf-8"), sync=False)


def has_scene(work: Path, k: int) -> bool:
    """Whether frame ``k``'s scene is in the work folder and loads (written without an fsync:
    after a crash of the machine one may be empty)."""
    from .scene import Scene

    try:
        Scene.load(scene_path(work, k))
    except (OSError, SceneError):
        return False
    return True


__all__ = ["CHECKPOINT_EVERY_S", "FrameLoop", "VideoResult", "run_video", "work_folder"]
