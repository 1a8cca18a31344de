"""Atomic file writes: a temporary file in the same folder, fsynced, then renamed over the target.

A crash or a full disk leaves either the old file or the new one, never half a file; and
:func:`check_writable` refuses an output path before any work (the CLI and the GUI's exports).
``sync=False`` skips the fsync for files a program only keeps for itself (a video's progress
folder): the rename alone is atomic against a crash of the program, and only a crash of the
machine can lose such a file -- which its reader must then notice and redo, never misread.
:class:`AtomicFile` is the same write held open (a video encoded frame by frame into it).
"""

from __future__ import annotations

import array
import errno
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from .errors import TrifitError


def atomic_write_bytes(path: Path, data: bytes, *, sync: bool = True) -> None:
    atomic_write(path, lambda f: f.write(data), sync=sync)


def atomic_write(path: Path, writer: Callable[[object], object], *, sync: bool = True) -> None:
    """Call ``writer(fileobj)`` on a temporary file beside ``path``, then rename it into place.
    A full disk (or quota, or a file system gone read-only) is a TrifitError naming ``path``."""
    out = AtomicFile(path)
    try:
        writer(out.file)
    except BaseException as exc:
        out.discard()
        _raise_if_storage(exc, out.path)
        raise
    out.commit(sync=sync)


#: what a write fails with when the storage, not the program, is at fault
_STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO}


def _raise_if_storage(exc: BaseException, path: Path) -> None:
    if not isinstance(exc, OSError):
        return
    # (numpy's tofile says a short write without an errno: "N requested and M written")
    if exc.errno in _STORAGE_ERRNOS or (exc.errno is None and "requested and" in str(exc)):
        reason = os.strerror(exc.errno) if exc.errno else "short write: is the disk full?"
        raise TrifitError(f"{path}: cannot write ({reason}); nothing was written there") from None


class AtomicFile:
    """A temporary file beside ``path`` (``file``, open for binary writing) that :meth:`commit`
    renames into place, or :meth:`discard` removes: until then ``path`` is untouched."""

    def __init__(self, path):
        self.path = Path(path)
        folder = self.path.parent if str(self.path.parent) else Path(".")
        try:
            fd, self._tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".part", dir=folder)
        except FileNotFoundError:  # (the error would name the temporary file, not the one asked for)
            raise TrifitError(f"{self.path}: folder {folder} does not exist") from None
        except OSError as exc:
            raise TrifitError(f"{self.path}: cannot write there ({exc.strerror or exc})") from None
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
        except BaseException as exc:
            self.discard()
            _raise_if_storage(exc, self.path)
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
    if path.exists():
        why = _cannot_replace(path, folder)
        if why:
            raise TrifitError(f"{path}: cannot replace the existing file ({why})")


def _cannot_replace(path: Path, folder: Path) -> str | None:
    """Why an atomic write could not rename its new file over ``path`` although the folder takes
    new files: a sticky folder (such as /tmp) lets only the file's owner replace it, and Linux's
    immutable and append-only flags stop even root. None where nothing says so."""
    try:
        st, fst = path.stat(), folder.stat()
    except OSError:
        return None
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    if uid not in (None, 0) and fst.st_mode & stat.S_ISVTX and uid not in (st.st_uid, fst.st_uid):
        return "it belongs to another user in a sticky folder"
    try:
        import fcntl

        with open(path, "rb") as f:
            flags = array.array("l", [0])
            fcntl.ioctl(f.fileno(), 0x80086601, flags, True)  # FS_IOC_GETFLAGS
        if flags[0] & 0x30:  # FS_IMMUTABLE_FL | FS_APPEND_FL
            return "it is marked immutable or append-only"
    except (ImportError, OSError, ValueError):
        pass  # (another platform or file system: the write will say)
    return None


def make_folder(d: Path) -> None:
    """An output folder, made where it is missing, that takes new files (else TrifitError, one line)."""
    d = Path(d)
    if d.exists() and not d.is_dir():
        raise TrifitError(f"{d}: is a file, not a folder")
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TrifitError(f"{d}: cannot create the folder ({exc.strerror or exc})") from None
    check_writable(d / ".probe")


def check_distinct(outputs: dict[str, Path], inputs: list[Path], command: str | None = None) -> None:
    """No output ({role: path}) may be another output or one of the command's inputs: one would
    overwrite the other (TrifitError, one line, before any work)."""
    def same(p: Path, q: Path) -> bool:
        try:
            return p.resolve() == q.resolve() or (p.exists() and q.exists() and os.path.samefile(p, q))
        except OSError:
            return False

    head = f"{command}: " if command else ""
    items = list(outputs.items())
    for i, (role, path) in enumerate(items):
        for other_role, other in items[:i]:
            if same(path, other):
                raise TrifitError(f"{head}{path} would be both {other_role} and {role}; give each output its own name")
        for source in inputs:
            if same(path, source):
                raise TrifitError(f"{head}{path} is an input of this command; writing {role} there would overwrite it")
