"""Measure the GUI's event-loop stalls while a user edits (issue 20): the window fits, edit mode
is on, and a scripted user -- one mouse event every 16 ms, as a real pointer sends them --
selects triangles by clicking, Shift+clicks, draws rubber bands, drags triangles and vertices,
locks, deletes and undoes, and paints and erases the focus mask, while the fit runs.

    xvfb-run -a python -m trifit.app.measure_edit [--seconds 20] [--size 176] [--triangles 150] [--json OUT]

The stalls are app/measure.py's StallMeter's (a 10 ms heartbeat's lateness) over the scripted
part only; the summary says how many of each interaction ran and how many edits reached the fit.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from PySide6 import QtCore, QtGui, QtWidgets

from trifit.edits import pick

from .measure import Session

EVENT_MS = 16  # a pointer's event spacing


def _point(win, u: float, v: float) -> QtCore.QPointF:
    c = win.canvas
    ratio = c.get_pixel_ratio()
    r = c._pane_rects(*c.get_physical_size())[0]
    return QtCore.QPointF((r[0] + u * (r[2] - r[0])) / ratio, (r[1] + v * (r[3] - r[1])) / ratio)


def _mouse(win, kind, point, shift=False) -> None:
    E = QtCore.QEvent.Type
    mods = QtCore.Qt.KeyboardModifier.ShiftModifier if shift else QtCore.Qt.KeyboardModifier.NoModifier
    left, none = QtCore.Qt.MouseButton.LeftButton, QtCore.Qt.MouseButton.NoButton
    event = QtGui.QMouseEvent(kind, point, win.canvas.mapToGlobal(point), none if kind == E.MouseMove else left,
                              none if kind == E.MouseButtonRelease else left, mods)
    QtWidgets.QApplication.sendEvent(win.canvas, event)


def _pickable(tool, rng) -> tuple[float, float] | None:
    """A frame point where a click picks some triangle (tried at random centroids)."""
    v = tool.view
    if v is None or not len(v.ids):
        return None
    for i in rng.permutation(len(v.ids))[:20]:
        c = v.triangles[i, :6].reshape(3, 2).mean(axis=0)
        if 0.05 < c[0] < 0.95 and 0.05 < c[1] < 0.95 and pick(v.triangles, v.sigma, *tool.size, *c) is not None:
            return float(c[0]), float(c[1])
    return None


ACTIONS = ("click", "shift", "drag", "vertex", "band", "lock", "paint", "erase", "delete", "undo")


def script(win, rng, counts: dict, actions=ACTIONS):
    """The scripted user: yields after each mouse event or key (one per EVENT_MS tick)."""
    E = QtCore.QEvent.Type
    tool = win.edit_tool
    while True:
        for action in actions:
            if action in ("paint", "erase"):
                tool.set_tool("brush" if action == "paint" else "eraser")
                y = float(rng.uniform(0.2, 0.8))
                start, end = _point(win, 0.15, y), _point(win, 0.85, y + 0.1)
                _mouse(win, E.MouseButtonPress, start)
                yield
                for k in range(1, 13):
                    _mouse(win, E.MouseMove, start + (end - start) * (k / 12))
                    yield
                _mouse(win, E.MouseButtonRelease, end)
                tool.set_tool("select")
            elif action in ("lock", "delete", "undo"):
                {"lock": tool.toggle_lock, "delete": tool.delete_selected, "undo": tool.undo}[action]()
            elif action == "band":
                start, end = _point(win, 0.1, 0.1), _point(win, 0.5, 0.5)
                _mouse(win, E.MouseButtonPress, start, shift=True)
                yield
                for k in range(1, 9):
                    _mouse(win, E.MouseMove, start + (end - start) * (k / 8), shift=True)
                    yield
                _mouse(win, E.MouseButtonRelease, end, shift=True)
            else:
                p = _pickable(tool, rng)
                if p is None:
                    yield
                    continue
                at = _point(win, *p)
                if action == "vertex" and tool.selection:
                    rows = tool._rows()
                    if rows:
                        at = _point(win, float(rows[0][2][0]), float(rows[0][2][1]))
                _mouse(win, E.MouseButtonPress, at, shift=action == "shift")
                yield
                if action in ("drag", "vertex"):
                    for k in range(1, 9):
                        _mouse(win, E.MouseMove, at + QtCore.QPointF(3 * k, 2 * k))
                        yield
                    at = at + QtCore.QPointF(24, 16)
                _mouse(win, E.MouseButtonRelease, at, shift=action == "shift")
            counts[action] = counts.get(action, 0) + 1
            yield


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trifit.app.measure_edit", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--size", type=int, default=176)
    parser.add_argument("--triangles", type=int, default=150)
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds of fitting before editing")
    parser.add_argument("--seed", type=int, default=0, help="the scripted user's choices")
    parser.add_argument("--actions", default=",".join(ACTIONS), help="the interactions to cycle through")
    parser.add_argument("--json", help="also write the numbers here")
    args = parser.parse_args(argv)

    session = Session("trifit.app.measure_edit", argv, args.size, args.triangles)
    window, stalls = session.window, session.stalls
    rng = np.random.default_rng(args.seed)
    counts: dict[str, int] = {}
    applied: list[float] = []
    window.worker.signals.applied.connect(lambda kind, s: applied.append(s) if kind in ("edit", "weights") else None)
    state: dict = {}
    steps = script(window, rng, counts, [a for a in args.actions.split(",") if a])
    ticker = QtCore.QTimer()
    ticker.setInterval(EVENT_MS)
    ticker.timeout.connect(lambda: next(steps))

    def begin():
        window.edit_tool.set_active(True)
        state.update(t0=time.perf_counter(), iter0=session.iteration(), frames0=window.canvas.clock.count)
        stalls.begin()
        ticker.start()

    def finish():
        ticker.stop()
        elapsed = time.perf_counter() - state["t0"]
        result = {
            **session.describe(),
            "fit": f"{window.fit_info.width}x{window.fit_info.height} px, {args.triangles} triangles",
            "seconds": round(elapsed, 2),
            "iterations_per_s": round((session.iteration() - state["iter0"]) / elapsed, 1),
            "preview_fps": round((window.canvas.clock.count - state["frames0"]) / elapsed, 1),
            "interactions": counts,
            "edits_applied": len(applied),
            "edit_applied_after_ms_median": round(float(np.median(applied)) * 1000, 1) if applied else None,
            "heartbeats": len(stalls.gaps_ms),
            "stall_ms": {"p50": round(stalls.p(50), 1), "p99": round(stalls.p(99), 1), "max": round(stalls.max_ms, 1)},
        }
        print(json.dumps(result, indent=1), flush=True)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(result, f, indent=1)

    return session.run(args.warmup, args.seconds, begin, finish)


if __name__ == "__main__":
    sys.exit(main())
