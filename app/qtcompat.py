"""A guard against a PySide6 reference-count bug that kills the process on Python 3.11.

PySide6 6.12.0 returns ``None`` from every void method and ``True`` from ``Signal.emit``
without taking a reference (harmless on Python >= 3.12, where those objects are immortal).
On 3.11 each call drops one reference, and after a few seconds of a live GUI (pyqtgraph
redraws, progress signals) CPython aborts with "Fatal Python error: none_dealloc".

Measured here (Python 3.11.7): 6.12.0 loses one ``None`` per ``QLabel.setText`` and one ``True``
per ``emit``; 6.11.3 loses none. The real fix is a dependency pin (PySide6 < 6.12 on Python
< 3.12); until then :func:`guard_pyside_refcounts` detects the leak and gives ``None``, ``True``
and ``False`` a reference count so large that it cannot drain -- what Python 3.12 does for them.
"""

from __future__ import annotations

import ctypes
import logging
import sys

log = logging.getLogger("trifit.app")

_HEADROOM = 1 << 48   # references added; a leak of one per call would need years to spend them
_guarded = False


def _leaks() -> dict[str, int]:
    """References of None / True lost over 64 calls of a void method and of Signal.emit."""
    from PySide6 import QtCore

    class Probe(QtCore.QObject):
        ping = QtCore.Signal()

    probe = Probe()
    n = 64
    none_before, true_before = sys.getrefcount(None), sys.getrefcount(True)
    for _ in range(n):
        probe.setObjectName("probe")   # void: returns None
    none_lost = none_before - sys.getrefcount(None)
    for _ in range(n):
        probe.ping.emit()              # returns True
    true_lost = true_before - sys.getrefcount(True)
    return {"None": none_lost, "True": true_lost}


def guard_pyside_refcounts() -> bool:
    """Apply the guard when this PySide6 leaks singleton references; True if it was needed."""
    global _guarded
    if _guarded or sys.version_info >= (3, 12) or sys.implementation.name != "cpython":
        return _guarded
    lost = _leaks()
    if max(lost.values()) < 32:  # only a systematic per-call loss, not noise, triggers it
        return False
    for obj in (None, True, False):
        # ob_refcnt is the first Py_ssize_t of every object in a CPython release build.
        ctypes.c_ssize_t.from_address(id(obj)).value += _HEADROOM
    _guarded = True
    import PySide6

    log.warning("PySide6 %s loses references to None/True on this Python (%s per 64 calls); "
                "guarded. Use PySide6 < 6.12 on Python < 3.12.", PySide6.__version__, lost)
    return True
