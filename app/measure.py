"""Measure the window while it fits: preview frames per second, GUI event-loop stalls, and how
long live changes take to reach the fit.

    xvfb-run -a python -m trifit.app.measure [--seconds 10] [--size 176] [--triangles 150]

A 10 ms QTimer heartbeat runs on the GUI thread; its lateness (actual gap minus 10 ms) is the
time the event loop could not react, so its p99 / max are the worst stalls a user would feel.
Halfway through, the triangle count and sigma are changed; the worker reports when each
change was applied (``FitWorkerSignals.applied``).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import tempfile
import time

import numpy as np
from PySide6 import QtCore, QtGui

from .main import create_window, ensure_application, run_event_loop

HEARTBEAT_MS = 10


def percentile(values, q) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if len(values) else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trifit.app.measure", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--size", type=int, default=176)
    parser.add_argument("--triangles", type=int, default=150)
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of fitting before measuring")
    parser.add_argument("--hide-plots", action="store_true", help="close the plots dock (to see its share)")
    args = parser.parse_args(argv)

    app = ensure_application()
    settings = QtCore.QSettings(tempfile.mktemp(suffix=".ini"), QtCore.QSettings.Format.IniFormat)
    settings.setValue("params/size", args.size)
    settings.setValue("params/triangles", args.triangles)
    window = create_window(start=True, settings=settings)
    window.resize(1280, 760)
    if args.hide_plots:
        window.plots_dock.hide()

    gaps_ms: list[float] = []
    latencies: dict[str, float] = {}
    state = {"last": None, "t0": None, "frames0": 0, "iter0": 0}
    window.worker.signals.applied.connect(lambda kind, s: latencies.setdefault(kind, s))

    def beat():
        now = time.perf_counter()
        if state["last"] is not None and state["t0"] is not None:
            gaps_ms.append((now - state["last"]) * 1000 - HEARTBEAT_MS)
        state["last"] = now

    heartbeat = QtCore.QTimer()
    heartbeat.setTimerType(QtCore.Qt.TimerType.PreciseTimer)
    heartbeat.setInterval(HEARTBEAT_MS)
    heartbeat.timeout.connect(beat)
    heartbeat.start()

    def iteration() -> int:
        return window.last_stats.iteration if window.last_stats else 0

    def begin():
        state["t0"] = time.perf_counter()
        state["frames0"] = window.canvas.clock.count
        state["iter0"] = iteration()

    def change():
        window.controls.triangles.setValue(args.triangles + 20)
        window.controls.sigma.setValue(1.0)

    def finish():
        elapsed = time.perf_counter() - state["t0"]
        frames = window.canvas.clock.count - state["frames0"]
        iters = iteration() - state["iter0"]
        lateness = [max(g, 0.0) for g in gaps_ms]
        engine = window.engine
        lines = [
            f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
            f"command: {' '.join(['python -m trifit.app.measure'] + (argv if argv is not None else sys.argv[1:]))}",
            f"platform: {platform.platform()}, Qt platform '{QtGui.QGuiApplication.platformName()}', "
            f"canvas present '{getattr(window.canvas, 'present_method', 'qpainter')}'",
            f"adapter: {engine.description} (backend {engine.backend})",
            f"fit: {window.fit_info.width}x{window.fit_info.height} px, {args.triangles} triangles "
            f"(+20 halfway), measured {elapsed:.1f} s after {args.warmup:.0f} s warm-up"
            + (", plots dock hidden" if args.hide_plots else ""),
            f"fit rate: {iters / elapsed:.1f} iterations/s ({iters} iterations)",
            f"preview: {frames / elapsed:.1f} frames/s ({frames} frames drawn, "
            f"{window.canvas.clock.cancelled} cancelled, {window.canvas.clock.deferred} deferred while the fit held the GPU)",
            f"event-loop heartbeat ({HEARTBEAT_MS} ms timer, {len(gaps_ms)} beats): lateness p50 "
            f"{percentile(lateness, 50):.1f} ms, p99 {percentile(lateness, 99):.1f} ms, "
            f"max {max(lateness, default=float('nan')):.1f} ms",
            "live change applied after: " + (", ".join(f"{k} {v * 1000:.0f} ms" for k, v in latencies.items())
                                             or "(not applied)"),
        ]
        print("\n".join(lines), flush=True)
        heartbeat.stop()
        window.close()
        app.quit()

    warm_ms = int(args.warmup * 1000)
    QtCore.QTimer.singleShot(warm_ms, begin)
    QtCore.QTimer.singleShot(warm_ms + int(args.seconds * 500), change)
    QtCore.QTimer.singleShot(warm_ms + int(args.seconds * 1000), finish)
    run_event_loop()
    window.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
