"""Autosave and crash recovery of the GUI session (issue #7, "nothing lost").

While a fit runs, the fit worker hands a snapshot of it to :meth:`SessionStore.save` every
``TRIFIT_AUTOSAVE_SECONDS`` (default 30) seconds of fitting and when the fit pauses or stops;
the store writes it to the user's data directory::

    <data>/autosave/session-<date>-<time>-<pid>/
        scene.json     the scene (the trifit scene format; File > Open scene can read it)
        state.npz      the fit's checkpoint (render/checkpoint.py): parameters, Adam moments,
                       schedule, strategy progress, loss history -- a restore resumes from it
        focus.npy      the focus mask painted (app/focus_brush.py), when there is one: float32 at
                       the working size; a restore weighs the fit by it again
        session.json   what the fit was made from: target image (absolute path), working size,
                       triangle count, seed, sigma, learning-rate scale, stop rules, iteration,
                       time, software version, pid, "clean_exit": false
        lock           a QLockFile held while the window lives (pid, process name, host, boot id)

Every file is written atomically (a temporary file renamed over the old one), session.json last,
so a ``kill -9`` at any moment leaves a usable session: a checkpoint whose iteration is not the
record's is ignored, and the restore starts from the scene. A normal quit
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

import io
import json
import logging
import os
import shutil
import threading
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from PySide6 import QtCore

import trifit
from trifit.checkpoint import save_checkpoint
from trifit.fileutil import atomic_write_bytes

from .session_record import (
    AUTOSAVE_ENV,
    CHECKPOINT_FILE,
    DAMAGED_PREFIX,
    FOCUS_FILE,
    FOLDER_PREFIX,
    LOCK_FILE,
    SCENE_FILE,
    SESSION_FILE,
    SESSION_FORMAT,
    SESSION_VERSION,
    CrashedSession,
    SessionDamaged,
    autosave_interval,
    checkpoint_of,
    data_dir,
    focus_of,
    params_from_record,
    read_session_record,
)
from .worker import AUTOSAVE_EVERY_S, AutosaveSnapshot

log = logging.getLogger("trifit.app")


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
            params, stop = params_from_record(record)
            try:
                scene = trifit.Scene.load(folder / SCENE_FILE)
            except trifit.SceneError as exc:
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
        return CrashedSession(folder, record, scene, params, stop, lock, checkpoint_of(folder, record),
                              focus_of(folder, record))

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
            if snap.checkpoint is not None:
                save_checkpoint(snap.checkpoint, folder / CHECKPOINT_FILE)
            else:
                (folder / CHECKPOINT_FILE).unlink(missing_ok=True)  # never one of an older iteration
            if snap.focus is not None:
                buffer = io.BytesIO()
                np.save(buffer, np.ascontiguousarray(snap.focus, dtype=np.float32), allow_pickle=False)
                atomic_write_bytes(folder / FOCUS_FILE, buffer.getvalue())
            else:
                (folder / FOCUS_FILE).unlink(missing_ok=True)
            now = time.time()
            record = {
                "format": SESSION_FORMAT,
                "version": SESSION_VERSION,
                "software": f"trifit {trifit.__version__}",
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
            if snap.focus is not None:
                record["focus_file"] = FOCUS_FILE
            text = json.dumps(record, indent=1, allow_nan=False)
            atomic_write_bytes(folder / SESSION_FILE, text.encode("utf-8"))
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
