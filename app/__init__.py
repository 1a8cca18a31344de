"""The trifit desktop application (PySide6). GUI only: the engine lives in ``render``."""

from .qtcompat import guard_pyside_refcounts

# Before any Qt call storm: see app/qtcompat.py (PySide6 6.12.0 on Python 3.11 aborts otherwise).
guard_pyside_refcounts()
