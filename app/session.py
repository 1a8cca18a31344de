"""Autosave and crash recovery of the GUI session (issue #7, "nothing lost").

While a fit runs, the fit worker hands a snapshot of it to :meth:`SessionStore.save` every
``TRIFIT_AUTOSAVE_SECONDS`` (default 30) seconds of fitting and when the fit pauses or stops;
the store writes it to the user's data directory::

    <data>/autosave/session-<date>-<time>-<pid>/
        scene.json     the scene (the trifit scene format; File > Open scene can read it)
        session.json   what the fit was made from: target image (absolute path), working size,
                       triangle count, seed, sigma, learning-rate scale, stop rules, iteration,
                       time, software version, pid, "clean_exit": false
        lock           a QLockFile held while the window lives (pid, process name, host, boot id)

Both files are written atomically (a temporary file renamed over the old one), scene first, so
a ``kill -9`` at any moment leaves the previous complete pair or the new one. A normal quit
deletes the folder. At the next start, a folder whose lock is stale (its process is gone) and
whose ``session.json`` says ``clean_exit: false`` is a crashed session: the window offers to
restore it (the newest one, if several). One folder per running window, so two trifit windows
never write over each other's autosave, and a window never offers a live one's session.

Damaged autosaves (unreadable JSON, a scene that fails validation) are logged and set aside as
``damaged-...`` folders, never fatal. Sessions whose target image is gone are logged and left
alone (their scene.json can still be opened by hand).

Environment:
    ``TRIFIT_DATA_DIR``          the data directory (default: QStandardPaths AppDataLocation)
    ``TRIFIT_AUTOSAVE_SECONDS``  the autosave period in seconds of fitting; 0 turns autosave off
    ``TRIFIT_RESTORE``           ``yes`` / ``no`` answers the restore question without asking
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import threading
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from PySide6 import QtCore

import render
from render import StopConditions
from render.fileutil import atomic_write_bytes
from render.fitter import MAX_TRIANGLES_FIT
from render.imageio import MAX_WORKING_SIZE

from .worker import AUTOSAVE_EVERY_S, AutosaveSnapshot, FitParams

log = logging.getLogger("trifit.app")

DATA_DIR_ENV = "TRIFIT_DATA_DIR"
AUTOSAVE_ENV = "TRIFIT_AUTOSAVE_SECONDS"
RESTORE_ENV = "TRIFIT_RESTORE"

SESSION_FORMAT = "trifit-session"
SESSION_VERSION = 1
SESSION_FILE = "session.json"
SCENE_FILE = "scene.json"
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
    scene: render.Scene
    params: FitParams
    stop: StopConditions
    lock: Any  # QtCore.QLockFile

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


def _params_from_record(record: dict) -> tuple[FitParams, StopConditions]:
    p = record.get("params")
    if not isinstance(p, dict):
        raise SessionDamaged("no 'params' object")
    params = FitParams(
        triangles=_number(p.get("triangles"), "params.triangles", integer=True, low=1, high=MAX_TRIANGLES_FIT),
        size=_number(p.get("size"), "params.size", integer=True, low=1, high=MAX_WORKING_SIZE),
        seed=_number(p.get("seed", 0), "params.seed", integer=True, low=0),
        sigma_px=_number(p.get("sigma_px"), "params.sigma_px", low=1e-6, high=1000, optional=True),
        lr_scale=_number(p.get("lr_scale", 1.0), "params.lr_scale", low=1e-6, high=100),
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


# ---------------------------------------------------------------------- the store
class SessionStore:
    """The autosave folders under ``root`` (``<data>/autosave``).

    GUI thread: :meth:`find_crashed`, :meth:`adopt`, :meth:`discard`, :meth:`release`,
    :meth:`close_clean`. Worker thread: :meth:`save` (the fit worker's autosave writer).
    """

    def __init__(self, root: str | os.PathLike, interval_s: float = AUTOSAVE_EVERY_S):
        self.root = Path(root)
        self.interval_s = float(interval_s)
        self._mutex = threading.Lock()
        self._folder: Path | None = None   # this window's folder, made at the first save
        self._lock = None                  # its QLockFile
        self._closed = False
        self.saves = 0                     # autosaves written (for tests and the status bar)

    @classmethod
    def from_environment(cls) -> SessionStore | None:
        """The store in the user's data directory (``TRIFIT_DATA_DIR`` overrides); None when
        autosave is off (``TRIFIT_AUTOSAVE_SECONDS=0``) or there is no data directory."""
        interval = autosave_interval()
        if interval <= 0:
            log.info("autosave is off (%s=%s)", AUTOSAVE_ENV, os.environ.get(AUTOSAVE_ENV))
            return None
        base = data_dir()
        if base is None:
            log.warning("no per-user data directory: the session is not autosaved")
            return None
        return cls(base / "autosave", interval)

    @property
    def folder(self) -> Path | None:
        """This window's autosave folder (None until the first save or an adoption)."""
        return self._folder

    # ------------------------------------------------------------------ start-up
    def find_crashed(self) -> list[CrashedSession]:
        """Sessions left by windows that did not quit normally, newest first; their folder locks
        are held until :meth:`adopt`, :meth:`discard` or :meth:`release`. Never raises."""
        found: list[CrashedSession] = []
        try:
            folders = sorted(p for p in self.root.glob(FOLDER_PREFIX + "*") if p.is_dir())
        except OSError as exc:
            log.warning("cannot look for autosaved sessions in %s: %s", self.root, exc)
            return found
        for folder in folders:
            if folder == self._folder:
                continue
            try:
                crashed = self._inspect(folder)
            except Exception as exc:  # belt and braces: a start-up check must never stop the app
                log.warning("ignoring the autosave in %s: %s: %s", folder, type(exc).__name__, exc)
                continue
            if crashed is not None:
                found.append(crashed)
        found.sort(key=lambda c: c.saved_at, reverse=True)
        return found

    def _inspect(self, folder: Path) -> CrashedSession | None:
        lock = QtCore.QLockFile(str(folder / LOCK_FILE))
        lock.setStaleLockTime(0)  # stale only when its process is gone, however old
        if not lock.tryLock(0):
            return None  # a running trifit window owns it
        _remove_temporaries(folder)
        try:
            record = read_session_record(folder)
            if record is None or record["clean_exit"]:
                lock.unlock()
                _remove_folder(folder)
                return None
            params, stop = _params_from_record(record)
            try:
                scene = render.Scene.load(folder / SCENE_FILE)
            except render.SceneError as exc:
                raise SessionDamaged(str(exc)) from None
            if scene.n_triangles < 1:
                raise SessionDamaged(f"{SCENE_FILE} holds no triangles")
        except SessionDamaged as exc:
            lock.unlock()
            aside = _set_aside(folder)
            log.warning("ignoring a damaged autosave (%s); moved to %s", exc, aside or folder)
            return None
        if not Path(record["source"]).is_file():
            lock.unlock()
            log.warning("an autosaved session cannot be restored: its image %s is gone "
                        "(the scene is in %s)", record["source"], folder / SCENE_FILE)
            return None
        return CrashedSession(folder, record, scene, params, stop, lock)

    def adopt(self, crashed: CrashedSession) -> None:
        """Continue ``crashed`` in this window: later autosaves go to its folder (so its files
        stay until the restored fit's first autosave replaces them)."""
        with self._mutex:
            old_folder, old_lock = self._folder, self._lock
            self._folder, self._lock = crashed.folder, crashed.lock
        if old_folder is not None and old_folder != crashed.folder:
            if old_lock is not None:
                old_lock.unlock()
            _remove_folder(old_folder)

    def discard(self, crashed: CrashedSession) -> None:
        """Delete a crashed session (the user declined to restore it)."""
        crashed.lock.unlock()
        _remove_folder(crashed.folder)

    def release(self, crashed: CrashedSession) -> None:
        """Leave a crashed session for a later start."""
        crashed.lock.unlock()

    # ------------------------------------------------------------------ while fitting
    def save(self, snap: AutosaveSnapshot) -> Path | None:
        """Write the snapshot (scene.json, then session.json, each atomically); returns the folder.
        Runs on the fit worker's thread; raises OSError on a write failure."""
        if not snap.source:
            log.debug("autosave skipped: the fit has no image file to restore it from")
            return None
        with self._mutex:
            if self._closed:
                return None
            folder = self._ensure_folder()
            source = os.path.abspath(snap.source)
            scene = snap.scene
            scene.meta["source"] = source  # so File > Open scene finds the image from anywhere
            scene.save(folder / SCENE_FILE)
            now = time.time()
            record = {
                "format": SESSION_FORMAT,
                "version": SESSION_VERSION,
                "software": f"trifit {render.__version__}",
                "saved_at": datetime.fromtimestamp(now, UTC).isoformat(timespec="seconds"),
                "saved_at_unix": now,
                "pid": os.getpid(),
                "clean_exit": False,
                "source": source,
                "scene_file": SCENE_FILE,
                "iteration": int(snap.iteration),
                "triangles_placed": int(snap.n_triangles),
                "width": int(scene.width),
                "height": int(scene.height),
                "params": asdict(snap.params),
                "stop": asdict(snap.stop),
                "backend": snap.backend,
                "running": bool(snap.running),
            }
            text = json.dumps(record, indent=1, allow_nan=False)
            atomic_write_bytes(folder / SESSION_FILE, text.encode("utf-8"))
            self.saves += 1
            return folder

    def _ensure_folder(self) -> Path:
        if self._folder is not None:
            return self._folder
        self.root.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for attempt in range(100):
            name = f"{FOLDER_PREFIX}{stamp}-{os.getpid()}" + (f"-{attempt}" if attempt else "")
            folder = self.root / name
            try:
                folder.mkdir()
            except FileExistsError:
                continue
            lock = QtCore.QLockFile(str(folder / LOCK_FILE))
            lock.setStaleLockTime(0)
            if not lock.tryLock(0):
                raise OSError(f"cannot lock {folder / LOCK_FILE}: {lock.error()}")
            self._folder, self._lock = folder, lock
            return folder
        raise OSError(f"cannot make an autosave folder in {self.root}")

    # ------------------------------------------------------------------ quitting
    def close_clean(self) -> None:
        """A normal quit: delete this window's autosave (nothing to restore). Idempotent."""
        with self._mutex:
            self._closed = True
            folder, lock = self._folder, self._lock
            self._folder = self._lock = None
        if folder is None:
            return
        for name in (SESSION_FILE, SCENE_FILE):
            try:
                (folder / name).unlink(missing_ok=True)
            except OSError as exc:
                log.warning("cannot remove the autosave %s: %s", folder / name, exc)
        if (folder / SESSION_FILE).exists():  # could not delete it: at least say the quit was clean
            try:
                record = json.loads((folder / SESSION_FILE).read_text("utf-8"))
                record["clean_exit"] = True
                atomic_write_bytes(folder / SESSION_FILE, json.dumps(record, indent=1).encode("utf-8"))
            except (OSError, ValueError) as exc:
                log.warning("cannot mark the autosave %s clean: %s", folder, exc)
        if lock is not None:
            lock.unlock()
        _remove_folder(folder)


# ---------------------------------------------------------------------- file helpers
def _remove_temporaries(folder: Path) -> None:
    """Temporary files of atomic writes a killed process left behind (``.<name>.*.part``)."""
    try:
        for tmp in folder.glob(".*.part"):
            tmp.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("cannot tidy %s: %s", folder, exc)


def _remove_folder(folder: Path) -> None:
    try:
        shutil.rmtree(folder)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("cannot remove %s: %s", folder, exc)


def _set_aside(folder: Path) -> Path | None:
    target = folder.with_name(DAMAGED_PREFIX + folder.name[len(FOLDER_PREFIX):])
    try:
        folder.rename(target)
        return target
    except OSError as exc:
        log.warning("cannot set %s aside: %s", folder, exc)
        return None
