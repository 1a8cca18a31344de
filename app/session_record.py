"""The autosave's on-disk record (app/session.py writes it): where it lives, the environment
that steers it, and reading a crashed session's record back -- every value checked, a damaged
record refused whole."""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from PySide6 import QtCore

import trifit
from trifit import StopConditions
from trifit.checkpoint import CheckpointError, load_checkpoint
from trifit.fitter import MAX_TRIANGLES_FIT
from trifit.imageio import MAX_WORKING_SIZE
from trifit.limits import MAX_REPLICAS

from .messages import AUTOSAVE_EVERY_S, FitParams

log = logging.getLogger("trifit.app")

DATA_DIR_ENV = "TRIFIT_DATA_DIR"
AUTOSAVE_ENV = "TRIFIT_AUTOSAVE_SECONDS"
RESTORE_ENV = "TRIFIT_RESTORE"

SESSION_FORMAT = "trifit-session"
SESSION_VERSION = 1
SESSION_FILE = "session.json"
SCENE_FILE = "scene.json"
CHECKPOINT_FILE = "state.npz"
FOCUS_FILE = "focus.npy"   # the focus mask painted (app/focus_brush.py), when there is one
LOCK_FILE = "lock"
FOLDER_PREFIX = "session-"
DAMAGED_PREFIX = "damaged-"
MAX_SESSION_BYTES = 1 << 20


class SessionDamaged(Exception):
    """An autosave that cannot be used (reason in the message)."""


# ---------------------------------------------------------------------- environment
def data_dir() -> Path | None:
    """``TRIFIT_DATA_DIR``, else the platform's per-user application data folder (None if Qt
    knows none). Call after the QApplication has its organization and application names."""
    override = os.environ.get(DATA_DIR_ENV, "").strip()
    if override:
        return Path(override).expanduser()
    location = QtCore.QStandardPaths.writableLocation(QtCore.QStandardPaths.StandardLocation.AppDataLocation)
    return Path(location) if location else None


def autosave_interval() -> float:
    """The autosave period from ``TRIFIT_AUTOSAVE_SECONDS`` (default 30 s; <= 0: off)."""
    raw = os.environ.get(AUTOSAVE_ENV, "").strip()
    if not raw:
        return AUTOSAVE_EVERY_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value):
        log.warning("%s=%r is not a number of seconds; autosaving every %g s", AUTOSAVE_ENV, raw,
                    AUTOSAVE_EVERY_S)
        return AUTOSAVE_EVERY_S
    return value


def restore_answer_from_env() -> bool | None:
    """``TRIFIT_RESTORE``: True (yes), False (no) or None (ask)."""
    raw = os.environ.get(RESTORE_ENV, "").strip().lower()
    if raw in ("yes", "y", "1", "true"):
        return True
    if raw in ("no", "n", "0", "false"):
        return False
    if raw not in ("", "ask"):
        log.warning("%s=%r: expected yes or no; asking", RESTORE_ENV, raw)
    return None


# ---------------------------------------------------------------------- a crashed session
@dataclass
class CrashedSession:
    """An autosave left by a window that did not quit normally; its folder lock is held."""

    folder: Path
    record: dict
    scene: trifit.Scene
    params: FitParams
    stop: StopConditions
    lock: Any  # QtCore.QLockFile
    checkpoint: Any = None  # render.checkpoint.Checkpoint of the fit at the record's iteration, if usable
    focus: Any = None       # the focus mask painted (float32 (H, W) in [0, 1]), if the session had one

    @property
    def source(self) -> str:
        return self.record["source"]

    @property
    def iteration(self) -> int:
        return int(self.record.get("iteration", 0))

    @property
    def saved_at(self) -> float:
        return float(self.record.get("saved_at_unix", 0.0))

    @property
    def scene_path(self) -> Path:
        return self.folder / SCENE_FILE

    def describe(self) -> str:
        when = datetime.fromtimestamp(self.saved_at).strftime("%Y-%m-%d %H:%M:%S") if self.saved_at else "?"
        placed = self.scene.n_triangles
        count = f"{self.params.triangles} triangles" + (f" ({placed} placed so far)"
                                                         if placed != self.params.triangles else "")
        return f"image {Path(self.source).name}, {count}, iteration {self.iteration}, autosaved {when}"


def _number(value, name: str, *, integer: bool = False, low: float | None = None,
            high: float | None = None, optional: bool = False):
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise SessionDamaged(f"{name} must be {'an integer' if integer else 'a number'}, got {value!r}")
    if not math.isfinite(value) or (low is not None and value < low) or (high is not None and value > high):
        raise SessionDamaged(f"{name} is out of range: {value!r}")
    return value


def _flag(value, name: str) -> bool:
    if not isinstance(value, bool):
        raise SessionDamaged(f"{name} must be true or false, got {value!r}")
    return value


def params_from_record(record: dict) -> tuple[FitParams, StopConditions]:
    p = record.get("params")
    if not isinstance(p, dict):
        raise SessionDamaged("no 'params' object")
    params = FitParams(
        triangles=_number(p.get("triangles"), "params.triangles", integer=True, low=1, high=MAX_TRIANGLES_FIT),
        size=_number(p.get("size"), "params.size", integer=True, low=1, high=MAX_WORKING_SIZE),
        seed=_number(p.get("seed", 0), "params.seed", integer=True, low=0),
        sigma_px=_number(p.get("sigma_px"), "params.sigma_px", low=1e-6, high=1000, optional=True),
        lr_scale=_number(p.get("lr_scale", 1.0), "params.lr_scale", low=1e-6, high=100),
        replicas=_number(p.get("replicas", 0), "params.replicas", integer=True, low=0, high=MAX_REPLICAS),
        sharp=_flag(p.get("sharp", False), "params.sharp"),
    )
    s = record.get("stop") or {}
    if not isinstance(s, dict):
        raise SessionDamaged("'stop' must be an object")
    stop = StopConditions(
        iterations=_number(s.get("iterations"), "stop.iterations", integer=True, low=1, optional=True),
        time_limit=_number(s.get("time_limit"), "stop.time_limit", low=0, optional=True),
        target_psnr=_number(s.get("target_psnr"), "stop.target_psnr", optional=True),
        plateau=_number(s.get("plateau"), "stop.plateau", integer=True, low=1, optional=True),
    )
    return params, stop


def read_session_record(folder: Path) -> dict | None:
    """The validated ``session.json`` of ``folder``; None when the folder holds no session yet.
    Raises :class:`SessionDamaged` for anything unusable."""
    path = folder / SESSION_FILE
    if not path.exists():
        if (folder / SCENE_FILE).exists():
            raise SessionDamaged(f"{SCENE_FILE} without {SESSION_FILE}")
        return None
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_SESSION_BYTES + 1)
    except OSError as exc:
        raise SessionDamaged(f"cannot read {path.name}: {exc.strerror or exc}") from None
    if len(raw) > MAX_SESSION_BYTES:
        raise SessionDamaged(f"{path.name} is larger than a session file can be")
    try:
        record = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise SessionDamaged(f"{path.name} is not valid JSON ({exc})") from None
    if not isinstance(record, dict) or record.get("format") != SESSION_FORMAT:
        raise SessionDamaged(f"{path.name} is not a trifit session file")
    if record.get("version") != SESSION_VERSION:
        raise SessionDamaged(f"{path.name} has version {record.get('version')!r}, "
                             f"this software reads {SESSION_VERSION}")
    if not isinstance(record.get("source"), str) or not record["source"]:
        raise SessionDamaged(f"{path.name} names no target image")
    if not isinstance(record.get("clean_exit"), bool):
        raise SessionDamaged(f"{path.name} has no clean_exit flag")
    _number(record.get("iteration", 0), "iteration", integer=True, low=0)
    _number(record.get("saved_at_unix", 0.0), "saved_at_unix", low=0)
    return record


def checkpoint_of(folder: Path, record: dict):
    """The folder's checkpoint when it is usable and of the record's iteration, else None (logged:
    the restore then starts from the saved scene, as before checkpoints existed)."""
    path = folder / CHECKPOINT_FILE
    if not path.exists():
        return None
    try:
        ck = load_checkpoint(path)
    except CheckpointError as exc:
        log.warning("ignoring the autosave's checkpoint (%s); a restore starts from its scene", exc)
        return None
    if ck.iteration != int(record.get("iteration", -1)) or ck.state["batch"] != 1:
        log.warning("ignoring the autosave's checkpoint (iteration %d, the session's is %s); a restore "
                    "starts from its scene", ck.iteration, record.get("iteration"))
        return None
    return ck


def focus_of(folder: Path, record: dict):
    """The session's painted focus mask (float32 at the record's working size), or None: none
    was painted, or the file is not a usable mask (logged; the restore goes on without it)."""
    name = record.get("focus_file")
    if name is None:
        return None
    try:
        if name != FOCUS_FILE:
            raise ValueError(f"unexpected focus_file {name!r}")
        mask = np.load(folder / FOCUS_FILE, allow_pickle=False)
        shape = (int(record.get("height", -1)), int(record.get("width", -1)))
        if mask.dtype != np.float32 or mask.shape != shape or not np.all(np.isfinite(mask)) or mask.min() < 0 \
                or mask.max() > 1:
            raise ValueError(f"a {mask.dtype} mask of shape {mask.shape}, the session's frame is {shape[::-1]}")
    except (OSError, ValueError, TypeError) as exc:
        log.warning("ignoring the autosave's focus mask (%s); the restore has none", exc)
        return None
    return mask


# ---------------------------------------------------------------------- the store
