"""Screenshot of the window mid-fit, for the README.

    xvfb-run -a -s "-screen 0 1600x1000x24" python -m trifit.app.screenshot docs/screenshot.png [--seconds 20]

Opens the window on the bundled astronaut, fits for ``--seconds`` (with a time-limit stop a
little later, so the fitter's schedules are planned for the run and the picture is well on its
way) and grabs the window as the X server shows it, canvas included. Uses throw-away settings.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from PySide6 import QtCore

from .main import create_window, ensure_application, run_event_loop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trifit.app.screenshot", description="Screenshot of trifit mid-fit.")
    parser.add_argument("out", help="PNG file to write")
    parser.add_argument("--seconds", type=float, default=20.0, help="fit this long before the grab")
    parser.add_argument("--size", type=int, default=176, help="working size")
    parser.add_argument("--triangles", type=int, default=150)
    parser.add_argument("--width", type=int, default=1440)
    parser.add_argument("--height", type=int, default=820)
    args = parser.parse_args(argv)

    app = ensure_application()
    settings = QtCore.QSettings(tempfile.mktemp(suffix=".ini"), QtCore.QSettings.Format.IniFormat)
    settings.setValue("params/size", args.size)
    settings.setValue("params/triangles", args.triangles)
    settings.setValue("stop/time_limit", args.seconds + 5.0)
    window = create_window(start=True, settings=settings)
    window.resize(args.width, args.height)
    result = {"ok": False}

    def grab():
        app.processEvents()
        # grabWindow reads the X server's pixels, so the wgpu canvas (presented straight to its
        # native window, not through Qt's painter) is in the picture.
        image = window.screen().grabWindow(window.winId()).toImage()
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        result["ok"] = image.save(args.out, "PNG")
        stats = window.last_stats
        print(f"wrote {args.out} ({image.width()}x{image.height()}); iteration "
              f"{stats.iteration if stats else 0}, PSNR {stats.psnr if stats else float('nan'):.2f} dB")
        window.close()
        app.quit()

    QtCore.QTimer.singleShot(int(args.seconds * 1000), grab)
    run_event_loop()
    window.shutdown()
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
