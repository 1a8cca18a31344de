"""A segmented clip on a Dask cluster: ``trifit video IN -o OUT --segment K --dask local[:N] | tcp://HOST:PORT``.

The connection, the local cluster, the workers' one engine each, their checks and the error
messages are render/cluster.py's (``trifit batch --dask``); this module adds the video's task
and its driver loop. One task per segment (render/videoseg.py): the driver decodes the clip and
sends the segment's targets at the fit size; the task (:func:`segment_task`, on a worker) fits
them with render/videoseg.py's ``fit_segment`` -- the function the local segmented run calls --
on the worker's engine and sends back, per frame, the scene's JSON and the output frame's pixels
at the output size, so the driver needs no GPU and writes the bytes a local ``--segment K`` run
writes on the same adapter kind. A kept segment whose output frames are missing (a re-run into a
video file) is a render-only task from its stored scenes.

At most :data:`~trifit.cluster.IN_FLIGHT_PER_SLOT` tasks per GPU slot are out, counting the
segments finished early whose frames wait for an earlier one (so a slow segment holds the
clip's memory back rather than letting it fill). A worker that dies mid-segment has its task run
again on another (the scheduler's allowed-failures, as the batch's); the driver writes a
segment's frames when its task first completes, so each frame once. A segment that cannot be
fitted (its workers died too often, or the fit raised) ends the run with one line: the frames
written so far stay in the work folder, and a re-run goes on from there. Ctrl+C: the first stops
taking results (the output keeps every frame written, in order), a second stops at once.
"""

from __future__ import annotations

import time
import uuid
import warnings
from collections.abc import Callable, Iterator

from .cluster import IN_FLIGHT_PER_SLOT, RETRIES, ClusterError, Submissions, gpu_slots, ready_engine, task_failure

#: seconds between looks at the tasks out (and at a Ctrl+C)
POLL_S = 0.05


def segment_task(start: int, targets, scenes, options: dict) -> dict:
    """A Dask task: fit a segment from its ``targets`` (or, given its stored ``scenes``, render
    them); returns ``{"frames": [(k, scene JSON or None, pixels, psnr or None), ...]}`` or
    ``{"fatal": message}`` when this worker cannot fit at all."""
    from .videoseg import fit_segment, render_segment

    engine, fatal = ready_engine(options)
    if fatal:
        return {"fatal": fatal}
    if scenes is not None:
        return {"frames": [(k, None, pixels, None) for k, pixels in
                           enumerate(render_segment(scenes, options, engine), start)]}
    return {"frames": list(fit_segment(targets, start, options, engine))}


def fit_on_cluster(client, jobs: Iterator[tuple], options: dict, deliver: Callable, control,
                   backlog: Callable[[], int], *, backend: str) -> None:
    """Run ``jobs`` (render/videoseg.py's: ``(start, end, targets, scenes)`` in the clip's order)
    as tasks of ``client``'s cluster; ``deliver(frames)`` each one's frames as it completes, on
    this thread, until all are done or ``control`` is cancelled. ``backlog()``: segments delivered
    but not yet written."""
    from . import __version__

    options = {**options, "backend": backend, "version": __version__}
    run = uuid.uuid4().hex[:8]
    out: dict = {}  # future -> its job
    tries = Submissions()  # per segment (its first frame)

    def submit(job) -> None:
        start, end, targets, scenes = job
        with warnings.catch_warnings():
            # a segment's frames travel in its task, not scattered ahead: scattered data dies with the
            # worker holding it, and a task must survive its worker. (Dask calls a task over 10 MiB large.)
            warnings.filterwarnings("ignore", "Sending large graph", UserWarning)
            future = client.submit(segment_task, start, targets, scenes, options,
                                   key=tries.key(f"trifit-video-{run}-{start}", start), resources={"GPU": 1},
                                   retries=RETRIES, pure=False)
        out[future] = job

    def refill() -> None:
        window = max(2, IN_FLIGHT_PER_SLOT * gpu_slots(client))
        while len(out) + backlog() < window:
            job = next(jobs, None)
            if job is None:
                return
            submit(job)

    try:
        refill()
        while out and not control.cancelled:
            finished = [f for f in out if f.done()]
            if not finished:
                time.sleep(POLL_S)
                continue
            for future in finished:
                job = out.pop(future)
                start, end = job[:2]
                if tries.again(future, start):
                    submit(job)
                    continue
                try:
                    reply = _reply(future, start, end)
                finally:
                    future.release()  # held, a result lost with its worker would be fitted again for nothing
                deliver(reply["frames"])
                if control.cancelled:
                    return
            refill()
    finally:
        if out:
            client.cancel(list(out))


def _reply(future, start: int, end: int) -> dict:
    error = task_failure(future, "them")
    if error is not None:
        raise ClusterError(f"frames {start}-{end - 1}: {error}")
    reply = future.result()
    if "fatal" in reply:
        raise ClusterError(reply["fatal"])
    return reply


__all__ = ["fit_on_cluster", "segment_task"]
