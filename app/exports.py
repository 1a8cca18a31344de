"""Export jobs. Each ``*_job`` returns a function the fit worker runs with the fitter (the scene
readback and any render happen on the worker thread, never on the GUI thread). Pictures, which
can take long to render, are a chain of tile jobs instead: app/picture_export.py.

PNG/SVG/report come from ``trifit.export`` / ``trifit.report``; a build without them gets
:class:`ExportUnavailable` with a readable reason before any file dialog opens.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path


class ExportUnavailable(Exception):
    pass


def engine_function(module: str, name: str) -> Callable:
    """``render.<module>.<name>``, or ExportUnavailable saying what is missing."""
    try:
        mod = importlib.import_module(f"trifit.{module}")
    except ImportError as exc:
        raise ExportUnavailable(f"trifit.{module} is not available in this build ({exc}).") from None
    fn = getattr(mod, name, None)
    if not callable(fn):
        raise ExportUnavailable(f"trifit.{module} has no {name}() in this build.")
    return fn


def scene_json_job(path: str | Path):
    def job(fitter):
        fitter.scene.save(path)  # atomic: a temporary file renamed over the target
        return str(path)
    return job


def svg_job(path: str | Path):
    save_svg = engine_function("export", "save_svg")

    def job(fitter):
        save_svg(fitter.scene, str(path))
        return str(path)
    return job


def report_job(path: str | Path):
    write_report = engine_function("report", "write_report")

    def job(fitter):
        write_report(str(path), fitter)
        return str(path)
    return job
