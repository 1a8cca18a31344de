"""Atomic file writes: a temporary file in the same folder, fsynced, then renamed over the target.

A crash or a full disk leaves either the old file or the new one, never half a file; and
:func:`check_writable` refuses an output path before any work (the CLI and the GUI's exports).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from .errors import TrifitError


def atomic_write_bytes(path: Path, data: bytes) -> None:
    atomic_write(path, lambda f: f.write(data))


def atomic_write(path: Path, writer: Callable[[object], object]) -> None:
    """Call ``writer(fileobj)`` on a temporary file beside ``path``, then rename it into place."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            writer(f)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp makes 0600 files; give the result the permissions a plain open() would
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def check_writable(path: Path) -> None:
    """Refuse an output path before any work: its folder must exist and take a new file (a probe
    file is created and removed there -- permissions, read-only mounts and full disks all show)."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise TrifitError(f"{path}: folder {folder} does not exist")
    if path.is_dir():
        raise TrifitError(f"{path}: is a folder")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as exc:
        raise TrifitError(f"{path}: cannot write to folder {folder} ({exc.strerror or exc})") from None
