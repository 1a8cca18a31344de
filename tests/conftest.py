"""Shared test fixtures. GPU tests use the real wgpu adapter (lavapipe in CI); under CI=true a
missing adapter is a failure, never a skip."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest

# A process the tests start (the CLI, a Dask worker) that dies in native code prints every thread's
# Python stack to its stderr, which the failing assertion shows: a status of -11 alone says nothing
# of where (a bad-input run of `trifit fit` once crashed so in CI, not reproduced since).
os.environ.setdefault("PYTHONFAULTHANDLER", "1")


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


# ---------------------------------------------------------------------- Dask (tests/test_cluster.py, test_video_cluster.py)
def import_or_fail(module: str, extra: str):
    """An optional dependency (``extra``: the pip extra that brings it); under CI=true its
    absence is a failure, never a skip."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {module} is missing ({exc}); pip install '.[{extra}]'")
        pytest.skip(f"{module} is missing: {exc}")


def distributed_or_fail():
    return import_or_fail("distributed", "cluster")


def terminal_sigint() -> None:
    """In a child before it runs: Ctrl+C's signal as a terminal's foreground job has it (a suite
    started from a script's background job inherits it ignored, and Python then raises no
    KeyboardInterrupt)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt_when(cmd: list[str], ready, timeout: float = 120) -> tuple[int, str]:
    """Run ``cmd`` and press Ctrl+C once ``ready()`` (or the command ended, or the timeout):
    SIGINT to its whole process group, as a terminal sends it. (exit status, stderr)."""
    import signal
    import subprocess
    import time

    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=terminal_sigint)
    deadline = time.monotonic() + timeout
    while not ready() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=timeout)
    return p.returncode, err


@pytest.fixture(scope="module")
def cluster(gpu_ctx):
    """One 2-worker local cluster (processes, one thread and GPU=1 each) for the module:
    (its scheduler's address, a client)."""
    import logging

    distributed = distributed_or_fail()
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, resources={"GPU": 1},
                                       dashboard_address=":0", silence_logs=logging.CRITICAL)
    client = distributed.Client(cluster)
    yield cluster.scheduler_address, client
    client.close()
    cluster.close()


@contextlib.contextmanager
def kill_the_first_to_start(client, marker):
    """While inside: the first worker to start executing a task is SIGKILLed at that moment, once
    (``marker``, a file that must not exist yet, is created by the worker that dies; the nanny's
    restarted worker gets the plugin again and sees it). The task it had is lost with it and goes
    back to the scheduler. Yields a function saying whether that worker is dead. Tied to a task's
    start, not to a result coming back: by then the other worker may have finished every task."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class KillAtFirstStart(WorkerPlugin):  # a local class: cloudpickle sends it by value
        def __init__(self, path):
            self.path = str(path)

        def transition(self, key, start, finish, **kw):
            if finish != "executing":
                return
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            os.kill(os.getpid(), signal.SIGKILL)

    def killed() -> bool:  # the worker that took the marker is gone
        try:
            os.kill(int(Path(marker).read_text()), 0)
        except ProcessLookupError:
            return True
        except (FileNotFoundError, ValueError):
            pass
        return False

    name = f"kill-the-first-to-start-{os.getpid()}-{id(marker)}"
    client.register_plugin(KillAtFirstStart(marker), name=name)
    try:
        yield killed
    finally:
        client.unregister_worker_plugin(name)


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


def worker_call(qtbot, win, fn, timeout_ms: int = 20_000):
    """fn(fitter) on the window's fit worker thread, between chunks; its result."""
    got = []
    win.worker.submit(fn, on_done=got.append)
    qtbot.waitUntil(lambda: bool(got), timeout=timeout_ms)
    return got[0]


@pytest.fixture
def asking(window):
    """The module's window as trifit gui makes it: closing asks before it would lose work (an
    export in progress, a fit not saved, a clip not exported); scripts and other tests close at once."""
    window.ask_to_save = True
    yield window
    window.ask_to_save = False  # (a failed test must not turn the window fixture's close into a question)


def answer_close(qtbot, win, button, timeout_ms: int = 20_000) -> str:
    """Wait for the question a close asked, click ``button`` (a QMessageBox.StandardButton); its text."""
    qtbot.waitUntil(lambda: win.question_box is not None and win.question_box.isVisible(), timeout=timeout_ms)
    text = win.question_box.text()
    win.question_box.button(button).click()
    return text


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
