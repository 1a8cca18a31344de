"""The fit worker: a thread shell around the run loop (trifit.run.FitRun).

The GUI never touches the fitter (its methods are not thread-safe) and never waits on the GPU.
It sends commands through a thread-safe queue; the worker hands live changes to the run loop,
which applies them between chunks (and records them, with their iteration, in the scene's meta),
steps the run loop one chunk at a time, and reports back through Qt signals, which Qt delivers
on the GUI thread (queued connections). The run loop sizes chunks to ``CHUNK_TARGET_S``, which
bounds how long a live change (count, sigma, learning rate, pause) waits. What a fit computes --
its schedules, events and stops -- is the run loop's and the strategy's, as for the CLI.

A clip (File > Open on a video) is fitted through the engine's frame loop
(trifit.videorun.FrameLoop, the one `trifit video` runs): the worker steps the current frame's
run a chunk at a time like any other, and when it ends takes the frame's scene and begins the
next frame's run -- so Pause, Start, live changes, jobs and the preview work between chunks as
for a picture. The clip is opened and checked (every frame decoded) with the GPU left to the
canvas, and its frames are decoded ahead on the loop's own thread.

A plain ``threading.Thread`` (not a QThread) so that "no leaked threads" is checkable with
``threading.active_count()`` and ``join()``. GPU use is shared with the canvas through a
:class:`~app.gpu_gate.GpuGate` (see there for why).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from PySide6 import QtCore

import trifit
from trifit import FitRun, StopConditions
from trifit.run import UNCOLLAPSED

from .focus_brush import weights_from_mask
from .gpu_gate import GpuGate
from .messages import (
    AUTOSAVE_EVERY_S,
    AutosaveClock,
    AutosaveSnapshot,
    EditView,
    FitInfo,
    FitParams,
    Progress,
    VideoParams,
)

__all__ = ["AUTOSAVE_EVERY_S", "AutosaveSnapshot", "FitInfo", "FitParams", "FitWorker", "Progress", "VideoParams"]

log = logging.getLogger("trifit.app")

CHUNK_TARGET_S = 0.015  # one chunk of iterations should take about this long (a preview frame follows each)
TIMINGS_EVERY_S = 0.5   # how often per-pass timings and counters are sent to the plots
REFERENCE_PREVIEW_EVERY_S = 0.5  # reference backend: host render of the preview, at most this often
FRAME_WAIT_S = 0.1      # after a chunk, leave the GPU to the GUI for one preview frame, at most this long
EDIT_VIEW_EVERY_S = 0.1  # edit mode: how often the triangles go to the GUI (what a click picks)


# ---------------------------------------------------------------------- commands
@dataclass
class _Load:
    image: Any                          # path, PIL image or array
    params: FitParams
    source: str | None = None
    init_scene: Any = None
    start: bool = False
    resume: Any = None                  # render.checkpoint.Checkpoint: continue that fit instead
    focus: Any = None                   # a painted focus mask (app/focus_brush.py) to weigh the fit by


@dataclass
class _LoadClip:
    path: str                           # a video file or a folder of frames
    params: FitParams
    video: VideoParams
    start: bool = False
    clip: Any = None                    # trifit.video.Clip, once opened (off the GPU turn)
    error: str | None = None            # ... or why it cannot be


@dataclass
class _Live:
    kind: str                           # "triangles" | "sigma" | "lr" | "stop" | "edit" | "weights" | ...
    value: Any
    sent_at: float = field(default_factory=time.perf_counter)


@dataclass
class _Job:
    job_id: int
    fn: Callable


_RUN, _PAUSE, _RESET, _QUIT = "run", "pause", "reset", "quit"


class FitWorkerSignals(QtCore.QObject):
    loaded = QtCore.Signal(object)          # FitInfo
    progress = QtCore.Signal(object)        # Progress
    running_changed = QtCore.Signal(bool)
    stopped = QtCore.Signal(str)            # a stop condition held: the reason
    failed = QtCore.Signal(str, str)        # title, message (the current fit is untouched)
    job_done = QtCore.Signal(int, object)
    job_failed = QtCore.Signal(int, str)
    frame_started = QtCore.Signal(int, int, int, object)  # a clip's frame began: index, frames in all, the first
                                                          # frame of its shot (render/shots.py), its target
    frame_done = QtCore.Signal(int, object)          # ... and was fitted: index, its scene (render.Scene)
    applied = QtCore.Signal(str, float)     # a live change reached the fit: kind, seconds after it was sent
    autosaved = QtCore.Signal(str, int)     # where the autosave went, the iteration it holds
    autosave_failed = QtCore.Signal(str)    # why an autosave could not be written (the fit goes on)


class FitWorker:
    """Owns the engine's fitter on its own thread. Public methods are for the GUI thread."""

    def __init__(self, engine: trifit.Engine, gate: GpuGate | None = None):
        self.engine = engine
        self.gate = gate or GpuGate()
        self.signals = FitWorkerSignals()
        self._commands: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._next_job = 0
        self._callbacks: dict[int, tuple[Callable | None, Callable | None]] = {}
        self.signals.job_done.connect(self._on_job_done)
        self.signals.job_failed.connect(self._on_job_failed)
        # state below is only touched by the worker thread
        self._fitter: trifit.Fitter | None = None
        self._last_load: _Load | None = None
        self._running = False
        self._stop_rules = StopConditions()
        self._run: FitRun | None = None          # the run loop while running (stop rules from Start)
        self._steps = None                       # ... and its iterator
        self._last_timings = 0.0
        self._last_preview = 0.0
        self._params: FitParams | None = None    # the current fit's settings, live changes included
        self._clip = None                        # a clip's trifit.videorun.FrameLoop (None: a picture)
        self._focus = None                       # the painted focus mask the fit weighs by (None: none)
        self._edit_view = False                  # edit mode: send the triangles with the progress
        self._last_edit_view = 0.0
        self._autosave = AutosaveClock()

    # ------------------------------------------------------------------ GUI-thread API
    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._main, name="trifit-fit-worker", daemon=False)
        self._thread.start()

    def load(self, image, params: FitParams, *, source: str | None = None, init_scene=None,
             start: bool = False, resume=None, focus=None) -> None:
        """Build a new fit; on failure ``failed`` is emitted and the current fit stays.
        ``resume``: a checkpoint of a fit of this image to continue where it was (a crash
        restore); if it does not fit the image, the fit starts from ``init_scene`` instead."""
        if source is None and isinstance(image, str):
            source = image
        self._commands.put(_Load(image, replace(params), source, init_scene, start, resume, focus))

    def load_clip(self, path: str, params: FitParams, video: VideoParams, *, start: bool = False) -> None:
        """Fit a clip (a video file or a folder of frames) frame by frame; on failure ``failed``
        is emitted and the current fit stays. Each frame's start and end are signalled."""
        self._commands.put(_LoadClip(path, replace(params), replace(video), start))

    def run(self) -> None:
        self._commands.put(_RUN)

    def pause(self) -> None:
        self._commands.put(_PAUSE)

    def reset(self, params: FitParams, video: VideoParams | None = None) -> None:
        """A fresh fit of the current image (or clip, from its first frame) with ``params`` (seed
        and size apply here) and, for a clip, ``video``."""
        self._commands.put((_RESET, replace(params), replace(video) if video else None))

    def set_triangles(self, n: int) -> None:
        self._commands.put(_Live("triangles", int(n)))

    def set_sigma(self, sigma_px: float | None) -> None:
        self._commands.put(_Live("sigma", sigma_px))

    def set_learning_rate(self, scale: float) -> None:
        self._commands.put(_Live("lr", float(scale)))

    def set_stop_conditions(self, rules: StopConditions) -> None:
        self._commands.put(_Live("stop", replace(rules)))

    def edit(self, request: dict) -> None:
        """An edit by hand (trifit.edits: by id), at the next chunk boundary -- at once while
        paused; every one applies, in order."""
        self._commands.put(_Live("edit", request))

    def set_focus(self, mask) -> None:
        """Weigh the fit by this painted focus mask (app/focus_brush.py; None or empty: none)."""
        self._commands.put(_Live("weights", None if mask is None else np.array(mask, np.float32)))

    def set_edit_view(self, on: bool) -> None:
        """Edit mode: send the fit's triangles (an EditView) with the progress, and after every edit."""
        self._commands.put(_Live("edit_view", bool(on)))

    def configure_autosave(self, writer: Callable[[AutosaveSnapshot], Any] | None,
                            every_s: float = AUTOSAVE_EVERY_S) -> None:
        """While fitting, call ``writer(snapshot)`` on the worker thread every ``every_s`` seconds
        (and when the fit pauses or stops with iterations not yet saved); None turns it off.
        ``writer`` returns where it wrote (reported by ``autosaved``); an exception it raises is
        reported by ``autosave_failed`` and the fit goes on."""
        self._commands.put(_Live("autosave", (writer, float(every_s))))

    def submit(self, fn: Callable[[trifit.Fitter], Any], on_done: Callable | None = None,
               on_error: Callable[[str], None] | None = None) -> int:
        """Run ``fn(fitter)`` on the worker thread between chunks; callbacks run on the GUI thread."""
        self._next_job += 1
        self._callbacks[self._next_job] = (on_done, on_error)
        self._commands.put(_Job(self._next_job, fn))
        return self._next_job

    def shutdown(self, timeout_s: float = 10.0) -> bool:
        """Stop the thread (after its current chunk) and release the fit; True if it ended."""
        if self._thread is None:
            return True
        self._commands.put(_QUIT)
        self._thread.join(timeout_s)
        ended = not self._thread.is_alive()
        if ended:
            self._thread = None
        return ended

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _on_job_done(self, job_id: int, result) -> None:
        on_done, _ = self._callbacks.pop(job_id, (None, None))
        if on_done is not None:
            on_done(result)

    def _on_job_failed(self, job_id: int, message: str) -> None:
        _, on_error = self._callbacks.pop(job_id, (None, None))
        if on_error is not None:
            on_error(message)
        else:
            self.signals.failed.emit("Background task failed", message)

    # ------------------------------------------------------------------ worker thread
    def _main(self) -> None:
        try:
            while True:
                # Block while idle; while running only drain what is already queued.
                commands = self._drain(block=not (self._running and self._fitter is not None))
                if _QUIT in commands:
                    return
                for cmd in commands:  # a clip's every frame is decoded to check it: not in the GPU's turn
                    if isinstance(cmd, _LoadClip):
                        _open_clip(cmd)
                outcome = snapshot = None
                with self.gate.worker_turn():
                    try:
                        self._apply(commands)
                        if self._running and self._fitter is not None:
                            outcome = self._step_chunk()
                    except Exception as exc:  # e.g. a wgpu error: report it, keep the thread serving
                        log.exception("fit worker error")
                        self._set_running(False)
                        self.signals.failed.emit("The fit stopped", f"{type(exc).__name__}: {exc}")
                    snapshot = self._autosave_snapshot()  # the scene is read back on the device
                if outcome is not None:
                    self._publish(*outcome)
                if snapshot is not None:
                    self._write_autosave(snapshot)  # the file writes happen with the GPU released
        finally:
            if self._fitter is not None:
                with self.gate.worker_turn():
                    self._close_fit()

    def _publish(self, progress: Progress, stop_reason: str | None) -> None:
        if progress.gpu_image is not None:
            # The GPU is idle now: give the canvas its turn to draw this frame before the next
            # chunk -- unless the user already asked for something, which goes first.
            self.gate.expect_frame()
            self.signals.progress.emit(progress)
            if self._commands.empty():
                self.gate.wait_for_frame(FRAME_WAIT_S)
        else:
            self.signals.progress.emit(progress)
        if stop_reason:
            self._finish(stop_reason)

    def _drain(self, block: bool) -> list:
        out = []
        try:
            out.append(self._commands.get(timeout=0.5) if block else self._commands.get_nowait())
            while True:
                out.append(self._commands.get_nowait())
        except queue.Empty:
            pass
        return out

    def _apply(self, commands: list) -> None:
        # Live changes that pile up while a chunk runs (a spin box held down) collapse to the last
        # value of each kind, so one rebuild per kind per chunk at most.
        latest_live: dict = {}
        for k, cmd in enumerate(commands):
            if isinstance(cmd, _Live):
                key = (cmd.kind, k) if cmd.kind in UNCOLLAPSED else cmd.kind  # edits: each, in order
                latest_live.pop(key, None)
                latest_live[key] = cmd
                continue
            for live in latest_live.values():
                self._apply_live(live)
            latest_live.clear()
            if isinstance(cmd, _Load):
                self._do_load(cmd)
            elif isinstance(cmd, _LoadClip):
                self._do_load_clip(cmd)
            elif isinstance(cmd, _Job):
                self._do_job(cmd)
            elif cmd == _RUN:
                self._set_running(True)
            elif cmd == _PAUSE:
                self._set_running(False)
            elif isinstance(cmd, tuple) and cmd[0] == _RESET:
                last = self._last_load
                if isinstance(last, _LoadClip):  # the clip again from its first frame (opened and checked already)
                    self._do_load_clip(replace(last, params=cmd[1], video=cmd[2] or last.video, start=self._running))
                elif last is not None:  # a fresh fit: seed and size apply, no init scene; the focus painted stays
                    self._do_load(replace(last, params=cmd[1], init_scene=None, resume=None, start=self._running,
                                          focus=self._focus))
        for live in latest_live.values():
            self._apply_live(live)

    def _apply_live(self, cmd: _Live) -> None:
        if cmd.kind == "autosave":
            self._autosave.configure(*cmd.value)
            return
        if cmd.kind == "edit_view":
            self._edit_view = cmd.value
            self._send_edit_view()
            return
        value = cmd.value
        if cmd.kind == "weights":
            if self._fitter is None or self._clip is not None:
                return  # (a clip's frames are fitted without a focus map)
            self._focus, value = cmd.value, weights_from_mask(cmd.value)
        if cmd.kind == "stop":
            self._stop_rules = cmd.value
            if self._run is not None and self._clip is None:  # (a clip's frames end by their iterations)
                self._run.request("stop", cmd.value)
            return
        if self._fitter is None:
            return  # the next fit is built from the controls' values anyway
        if self._run is not None and self._running:  # applied by the run loop at the next chunk boundary
            self._run.request(cmd.kind, value)
        else:
            try:
                self._fitter.apply(cmd.kind, value)
            except (ValueError, trifit.TrifitError) as exc:
                self.signals.failed.emit("Cannot apply the change", str(exc))
                return
            self.signals.applied.emit(cmd.kind, time.perf_counter() - cmd.sent_at)
            if cmd.kind in ("edit", "locked"):  # paused: show the edit at once
                self._send_edit_view(render=True)
        field_name = {"triangles": "triangles", "sigma": "sigma_px", "lr": "lr_scale"}.get(cmd.kind)
        if self._params is not None and field_name is not None:
            setattr(self._params, field_name, cmd.value)

    def _set_running(self, running: bool) -> None:
        if running and self._fitter is None:
            running = False
        if running and not self._running and self._clip is not None:
            if self._clip.finished and self._run is None:
                self.signals.stopped.emit(self._clip_done())
                return
            self._autosave.started(self._fitter.iteration)
        elif running and not self._running:
            f = self._fitter
            # stop rules count from Start; with none the run goes on until paused
            self._run = FitRun(f, replace(self._stop_rules), chunk_s=CHUNK_TARGET_S, first_chunk=1)
            self._steps = iter(self._run)
            self._autosave.started(f.iteration)
        if not running and self._running:
            if self._clip is None:
                self._end_run()
            elif self._run is not None:  # the frame's run waits for Start; what it was asked applies now
                self._apply_pending(self._run)
            self._autosave.paused()
        if running != self._running:
            self._running = running
            self.signals.running_changed.emit(running)

    def _end_run(self) -> None:
        """Drop the run loop; changes it had not applied yet apply now (nothing asked is lost)."""
        run, self._run, self._steps = self._run, None, None
        if run is not None:
            self._apply_pending(run)

    def _apply_pending(self, run: FitRun) -> None:
        try:
            self._emit_applied(run.apply_pending())
        except (ValueError, trifit.TrifitError) as exc:
            self.signals.failed.emit("Cannot apply the change", str(exc))

    def _emit_applied(self, applied) -> None:
        for kind, seconds in applied:
            if kind != "stop":
                self.signals.applied.emit(kind, seconds)

    def _do_load(self, cmd: _Load) -> None:
        p = cmd.params
        try:
            fitter = self._resumed(cmd) if cmd.resume is not None else None
            if fitter is None:
                from trifit.export import sharp_settings

                fitter = trifit.Fitter(cmd.image, triangles=p.triangles, size=p.size, seed=p.seed,
                                       engine=self.engine, init_scene=cmd.init_scene, source=cmd.source,
                                       weights=weights_from_mask(cmd.focus), replicas=p.replicas, **sharp_settings(p.sharp))
                if p.sigma_px is not None:
                    fitter.set_sigma(p.sigma_px)
                if p.lr_scale != 1.0:
                    fitter.set_learning_rate(p.lr_scale)
        except (trifit.ImageError, trifit.SceneError) as exc:
            self.signals.failed.emit("Cannot open", str(exc))
            return
        except (trifit.TrifitError, ValueError, MemoryError) as exc:
            self.signals.failed.emit("Cannot start this fit", str(exc))
            return
        self._focus = None if cmd.focus is None or fitter.focus is None else _at_size(cmd.focus, fitter)
        self._install(fitter, cmd, p)
        if len(fitter.history):  # a resumed fit: its loss curve so far
            self.signals.progress.emit(Progress(None, np.array(fitter.history.iterations),
                                                np.array(fitter.history.losses), 0))
        if self.engine.backend == "reference":
            # Reference backend: show the initial triangles; the GPU path shows them after a step.
            self.signals.progress.emit(Progress(None, np.empty(0, int), np.empty(0), 0,
                                                pixels=self.engine.render(fitter.scene)))
        if cmd.start:
            self._set_running(True)

    def _install(self, fitter, cmd, params: FitParams, clip=None) -> None:
        """Only now, with the new fit built, is the old one paused and replaced."""
        self._set_running(False)
        self._end_run()
        self._close_fit()
        self._fitter, self._clip = fitter, clip
        if clip is not None:
            self._focus = None
        self._last_load = cmd
        self._params = replace(params)
        self._autosave.restart(fitter.iteration)
        self._last_timings = 0.0
        self._last_preview = 0.0
        source = cmd.path if clip is not None else cmd.source
        from trifit.export import fitted_crisp

        self.signals.loaded.emit(FitInfo(source, fitter.target.copy(), fitter.width, fitter.height,
                                         fitter.settings.triangles, self.engine.backend, fitter.iteration,
                                         clip.clip if clip is not None else None,
                                         None if self._focus is None else self._focus.copy(),
                                         fitted_crisp(fitter.settings)))
        self._send_edit_view()

    def _close_fit(self) -> None:
        if self._clip is not None:
            self._clip.close()  # its decoding thread, and the fit
        elif self._fitter is not None:
            self._fitter.close()
        self._fitter = self._clip = None

    # ------------------------------------------------------------------ a clip
    def _do_load_clip(self, cmd: _LoadClip) -> None:
        if cmd.error is not None:
            self.signals.failed.emit("Cannot open video", cmd.error)
            return
        from trifit.videofit import FramePolicy
        from trifit.videorun import FrameLoop

        p, v, loop = cmd.params, cmd.video, None
        try:
            loop = FrameLoop.start(cmd.clip, size=p.size, triangles=p.triangles, seed=p.seed, engine=self.engine,
                                   first_iters=v.first_frame_iters, frame_iters=v.iters_per_frame, source=cmd.path,
                                   policy=FramePolicy(steady=v.steady))
            run = loop.begin(chunk_s=CHUNK_TARGET_S, first_chunk=1)  # the first frame's fit: built, not run
            if p.sigma_px is not None:
                loop.fitter.set_sigma(p.sigma_px)
            if p.lr_scale != 1.0:
                loop.fitter.set_learning_rate(p.lr_scale)
        except (trifit.TrifitError, ValueError, MemoryError) as exc:
            if loop is not None:
                loop.close()
            self.signals.failed.emit("Cannot open video", str(exc))
            return
        self._install(loop.fitter, cmd, p, loop)
        self._run, self._steps = run, iter(run)
        self.signals.frame_started.emit(0, cmd.clip.count, 0, loop.target)
        if cmd.start:
            self._set_running(True)

    def _begin_frame(self) -> bool:
        """The clip's next frame: its run (False when its frame cannot be had: said, and paused)."""
        loop = self._clip
        try:
            self._run = loop.begin(chunk_s=CHUNK_TARGET_S, first_chunk=1)
        except (trifit.TrifitError, ValueError, OSError) as exc:  # e.g. the file changed since it was checked
            self._set_running(False)
            self.signals.failed.emit("The video stopped", f"frame {loop.next + 1}: {exc}")
            return False
        self._fitter = loop.fitter  # (a new shot's frame has a fit of its own: the last one's is closed)
        self._steps = iter(self._run)
        self.signals.frame_started.emit(loop.next, loop.clip.count, loop.fit.shot, loop.target)
        return True

    def _end_frame(self) -> str | None:
        """The frame's run has ended: its scene out; the clip's end as a stop reason, else None."""
        loop, run = self._clip, self._run
        k, scene = loop.next, loop.end()
        self._run = self._steps = None
        self._apply_pending(run)  # changes asked during its last chunk: from the next frame on
        if scene is None:
            self._set_running(False)
            self.signals.failed.emit("The video stopped", f"frame {k + 1} did not reach its iterations")
            return None
        self.signals.frame_done.emit(k, scene)
        return self._clip_done() if loop.finished else None

    def _clip_done(self) -> str:
        n = self._clip.clip.count
        return f"end of the clip: its {n} frames are fitted (File > Export > Video writes them)"

    def _resumed(self, cmd: _Load):
        """The checkpointed fit, continued; None (logged) when the checkpoint does not fit the
        image as it is now -- the caller then starts from the saved scene."""
        try:
            return trifit.Fitter.resume(cmd.image, cmd.resume, engine=self.engine, source=cmd.source,
                                        weights=weights_from_mask(cmd.focus))
        except trifit.TrifitError as exc:
            if isinstance(exc, trifit.ImageError):
                raise
            log.warning("cannot resume the checkpointed fit (%s); starting from its saved scene", exc)
            return None

    def _do_job(self, job: _Job) -> None:
        if self._fitter is None:
            self.signals.job_failed.emit(job.job_id, "there is no fit yet")
            return
        try:
            result = job.fn(self._fitter)
        except Exception as exc:  # a job's failure is reported, never fatal to the worker
            log.debug("job failed: %s", traceback.format_exc())
            self.signals.job_failed.emit(job.job_id, f"{type(exc).__name__}: {exc}")
        else:
            self.signals.job_done.emit(job.job_id, result)

    def _step_chunk(self) -> tuple[Progress, str | None] | None:
        """One chunk of the run loop; returns what to publish once the GPU is released."""
        if self._clip is not None and self._steps is None and not self._begin_frame():
            return None
        f = self._fitter  # (after a clip's next frame began: a new shot's is a fit of its own)
        try:
            step = next(self._steps)
        except StopIteration:
            self._set_running(False)
            return None
        except (trifit.TrifitError, ValueError) as exc:
            self._set_running(False)
            self.signals.failed.emit("The fit stopped", str(exc))
            return None
        self._emit_applied(step.applied)
        if self._clip is not None and step.reason:  # the frame's iterations are done: on to the next
            step.reason = self._end_frame()
        if step.chunk == 0 and step.reason:
            self._finish(step.reason)
            return None
        progress = Progress(step.stats, step.iterations, step.losses, step.chunk)
        now = time.perf_counter()
        if now - self._last_timings >= TIMINGS_EVERY_S:
            self._last_timings = now
            progress.timings = f.timings()
        if self._edit_view and now - self._last_edit_view >= EDIT_VIEW_EVERY_S:
            self._last_edit_view = now
            progress.triangles = self._edit_view_now()
        image = f.gpu_image()  # (None after an event that made another loop current: the canvas keeps its frame)
        if image is not None:
            progress.gpu_image = image
        elif self.engine.backend == "reference" and now - self._last_preview >= REFERENCE_PREVIEW_EVERY_S:
            self._last_preview = now
            progress.pixels = self.engine.render(f.scene)
        return progress, step.reason

    def _autosave_snapshot(self) -> AutosaveSnapshot | None:
        """The fit to autosave, when a save is due (AutosaveClock)."""
        f = self._fitter
        if f is None or self._clip is not None or not self._autosave.due(f.iteration):
            return None  # (a clip is not autosaved: reopening it starts it over)
        try:
            scene = f.scene
            checkpoint = f.checkpoint()
        except Exception as exc:  # a failed readback must not stop the fit; try again next period
            log.warning("autosave: cannot read the scene back (%s: %s)", type(exc).__name__, exc)
            return None
        self._autosave.saved_iteration = f.iteration
        return AutosaveSnapshot(scene, self._last_load.source if self._last_load else None,
                                replace(self._params) if self._params else FitParams(),
                                replace(self._stop_rules), f.iteration, f.n_triangles,
                                self.engine.backend, self._running, checkpoint,
                                None if self._focus is None else self._focus.copy())

    def _write_autosave(self, snapshot: AutosaveSnapshot) -> None:
        try:
            where = self._autosave.writer(snapshot)
        except Exception as exc:  # a full disk or a read-only folder: say so, keep fitting
            log.warning("autosave failed: %s: %s", type(exc).__name__, exc)
            self.signals.autosave_failed.emit(f"{type(exc).__name__}: {exc}")
            return
        if where is not None:
            self.signals.autosaved.emit(str(where), snapshot.iteration)

    def _edit_view_now(self) -> EditView:
        f = self._fitter
        tris, sigma, ids = f.triangles_now()
        return EditView(tris, ids, [ids[i] for i in f.locked], sigma, f.iteration)

    def _send_edit_view(self, render: bool = False) -> None:
        """Edit mode, between chunks: the triangles as they are now (and, ``render``: the render
        of them, when the fit is paused and its last image does not show an edit yet)."""
        if not self._edit_view or self._fitter is None:
            return
        view = self._edit_view_now()
        pixels = None
        if render:
            f = self._fitter
            _, bg, _ = f.values()
            pixels = self.engine.render(trifit.Scene(f.width, f.height, view.sigma, np.clip(bg[0], 0, 1),
                                                     view.triangles)).astype(np.float32)
        self._last_edit_view = time.perf_counter()
        self.signals.progress.emit(Progress(None, np.empty(0, int), np.empty(0), 0, pixels=pixels, triangles=view))

    def _finish(self, reason: str) -> None:
        self._set_running(False)
        self.signals.stopped.emit(reason)


def _at_size(mask, fitter) -> np.ndarray:
    """A painted mask at the fit's working size (a reset may change the size)."""
    m = np.asarray(mask, np.float32)
    if m.shape == (fitter.height, fitter.width):
        return m
    from trifit.focus import focus_map

    return focus_map(m, (fitter.height, fitter.width)).astype(np.float32)


def _open_clip(cmd: _LoadClip) -> None:
    """Open and check a clip (every frame decoded once) into ``cmd``; why not, in one line."""
    if cmd.clip is not None or cmd.error is not None:
        return
    try:
        from trifit.video import open_clip

        cmd.clip = open_clip(cmd.path)
    except trifit.TrifitError as exc:  # unreadable, truncated, no frames, mixed sizes, no PyAV
        cmd.error = str(exc)
    except Exception as exc:  # never a traceback for a bad file
        log.debug("open_clip: %s", traceback.format_exc())
        cmd.error = f"{Path(cmd.path).name}: cannot read it as a video ({type(exc).__name__}: {exc})"
