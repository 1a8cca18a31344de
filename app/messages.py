"""What the fit worker (app/worker.py) and the GUI thread pass each other."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from trifit import StopConditions

AUTOSAVE_EVERY_S = 30.0  # default autosave period while fitting (app/session.py; TRIFIT_AUTOSAVE_SECONDS)


@dataclass
class FitParams:
    """What a new fit is built from; triangles, sigma and lr also change a running fit."""

    triangles: int = 150
    size: int = 176
    seed: int = 0
    sigma_px: float | None = None   # None: the fitter's annealing schedule
    lr_scale: float = 1.0
    replicas: int = 0               # the image's replicas side by side (a new fit's; 0: the fit's own
                                    # choice, render/replicas.py auto_replicas)
    sharp: bool = False             # a new picture's fit for crisp pictures (`trifit fit --sharp`:
                                    # export.SHARP_SETTINGS); a clip's frames always are


@dataclass
class VideoParams:
    """How a clip is fitted (File > Open on a video; applies on Reset or a new clip): the first
    frame's full fit, then each later frame's iterations from the previous frame's state."""

    iters_per_frame: int = 100
    first_frame_iters: int = 600
    steady: float = 0.0      # the temporal term's W (`trifit video --steady W`); 0: off


@dataclass
class FitInfo:
    """Sent when a new fit exists (new image or clip, reset, scene opened)."""

    source: str | None
    target: np.ndarray          # float32 (H, W, 3) at the working size (a clip: its first frame's)
    width: int
    height: int
    triangles: int              # the count asked for (the fitter may start with fewer and grow)
    backend: str
    iteration: int
    clip: Any = None            # a clip's trifit.video.Clip (frames, size, rate), None for a picture
    focus: np.ndarray | None = None  # the focus mask painted (app/focus_brush.py) the fit weighs by, if any
    crisp: bool = False         # the fit is made for crisp pictures (Sharp edges, a clip's frames: export.fitted_crisp)


@dataclass
class Progress:
    """Sent after every chunk."""

    stats: Any                        # trifit.fitter.StepStats; None for a preview-only message
    iterations: np.ndarray            # the chunk's iteration numbers
    losses: np.ndarray                # and their losses
    chunk: int                        # iterations in this chunk
    timings: dict | None = None       # fitter.timings(), at most every TIMINGS_EVERY_S
    gpu_image: tuple | None = None    # (buffer, W, H, first float) on the shared device
    pixels: np.ndarray | None = None  # reference backend preview (float32 H x W x 3)
    triangles: Any = None             # edit mode: trifit.edits' view of the fit now, an EditView


@dataclass
class EditView:
    """What edit mode picks and outlines from (app/edit_tool.py): the fit's triangles as it holds
    them (painting order), their ids, the locked ones' ids, the sigma (frame units)."""

    triangles: np.ndarray       # (T, 10)
    ids: list
    locked: list
    sigma: float
    iteration: int


@dataclass
class AutosaveSnapshot:
    """What the autosave writer gets (on the worker thread): the fit as it is now."""

    scene: Any                  # render.Scene (read back from the device, with meta)
    source: str | None          # the target image the fit was opened from
    params: FitParams           # the settings it runs with, live changes included
    stop: StopConditions
    iteration: int
    n_triangles: int            # triangles in the scene now (the fitter may still be growing)
    backend: str
    running: bool
    checkpoint: Any = None      # render.checkpoint.Checkpoint: what a restore resumes from exactly
    focus: np.ndarray | None = None  # the focus mask painted (float32 at the working size), if any


class AutosaveClock:
    """When the worker's fit is due for an autosave: ``every_s`` seconds of fitting since the
    last one, or at the next chance after a pause or stop -- and never twice for one iteration.
    Owned and called by the worker thread alone."""

    def __init__(self, every_s: float = AUTOSAVE_EVERY_S):
        self.writer = None
        self.every_s = every_s
        self._t = 0.0            # when the last autosave was written (or the clock restarted)
        self.saved_iteration = 0  # the iteration it held
        self._now = False         # write at the next chance (the fit was paused or stopped)

    def configure(self, writer, every_s: float) -> None:
        self.writer, self.every_s = writer, every_s
        self._t = time.perf_counter()

    def restart(self, iteration: int) -> None:
        """A new fit, saved as it is (nothing to write until it runs)."""
        self._t, self.saved_iteration, self._now = time.perf_counter(), iteration, False

    def started(self, iteration: int) -> None:
        if iteration == self.saved_iteration:
            self._t = time.perf_counter()  # nothing unsaved: the period starts now

    def paused(self) -> None:
        self._now = True  # save what the fit has (if anything is new)

    def due(self, iteration: int) -> bool:
        """Whether to save now; if so the period restarts (the caller then saves or retries later)."""
        if self.writer is None or self.every_s <= 0:
            return False
        if iteration == self.saved_iteration:
            self._now = False
            return False
        if not (self._now or time.perf_counter() - self._t >= self.every_s):
            return False
        self._now, self._t = False, time.perf_counter()
        return True
