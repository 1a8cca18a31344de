"""Atomic file writes: a temporary file in the same folder, fsynced, then renamed over the target.

A crash or a full disk leaves either the old file or the new one, never half a file; and
:func:`check_writable` refuses an output path before any work (the CLI and the GUI's exports).
``sync=False`` skips the fsync for files a program only keeps for itself (a video's progress
folder): the rename alone is atomic against a crash of the program, and only a crash of the
machine can lose such a file -- which its reader must then notice and redo, never misread.
:class:`AtomicFile` is the same write held open (a video encoded frame by frame into it).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from .errors import TrifitError


def atomic_write_bytes(path: Path, data: bytes, *, sync: bool = True) -> None:
    atomic_write(path, lambda f: f.write(data), sync=sync)


def atomic_write(path: Path, writer: Callable[[object], object], *, sync: bool = True) -> None:
    """Call ``writer(fileobj)`` on a temporary file beside ``path``, then rename it into place."""
    out = AtomicFile(path)
    try:
        writer(out.file)
    except BaseException:
        out.discard()
        raise
    out.commit(sync=sync)


class AtomicFile:
    """A temporary file beside ``path`` (``file``, open for binary writing) that :meth:`commit`
    renames into place, or :meth:`discard` removes: until then ``path`` is untouched."""

    def __init__(self, path):
        self.path = Path(path)
        folder = self.path.parent if str(self.path.parent) else Path(".")
        fd, self._tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".part", dir=folder)
        self.file = os.fdopen(fd, "wb")

    def commit(self, *, sync: bool = True) -> None:
        try:
            self.file.flush()
            if sync:
                os.fsync(self.file.fileno())
            self.file.close()
            # mkstemp makes 0600 files; give the result the permissions a plain open() would
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(self._tmp, 0o666 & ~umask)
            os.replace(self._tmp, self.path)
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        try:
            self.file.close()
        except OSError:
            pass
        try:
            os.unlink(self._tmp)
        except OSError:
            pass


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
