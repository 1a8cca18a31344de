"""Shared test fixtures. GPU tests use the real wgpu adapter (lavapipe in CI); under CI=true a
missing adapter is a failure, never a skip."""

from __future__ import annotations

import os

import pytest


def _gpu_or_fail():
    from trifit.errors import AdapterError
    from trifit.gpu.device import get_context

    try:
        return get_context()
    except AdapterError as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but no GPU adapter: {exc}")
        pytest.skip(f"no GPU adapter: {exc}")


@pytest.fixture(scope="session")
def gpu_ctx():
    return _gpu_or_fail()


@pytest.fixture(scope="session")
def gpu_engine(gpu_ctx):
    from trifit import Engine

    return Engine("gpu")


@pytest.fixture(scope="session")
def ref_engine():
    from trifit import Engine

    return Engine("reference")


# ---------------------------------------------------------------------- GUI tests (Qt imported lazily)
GUI_SIZE = 48        # working size: lavapipe runs ~100 iterations/s at this size
GUI_TRIANGLES = 20


@pytest.fixture(scope="module")
def warm_engine(gpu_engine):
    """The shared GPU engine, warmed up (kernels compiled, wgpu's poll thread started) before any
    GUI test counts threads."""
    import trifit
    from trifit.resources import sample_path

    warm = trifit.Fitter(sample_path("astronaut.png"), triangles=GUI_TRIANGLES, size=GUI_SIZE, engine=gpu_engine)
    warm.step(2)
    warm.close()
    return gpu_engine


def open_window(qtbot, engine, settings, size=(1100, 560)):
    """A shown main window and a check to run after closing it: the fit worker and every thread
    the window started are gone (a generator: ``yield from open_window(...)`` in a fixture)."""
    import threading

    from trifit.app.window import MainWindow

    threads_before = set(threading.enumerate())
    count_before = threading.active_count()
    win = MainWindow(engine, settings=settings)
    win.resize(*size)
    win.show()
    qtbot.waitExposed(win)
    yield win
    win.close()
    assert not win.worker.alive, "the fit worker thread outlived its window"
    leaked = set(threading.enumerate()) - threads_before
    assert not leaked, f"threads left running: {leaked}"
    # (<=: a daemon thread of another test module, e.g. tqdm's monitor, may end meanwhile)
    assert threading.active_count() <= count_before


@pytest.fixture
def gui_settings(tmp_path):
    """QSettings in a temp file, preset to the small GUI test size and triangle count."""
    from PySide6 import QtCore

    s = QtCore.QSettings(str(tmp_path / "trifit.ini"), QtCore.QSettings.Format.IniFormat)
    s.setValue("params/size", GUI_SIZE)
    s.setValue("params/triangles", GUI_TRIANGLES)
    return s
