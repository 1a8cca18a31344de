"""Entry point of the desktop application: ``trifit gui [IMAGE] [--start]`` or ``python -m trifit.app``.

``run_gui`` is what the command line calls; ``create_window`` is shared with the screenshot
and measurement scripts and the tests.
"""

from __future__ import annotations

import argparse
import logging
import sys

from PySide6 import QtCore, QtWidgets

# rendercanvas.qt must be imported after PySide6 (it picks the Qt binding already imported) and
# before the QApplication exists, so that its loop runs the application (see run_gui).
from rendercanvas import qt as rendercanvas_qt

import trifit
from trifit.resources import sample_path

from .session import SessionStore
from .window import MainWindow

log = logging.getLogger("trifit.app")


def ensure_application() -> QtWidgets.QApplication:
    app = QtWidgets.QApplication.instance()
    if app is None:
        app = QtWidgets.QApplication(sys.argv[:1])
    app.setApplicationName("trifit")
    app.setOrganizationName("trifit")
    app.setApplicationVersion(trifit.__version__)
    return app


def create_window(image_path: str | None = None, start: bool = False, backend: str = "auto",
                  settings: QtCore.QSettings | None = None, autosave: bool = False) -> MainWindow:
    """Show the main window and begin loading ``image_path`` (default: the bundled astronaut).

    ``autosave``: autosave the session to the user's data directory and offer to restore one a
    crashed trifit left there (app/session.py); the app itself runs with it, scripts without."""
    ensure_application()
    engine = trifit.Engine(backend)
    session = SessionStore.from_environment() if autosave else None
    window = MainWindow(engine, settings=settings, session=session)
    window.show()
    window.begin(image_path or sample_path("astronaut.png"), start=start)
    return window


def run_event_loop() -> int:
    """Run the Qt event loop until the application quits."""
    app = ensure_application()
    # rendercanvas' loop runs app.exec() and installs the async hooks its bitmap present path
    # needs. If a QApplication existed before rendercanvas.qt was imported, rendercanvas treats
    # the loop as someone else's ("interactive") and its run() returns at once: exec ourselves.
    if rendercanvas_qt.already_had_app_on_import:
        return int(app.exec() or 0)
    rendercanvas_qt.loop.run()
    return 0


def run_gui(image_path: str | None = None, start: bool = False, backend: str = "auto") -> int:
    """Open the window and run the event loop until it closes; returns the exit status."""
    ensure_application()
    try:
        window = create_window(image_path, start, backend, autosave=True)
        window.ask_to_save = True  # work not saved or exported is not closed or replaced without asking
    except trifit.TrifitError as exc:  # e.g. backend="gpu" on a machine without an adapter
        QtWidgets.QMessageBox.critical(None, "trifit cannot start", str(exc))
        return 1
    status = run_event_loop()
    window.shutdown()
    return status


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trifit gui", description="Open the trifit window.")
    parser.add_argument("image", nargs="?", help="image, video or folder of frames to fit (default: the astronaut sample)")
    parser.add_argument("--start", action="store_true", help="start fitting right away")
    parser.add_argument("--backend", choices=("auto", "gpu", "reference"), default="auto",
                        help="engine backend (default: auto)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return run_gui(args.image, start=args.start, backend=args.backend)


if __name__ == "__main__":
    sys.exit(main())
