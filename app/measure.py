"""Measure the window while it fits: preview frames per second, GUI event-loop stalls, and how
long live changes take to reach the fit.

    xvfb-run -a python -m trifit.app.measure [--seconds 10] [--size 176] [--triangles 150]

A 10 ms QTimer heartbeat runs on the GUI thread; its lateness (actual gap minus 10 ms) is the
time the event loop could not react, so its p99 / max are the worst stalls a user would feel.
Halfway through, the triangle count and sigma are changed; the worker reports when each
change was applied (``FitWorkerSignals.applied``). With ``--export WIDTH``, a picture export of
that width starts halfway instead, and the heartbeat's lateness while it runs is reported apart
(tests/test_gui_export.py checks that its work stays off the GUI thread; this measures what the
GUI thread feels).
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


class StallMeter:
    """The GUI event loop's stalls: a precise ``HEARTBEAT_MS`` QTimer on the GUI thread whose
    lateness (actual gap minus the interval) is how long the loop could not react. Measures
    between :meth:`begin` and :meth:`stop`; ``p99`` / ``max`` are the worst stalls a user would
    feel (this script and tests/test_gui_export.py use it)."""

    def __init__(self, interval_ms: int = HEARTBEAT_MS):
        self.interval_ms = interval_ms
        self.gaps_ms: list[float] = []
        self._last: float | None = None
        self._measuring = False
        self._timer = QtCore.QTimer()
        self._timer.setTimerType(QtCore.Qt.TimerType.PreciseTimer)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._beat)

    def start(self) -> StallMeter:
        """Start the heartbeat (not yet measuring: see :meth:`begin`)."""
        self._timer.start()
        return self

    def begin(self) -> None:
        """Count the gaps from now on (earlier ones, e.g. a warm-up, are dropped)."""
        self.gaps_ms.clear()
        self._last = None
        self._measuring = True
        if not self._timer.isActive():
            self._timer.start()

    def stop(self) -> None:
        self._timer.stop()
        self._measuring = False

    def _beat(self) -> None:
        now = time.perf_counter()
        if self._last is not None and self._measuring:
            self.gaps_ms.append((now - self._last) * 1000 - self.interval_ms)
        self._last = now

    @property
    def lateness_ms(self) -> list[float]:
        return [max(g, 0.0) for g in self.gaps_ms]

    def p(self, q: float) -> float:
        return percentile(self.lateness_ms, q)

    @property
    def max_ms(self) -> float:
        return max(self.lateness_ms, default=float("nan"))


class Session:
    """A window fitting one sample for a measurement: opened with the size and count asked for,
    run for a warm-up and then ``seconds``, described for the record, closed at the end. Shared by
    this tool and app/measure_edit.py."""

    def __init__(self, prog: str, argv: list[str] | None, size: int, triangles: int):
        self.prog, self.argv = prog, argv if argv is not None else sys.argv[1:]
        self.app = ensure_application()
        settings = QtCore.QSettings(tempfile.mktemp(suffix=".ini"), QtCore.QSettings.Format.IniFormat)
        settings.setValue("params/size", size)
        settings.setValue("params/triangles", triangles)
        self.window = create_window(start=True, settings=settings)
        self.window.resize(1280, 760)
        self.stalls = StallMeter().start()

    def iteration(self) -> int:
        stats = self.window.last_stats
        return stats.iteration if stats else 0

    def describe(self) -> dict[str, str]:
        """When, how and where it was measured."""
        win = self.window
        return {
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": " ".join([f"python -m {self.prog}"] + self.argv),
            "platform": f"{platform.platform()}, Qt platform '{QtGui.QGuiApplication.platformName()}', canvas "
                        f"present '{getattr(win.canvas, 'present_method', 'qpainter')}'",
            "adapter": f"{win.engine.description} (backend {win.engine.backend})",
        }

    def run(self, warmup: float, seconds: float, begin, finish, halfway=None) -> int:
        """``begin`` after the warm-up, ``halfway`` half-way through, ``finish`` at the end; then
        the window closes."""
        def end():
            finish()
            self.stalls.stop()
            self.window.close()
            self.app.quit()

        warm_ms = int(warmup * 1000)
        QtCore.QTimer.singleShot(warm_ms, begin)
        if halfway is not None:
            QtCore.QTimer.singleShot(warm_ms + int(seconds * 500), halfway)
        QtCore.QTimer.singleShot(warm_ms + int(seconds * 1000), end)
        run_event_loop()
        self.window.shutdown()
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trifit.app.measure", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--size", type=int, default=176)
    parser.add_argument("--triangles", type=int, default=150)
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of fitting before measuring")
    parser.add_argument("--hide-plots", action="store_true", help="close the plots dock (to see its share)")
    parser.add_argument("--export", type=int, metavar="WIDTH", default=0,
                        help="halfway, export a PNG this wide (to a temporary folder) instead of the live change")
    args = parser.parse_args(argv)
    if args.export < 0:
        parser.error("--export: a width in pixels")

    session = Session("trifit.app.measure", argv, args.size, args.triangles)
    window, stalls = session.window, session.stalls
    if args.hide_plots:
        window.plots_dock.hide()
    latencies: dict[str, float] = {}
    state = {"t0": None, "frames0": 0, "iter0": 0}
    window.worker.signals.applied.connect(lambda kind, s: latencies.setdefault(kind, s))

    def begin():
        state["t0"] = time.perf_counter()
        stalls.begin()
        state["frames0"] = window.canvas.clock.count
        state["iter0"] = session.iteration()

    def change():
        window.controls.triangles.setValue(args.triangles + 20)
        window.controls.sigma.setValue(1.0)

    export: dict = {}

    def start_export():
        export["t0"] = time.perf_counter()
        export["stalls"] = StallMeter()
        export["stalls"].begin()
        export["dir"] = tempfile.TemporaryDirectory()
        job = window.export_picture(f"{export['dir'].name}/export.png", width=args.export)
        export["job"] = job
        if job is not None:
            job.finished.connect(lambda _path: export["stalls"].stop())
            job.failed.connect(lambda _why: export["stalls"].stop())

    def export_line() -> str:
        job, meter = export.get("job"), export.get("stalls")
        if job is None:
            return f"export: {args.export} px wide, refused ({window.last_error})"
        meter.stop()
        if job.active:
            state = (f"still running after {time.perf_counter() - export['t0']:.1f} s ({job.done_tiles} tiles done: "
                     "a longer --seconds lets it end)")
        else:
            state = f"{job.state} after {job.seconds:.1f} s"
        return (f"export: {job.size[0]} x {job.size[1]} px, {job.total_tiles} tiles, {state}; "
                f"event-loop heartbeat meanwhile ({len(meter.gaps_ms)} beats): lateness p50 {meter.p(50):.1f} ms, "
                f"p99 {meter.p(99):.1f} ms, max {meter.max_ms:.1f} ms")

    def finish():
        elapsed = time.perf_counter() - state["t0"]
        frames = window.canvas.clock.count - state["frames0"]
        iters = session.iteration() - state["iter0"]
        lines = [f"{k}: {v}" for k, v in session.describe().items()] + [
            f"fit: {window.fit_info.width}x{window.fit_info.height} px, {args.triangles} triangles"
            + (", an export halfway" if args.export else " (+20 halfway)")
            + f", measured {elapsed:.1f} s after {args.warmup:.0f} s warm-up"
            + (", plots dock hidden" if args.hide_plots else ""),
            f"fit rate: {iters / elapsed:.1f} iterations/s ({iters} iterations)",
            f"preview: {frames / elapsed:.1f} frames/s ({frames} frames drawn, "
            f"{window.canvas.clock.cancelled} cancelled, {window.canvas.clock.deferred} deferred while the fit held the GPU)",
            f"event-loop heartbeat ({HEARTBEAT_MS} ms timer, {len(stalls.gaps_ms)} beats): lateness p50 "
            f"{stalls.p(50):.1f} ms, p99 {stalls.p(99):.1f} ms, max {stalls.max_ms:.1f} ms",
        ]
        if args.export:
            lines.append(export_line())
        else:
            lines.append("live change applied after: " + (", ".join(f"{k} {v * 1000:.0f} ms" for k, v in latencies.items())
                                                          or "(not applied)"))
        print("\n".join(lines), flush=True)

    return session.run(args.warmup, args.seconds, begin, finish, halfway=start_export if args.export else change)


if __name__ == "__main__":
    sys.exit(main())
