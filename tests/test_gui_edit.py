"""GUI tests of edit mode (issue 20, app/edit_tool.py): select, Shift+select, rubber band, delete,
lock, drag (a triangle, a vertex), colour, undo, redo, focus painting and erasing (the mask
reaches the fitter), the mask saved with the session and restored -- with synthetic mouse and
key events on the real window (lavapipe).

Run: ``xvfb-run -a pytest tests/test_gui_edit.py``. Under CI=true a missing PySide6, pytest-qt or
wgpu adapter is a failure, not a skip.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

if os.environ.get("CI", "").lower() == "true":
    import PySide6  # noqa: F401  (under CI a missing Qt fails the run)
    import pytestqt  # noqa: F401
else:
    pytest.importorskip("PySide6")
    pytest.importorskip("pytestqt")

from conftest import open_window, worker_call  # noqa: E402
from PySide6 import QtCore, QtGui, QtWidgets  # noqa: E402

import trifit  # noqa: E402
import trifit.app  # noqa: E402,F401  (installs the PySide6 refcount guard first)
from trifit.app.focus_brush import FOCUS_FLOOR, weights_from_mask  # noqa: E402
from trifit.app.session import SessionStore  # noqa: E402
from trifit.app.session_record import FOCUS_FILE, LOCK_FILE, RESTORE_ENV, SESSION_FILE  # noqa: E402
from trifit.app.window import MainWindow  # noqa: E402
from trifit.edits import pick  # noqa: E402
from trifit.resources import sample_path  # noqa: E402

pytestmark = pytest.mark.gui

WAIT_MS = 20_000
Qt = QtCore.Qt
OUTLINE_RGB = np.array([255, 217, 51])   # display.wgsl's OUTLINE


@pytest.fixture
def window(qtbot, warm_engine, gui_settings):
    yield from open_window(qtbot, warm_engine, gui_settings)


# ---------------------------------------------------------------------- helpers
def editing(qtbot, win: MainWindow, iterations: int = 60, run: bool = False):
    """The astronaut fitted for a while, paused (unless ``run``), edit mode on and its view in."""
    win.open_image(sample_path("astronaut.png"), start=True)
    qtbot.waitUntil(lambda: win.last_stats is not None and win.last_stats.iteration >= iterations, timeout=WAIT_MS)
    if not run:
        win.pause_fit()
        qtbot.waitUntil(lambda: not win.running, timeout=WAIT_MS)
    tool = win.edit_tool
    tool.actions["edit_mode"].trigger()
    assert tool.active
    qtbot.waitUntil(lambda: tool.view is not None, timeout=WAIT_MS)
    return tool


def fresh_view(qtbot, tool, after):
    """Wait for a view from the worker newer than ``after`` (a predicate on the view)."""
    qtbot.waitUntil(lambda: tool.view is not None and after(tool.view), timeout=WAIT_MS)
    return tool.view


def to_widget(win: MainWindow, u: float, v: float) -> QtCore.QPointF:
    """The canvas widget point showing frame point (u, v) in the first pane."""
    c = win.canvas
    ratio = c.get_pixel_ratio()
    r = c._pane_rects(*c.get_physical_size())[0]
    return QtCore.QPointF((r[0] + u * (r[2] - r[0])) / ratio, (r[1] + v * (r[3] - r[1])) / ratio)


def mouse(win: MainWindow, kind, point: QtCore.QPointF, modifiers=Qt.KeyboardModifier.NoModifier) -> None:
    E = QtCore.QEvent.Type
    button = Qt.MouseButton.LeftButton if kind != E.MouseMove else Qt.MouseButton.NoButton
    buttons = Qt.MouseButton.NoButton if kind == E.MouseButtonRelease else Qt.MouseButton.LeftButton
    event = QtGui.QMouseEvent(kind, point, win.canvas.mapToGlobal(point), button, buttons, modifiers)
    QtWidgets.QApplication.sendEvent(win.canvas, event)


def click(win, point, modifiers=Qt.KeyboardModifier.NoModifier):
    mouse(win, QtCore.QEvent.Type.MouseButtonPress, point, modifiers)
    mouse(win, QtCore.QEvent.Type.MouseButtonRelease, point, modifiers)


def drag(win, start: QtCore.QPointF, end: QtCore.QPointF, modifiers=Qt.KeyboardModifier.NoModifier, steps=6):
    mouse(win, QtCore.QEvent.Type.MouseButtonPress, start, modifiers)
    for k in range(1, steps + 1):
        t = k / steps
        mouse(win, QtCore.QEvent.Type.MouseMove, start + (end - start) * t, modifiers)
    mouse(win, QtCore.QEvent.Type.MouseButtonRelease, end, modifiers)


def undo_menu(tool) -> tuple:
    """What the Edit menu's Undo and Redo say, and whether each is on."""
    return tuple((tool.actions[k].text(), tool.actions[k].isEnabled()) for k in ("undo", "redo"))


def key(win: MainWindow, sequence: str) -> None:
    """Press a window shortcut (on the canvas: the window must be the active one)."""
    from PySide6.QtTest import QTest

    win.activateWindow()
    # (activation is a round trip to the display server: on a loaded machine a fixed number of
    # event-loop turns ended before it, and the shortcut then went nowhere)
    if not win.isActiveWindow():
        QTest.qWaitForWindowActive(win, 5000)
    seq = QtGui.QKeySequence(sequence)[0]
    QTest.keyClick(win.canvas, seq.key(), seq.keyboardModifiers())


def pickable(tool, exclude=()) -> list[tuple[int, tuple[float, float]]]:
    """(id, frame point) of triangles a click picks, topmost first: each at a point inside it
    where it is the one that shows (its centroid, else points towards each vertex)."""
    v = tool.view
    out = []
    for i in range(len(v.ids) - 1, -1, -1):
        if v.ids[i] in exclude:
            continue
        t = v.triangles[i]
        c = t[:6].reshape(3, 2).mean(axis=0)
        for k in range(4):
            p = c if k == 3 else 0.6 * c + 0.4 * t[2 * k: 2 * k + 2]
            if 0.02 < p[0] < 0.98 and 0.02 < p[1] < 0.98 and pick(v.triangles, v.sigma, *tool.size, *p) == i:
                out.append((v.ids[i], (float(p[0]), float(p[1]))))
                break
    return out


def changes(qtbot, win, kind="edit"):
    return worker_call(qtbot, win, lambda f: [list(c) for c in f.changes if c[1] == kind])


def outline_pixels(win) -> int:
    snap = win.canvas.snapshot()[..., :3].astype(int)
    return int(np.sum(np.all(np.abs(snap - OUTLINE_RGB) <= 2, axis=-1)))


# ---------------------------------------------------------------------- selection
def test_click_selects_shift_click_adds_and_a_rubber_band_selects_many(qtbot, window):
    win = window
    tool = editing(qtbot, win)
    (a, pa), (b, pb) = pickable(tool)[:2]
    assert outline_pixels(win) == 0
    click(win, to_widget(win, *pa))
    assert tool.selection == [a] and win.canvas.state.outlines == 1
    assert tool.panel.caption.text() == "1 selected" and tool.panel.table.rowCount() == 1
    assert int(tool.panel.table.item(0, 0).text()) == tool.view.ids.index(a)
    assert outline_pixels(win) > 20  # the display shader outlines it
    click(win, to_widget(win, *pb), Qt.KeyboardModifier.ShiftModifier)
    assert sorted(tool.selection) == sorted([a, b]) and win.canvas.state.outlines == 2
    click(win, to_widget(win, *pb), Qt.KeyboardModifier.ShiftModifier)  # Shift+click again: out
    assert tool.selection == [a]
    # a Shift+drag draws a rubber band: every triangle whose centroid is inside
    # (its bottom edge between two centroids: how many triangles the paused fit has depends on
    # when the pause landed, so a fixed band may hold fewer than two of them)
    v = tool.view
    centroids = v.triangles[:, :6].reshape(-1, 3, 2).mean(axis=1)
    ys = sorted(y for x, y in centroids if 0.02 <= x <= 0.98 and 0.03 <= y <= 0.97)
    k = max(2, len(ys) // 2)
    bottom = (ys[k - 1] + ys[k]) / 2 if k < len(ys) else min(0.98, ys[-1] + 0.01)
    drag(win, to_widget(win, 0.02, 0.02), to_widget(win, 0.98, bottom), Qt.KeyboardModifier.ShiftModifier)
    inside = {k for k, (x, y) in zip(v.ids, centroids) if 0.02 <= x <= 0.98 and 0.02 <= y <= bottom}
    assert 2 <= len(inside) < len(v.ids) and set(tool.selection) == inside | {a}
    tool.actions["edit_mode"].trigger()  # out of edit mode: no outline, clicks are the view's again
    assert not tool.active and outline_pixels(win) == 0
    n = len(tool.view.ids)
    key(win, "Del")  # the selection is kept for edit mode, but nothing shows it: Delete is off
    assert changes(qtbot, win) == [] and len(tool.view.ids) == n
    assert not tool.actions["delete"].isEnabled()


# ---------------------------------------------------------------------- delete, lock, undo, redo
def test_delete_then_undo_puts_it_back_and_redo_deletes_it_again(qtbot, window):
    win = window
    tool = editing(qtbot, win)
    a, pa = pickable(tool)[0]
    index, values = tool.view.ids.index(a), tool.view.triangles[tool.view.ids.index(a)].copy()
    n = len(tool.view.ids)
    assert undo_menu(tool) == (("Undo", False), ("Redo", False))  # nothing done yet: both off
    assert not tool.actions["delete"].isEnabled()  # nothing selected
    click(win, to_widget(win, *pa))
    assert tool.actions["delete"].isEnabled() and tool.actions["lock"].isEnabled()
    key(win, "Del")
    view = fresh_view(qtbot, tool, lambda v: a not in v.ids and len(v.ids) == n - 1)
    assert tool.selection == [] and len(view.ids) == n - 1
    assert changes(qtbot, win)[-1][2] == {"op": "delete", "indices": [index]}
    assert undo_menu(tool) == (("Undo delete (1)", True), ("Redo", False))
    key(win, "Ctrl+Z")
    view = fresh_view(qtbot, tool, lambda v: a in v.ids)
    assert view.ids.index(a) == index and np.allclose(view.triangles[index], values, atol=1e-6)
    assert changes(qtbot, win)[-1][2]["op"] == "insert"  # an undo is an edit, recorded like any other
    assert undo_menu(tool) == (("Undo", False), ("Redo delete (1)", True))
    key(win, "Ctrl+Shift+Z")
    fresh_view(qtbot, tool, lambda v: a not in v.ids)
    assert undo_menu(tool) == (("Undo delete (1)", True), ("Redo", False))
    assert [c[2]["op"] for c in changes(qtbot, win)] == ["delete", "insert", "delete"]


def test_l_locks_and_unlocks_and_undo_relocks(qtbot, window):
    win = window
    tool = editing(qtbot, win)
    (a, pa), (b, pb) = pickable(tool)[:2]
    click(win, to_widget(win, *pa))
    click(win, to_widget(win, *pb), Qt.KeyboardModifier.ShiftModifier)
    key(win, "L")
    view = fresh_view(qtbot, tool, lambda v: set(v.locked) == {a, b})
    assert worker_call(qtbot, win, lambda f: f.locked) == sorted(view.ids.index(k) for k in (a, b))
    assert tool.panel.table.item(0, 3).text() == "yes"
    key(win, "L")  # all selected locked: unlock them
    fresh_view(qtbot, tool, lambda v: v.locked == [])
    key(win, "Ctrl+Z")
    fresh_view(qtbot, tool, lambda v: set(v.locked) == {a, b})
    assert len(changes(qtbot, win, "locked")) == 3


# ---------------------------------------------------------------------- drag, colour
def test_drag_moves_a_triangle_and_a_handle_moves_one_vertex(qtbot, window):
    win = window
    tool = editing(qtbot, win)
    W, H = tool.size
    du, dv = 30 / win.canvas.image_scale(), 12 / (win.canvas.image_scale() * H / W)

    def inner_vertex(t):  # a vertex whose handle shows on the canvas (a fit's vertices may lie outside)
        return next((k for k in range(3) if np.all((t[2 * k: 2 * k + 2] > 0.15) & (t[2 * k: 2 * k + 2] < 0.85))), None)

    shift = np.r_[np.tile([du, dv], 3), [0] * 4]  # (the first drag's)
    a, pa = next(((i, p) for i, p in pickable(tool)
                  if inner_vertex(tool.view.triangles[tool.view.ids.index(i)] + shift) is not None), (None, None))
    assert a is not None, "no pickable triangle keeps a vertex inside the canvas once dragged"
    before = tool.view.triangles[tool.view.ids.index(a)].copy()
    start = to_widget(win, *pa)
    drag(win, start, start + QtCore.QPointF(30, 12))
    view = fresh_view(qtbot, tool, lambda v: a in v.ids and not np.allclose(v.triangles[v.ids.index(a)][:6], before[:6]))
    after = view.triangles[view.ids.index(a)]
    assert np.allclose(after[:6], before[:6] + np.tile([du, dv], 3), atol=1e-4)
    assert np.allclose(after[6:], before[6:], atol=1e-6) and tool.selection == [a]
    # one of the selected triangle's vertices, by its handle
    k = inner_vertex(after)
    xy, others = slice(2 * k, 2 * k + 2), [c for c in range(6) if c // 2 != k]
    vertex = to_widget(win, *after[xy])
    drag(win, vertex, vertex + QtCore.QPointF(-20, 25))
    du, dv = -20 / win.canvas.image_scale(), 25 / (win.canvas.image_scale() * H / W)
    view = fresh_view(qtbot, tool, lambda v: not np.allclose(v.triangles[v.ids.index(a)][xy], after[xy]))
    moved = view.triangles[view.ids.index(a)]
    assert np.allclose(moved[xy], after[xy] + [du, dv], atol=1e-4)
    assert np.allclose(moved[others], after[others], atol=1e-6)
    key(win, "Ctrl+Z")  # undo the vertex move
    fresh_view(qtbot, tool, lambda v: np.allclose(v.triangles[v.ids.index(a)][:6], after[:6], atol=1e-6))
    assert [c[2]["op"] for c in changes(qtbot, win)] == ["set", "set", "set"]


def test_the_colour_picker_sets_colour_and_opacity(qtbot, window):
    win = window
    tool = editing(qtbot, win)
    a, pa = pickable(tool)[0]
    click(win, to_widget(win, *pa))
    key(win, "C")
    dialog = tool.colour_dialog
    assert dialog is not None and dialog.isVisible()
    assert dialog.testOption(QtWidgets.QColorDialog.ColorDialogOption.ShowAlphaChannel)
    dialog.setCurrentColor(QtGui.QColor(255, 0, 0, 128))
    dialog.accept()
    view = fresh_view(qtbot, tool, lambda v: abs(v.triangles[v.ids.index(a)][6] - 1.0) < 1e-3)
    assert np.allclose(view.triangles[view.ids.index(a)][6:10], [1, 0, 0, 128 / 255], atol=2e-3)
    assert tool.panel.table.item(0, 1).text() == "#ff0000"


# ---------------------------------------------------------------------- while the fit runs
def test_edits_while_running_are_recorded_and_replay_to_the_same_bytes(qtbot, window, warm_engine):
    win = window
    tool = editing(qtbot, win, iterations=40, run=True)
    (a, pa), (b, pb) = pickable(tool)[:2]
    click(win, to_widget(win, *pa))
    key(win, "L")
    click(win, to_widget(win, *pb))
    key(win, "Del")
    qtbot.waitUntil(lambda: len(changes(qtbot, win)) >= 1 and len(changes(qtbot, win, "locked")) >= 1, timeout=WAIT_MS)
    it = win.last_stats.iteration
    qtbot.waitUntil(lambda: win.last_stats.iteration > it + 20, timeout=WAIT_MS)  # the fit went on
    win.pause_fit()
    qtbot.waitUntil(lambda: not win.running, timeout=WAIT_MS)
    scene = worker_call(qtbot, win, lambda f: f.scene)
    g = trifit.Fitter(sample_path("astronaut.png"), engine=warm_engine, **scene.meta["settings"])
    trifit.replay_run(g, scene.meta).run()
    assert g.scene.to_json() == scene.to_json()
    g.close()


# ---------------------------------------------------------------------- focus painting
def test_paint_and_erase_the_focus_mask_reach_the_fitter(qtbot, window):
    win = window
    tool = editing(qtbot, win)
    before = win.canvas.snapshot()[..., :3].astype(int)
    assert not tool.actions["clear_focus"].isEnabled()  # nothing painted yet
    key(win, "B")
    assert tool.tool == "brush" and tool.panel.tool_buttons["brush"].isChecked()
    tool.panel.brush_size.setValue(6)
    drag(win, to_widget(win, 0.1, 0.3), to_widget(win, 0.45, 0.3))
    mask = tool.mask.mask.copy()
    tinted = np.abs(win.canvas.snapshot()[..., :3].astype(int) - before).sum(axis=-1) > 30  # the overlay
    centre = to_widget(win, 0.3, 0.3) * win.canvas.get_pixel_ratio()
    assert tinted.sum() > 500 and tinted[int(centre.y()), int(centre.x())]
    assert mask[int(0.3 * tool.size[1]), int(0.25 * tool.size[0])] == 1.0 and mask[:, -5:].max() == 0
    weights = worker_call(qtbot, win, lambda f: None if f.focus is None else f.focus[0].copy())
    assert weights is not None and np.allclose(weights, weights_from_mask(mask))
    assert weights.min() == pytest.approx(FOCUS_FLOOR)
    key(win, "Shift+B")
    assert tool.tool == "eraser"
    drag(win, to_widget(win, 0.1, 0.3), to_widget(win, 0.3, 0.3))
    erased = tool.mask.mask.copy()
    assert erased[int(0.3 * tool.size[1]), int(0.2 * tool.size[0])] == 0.0 and erased.sum() < mask.sum()
    weights = worker_call(qtbot, win, lambda f: f.focus[0].copy())
    assert np.allclose(weights, weights_from_mask(erased))
    key(win, "Ctrl+Z")  # undo the erasing
    qtbot.waitUntil(lambda: np.array_equal(tool.mask.mask, mask), timeout=WAIT_MS)
    assert np.allclose(worker_call(qtbot, win, lambda f: f.focus[0].copy()), weights_from_mask(mask))
    assert tool.actions["clear_focus"].isEnabled()
    tool.actions["clear_focus"].trigger()
    assert worker_call(qtbot, win, lambda f: f.focus) is None  # nothing painted: no focus map
    assert not tool.actions["clear_focus"].isEnabled()
    assert undo_menu(tool)[0] == ("Undo clear focus", True)


def test_the_mask_is_saved_with_the_session_and_restored(qtbot, warm_engine, gui_settings, tmp_path, monkeypatch):
    root = tmp_path / "autosave"
    win = MainWindow(warm_engine, settings=gui_settings, session=SessionStore(root, interval_s=0.3))
    win.resize(1100, 560)
    win.show()
    qtbot.waitExposed(win)
    try:
        tool = editing(qtbot, win, run=True)
        key(win, "B")
        assert tool.tool == "brush"
        drag(win, to_widget(win, 0.2, 0.2), to_widget(win, 0.2, 0.7))
        mask = tool.mask.mask.copy()
        folder = [None]

        def saved():  # (session.json comes last, after the focus file: the first save may be half-way)
            folder[0] = win.session.folder
            return folder[0] is not None and (folder[0] / FOCUS_FILE).exists() and \
                (folder[0] / SESSION_FILE).exists() and '"focus_file"' in (folder[0] / SESSION_FILE).read_text()
        qtbot.waitUntil(saved, timeout=WAIT_MS)
        # a crash: the folder as the dead window left it (its lock stale)
        shutil.copytree(folder[0], tmp_path / "left" / folder[0].name, ignore=shutil.ignore_patterns(LOCK_FILE))
    finally:
        win.close()
    crashed = SessionStore(tmp_path / "left").find_crashed()
    assert len(crashed) == 1 and np.array_equal(crashed[0].focus, np.load(crashed[0].folder / FOCUS_FILE))
    assert crashed[0].focus.max() == 1.0
    crashed[0].lock.unlock()
    monkeypatch.setenv(RESTORE_ENV, "yes")
    win2 = MainWindow(warm_engine, settings=gui_settings, session=SessionStore(tmp_path / "left", interval_s=60))
    win2.show()
    try:
        win2.begin(sample_path("chelsea.png"))
        qtbot.waitUntil(lambda: win2.fit_info is not None, timeout=WAIT_MS)
        assert win2.edit_tool.mask is not None and np.array_equal(win2.edit_tool.mask.mask, crashed[0].focus)
        assert np.array_equal(crashed[0].focus, mask)
        weights = worker_call(qtbot, win2, lambda f: f.focus[0].copy())
        assert np.allclose(weights, weights_from_mask(crashed[0].focus))
        assert win2.canvas.state.focus_on  # shown over the target
    finally:
        win2.close()
