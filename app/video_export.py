"""File > Export > Video: a clip's fitted frames written as a video, with the fit still running.

The same encoder path as `trifit video`: each frame's scene rendered at the output size by
``trifit.video.FramePictures`` (on the fit worker, in short jobs: app/export_chain.py) and
handed to ``trifit.video.ClipOutput`` on a thread of its own (``trifit.background.Behind``),
which encodes into a temporary file renamed into place at the end. So a clip fitted in the
window and exported is, frame for frame and byte for byte, what the command writes from the
same settings (tests/test_gui_video.py checks). Frames fitted so far are what is written; the
sound is copied up to the last of them. Cancel, or a failure, leaves no file.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6 import QtCore

from trifit.background import Behind
from trifit.errors import TrifitError
from trifit.video import VIDEO_OUTPUTS, Clip, ClipOutput, FramePictures, output_kind

from .export_chain import JOB_BUDGET_S, ChainedExport

#: what the dialog offers
VIDEO_FILTER = "Videos (" + " ".join(f"*{s}" for s in VIDEO_OUTPUTS) + ")"
#: rendered frames waiting for the encoder
ENCODE_BEHIND = 4


class VideoExport(ChainedExport):
    """``scenes`` (frame k's scene at index k, the clip's first frames) of ``clip`` into a video
    at ``path`` (its suffix picks the encoder, as the command's) of the clip's frame size, or
    ``size``. TrifitError at once for a path no bundled encoder writes, or a folder."""

    label = "Video"

    def __init__(self, worker, path, clip: Clip, scenes: list, size: tuple[int, int] | None = None,
                 edges: str = "crisp", fit_running: Callable[[], bool] = lambda: False, *,
                 budget_s: float = JOB_BUDGET_S, parent: QtCore.QObject | None = None):
        spec = output_kind(path)
        if spec.folder:
            raise TrifitError(f"{spec.path}: a video is written to a file ({', '.join(VIDEO_OUTPUTS)}); "
                              f"`trifit video` also writes folders of frames")
        if not scenes:
            raise TrifitError("no frame of the clip is fitted yet")
        super().__init__(worker, spec.path, fit_running, budget_s=budget_s, parent=parent)
        self.spec, self.clip, self.scenes = spec, clip, list(scenes)
        self.size = spec.frame_size(*(size or clip.size))
        spec.check_frame_size(*self.size)  # (TrifitError at once, as for a bad path)
        self.edges = edges
        self.total_count = len(self.scenes)
        self.complete = len(self.scenes) == clip.count
        self.notes: list[str] = []     # what the encoder said (e.g. a sound track it cannot take)
        self._output: ClipOutput | None = None
        self._behind: Behind | None = None
        self._pictures: FramePictures | None = None

    def describe(self) -> str:
        W, H = self.size
        return f"Exporting {self.path} ({len(self.scenes)} of {self.clip.count} frames, {W} × {H} px)"

    def start(self) -> None:
        try:  # the temporary file and the container, before any job: a failure here is said at once
            self._output = ClipOutput(self.spec, self.clip, self.size, self.notes.append)
        except Exception as exc:
            self.state = "rendering"
            self._end("failed", f"{self.path}: {type(exc).__name__}: {exc}")
            return
        self._behind = Behind(ENCODE_BEHIND, name="trifit-video-encode")
        super().start()

    def join(self, timeout_s: float = 10.0) -> bool:
        """(At the window's shutdown, after the worker has ended: a cancelled export whose last
        job's answer will not come now lets its encoder go here.)"""
        if self.state == "rendering" and self._cancel.is_set():
            self._release()
        return super().join(timeout_s)

    def _release(self) -> None:
        if self._behind is not None:
            self._behind.close(abort=True)
        if self._output is not None:
            self._output.discard()

    # ------------------------------------------------------------------ worker thread
    def _render_some(self, fitter) -> tuple[int, int]:
        """Render frames for about ``budget_s``, each handed to the encoder; (frames done, in all)."""
        if self._pictures is None:
            self._pictures = FramePictures(fitter.engine, *self.size, self.edges)
        end = time.perf_counter() + self.budget_s
        done = self.done_count
        while done < self.total_count and not self._cancel.is_set():
            self._behind.call(self._output.write, done, self._pictures.of(self.scenes[done]))
            done += 1
            if time.perf_counter() >= end:
                break
        return done, self.total_count

    # ------------------------------------------------------------------ write thread
    def _write(self) -> str:
        try:
            self._behind.close()  # every frame encoded
            if self._cancel.is_set():
                self._output.discard()
                return "cancelled"
            self._output.close(complete=self.complete)
        except BaseException:
            self._output.discard()
            raise
        return "done"
