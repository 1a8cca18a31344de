"""Edit mode (issue 20): select, delete, lock, drag and recolour triangles on the live render,
paint a focus mask, undo and redo -- while the fit runs.

The GUI thread never touches the fitter. In edit mode the worker sends the fit's triangles (an
:class:`~app.messages.EditView`: values, ids, locks, sigma) about ten times a second; a click
picks from that copy (``trifit.edits.pick``, the model's coverage in float64), so picking costs
the fit nothing. Every edit goes to the worker as a request naming triangles by *id*
(render/edits.py), which the fit applies at its next chunk boundary -- at once while paused --
and records in the scene's changes in index form; ids stay right while growth, pruning and
respawn renumber triangles in between. An undo is an edit like any other (app/undo.py).

Mouse, with the Select tool: click picks the topmost triangle that shows under the pointer,
Shift+click adds (or removes) one, a drag from an empty spot draws a rubber band (the triangles
whose centroid is inside), a drag from a triangle moves it and a drag from a selected triangle's
vertex handle moves that vertex. With the brush or the eraser a drag paints the focus mask,
which goes to the fit when the stroke ends (app/focus_brush.py).
"""

from __future__ import annotations

import numpy as np
from PySide6 import QtCore, QtGui, QtWidgets

from trifit.edits import moved, pick, pick_rect

from .focus_brush import FocusMask
from .selection_panel import EditPanel
from .undo import Step, UndoStack

#: a vertex handle grabs within this many widget pixels
GRAB_PX = 8.0
#: a press that moves less than this many widget pixels is a click
CLICK_PX = 3.0


class EditTool(QtCore.QObject):
    """The edit mode's state and actions; ``install(window)`` builds it with its dock and menu."""

    def __init__(self, window):
        super().__init__(window)
        self.window, self.worker = window, window.worker
        self.active = False
        self.tool = "select"
        self.view = None                    # the latest EditView from the worker
        self.size: tuple[int, int] | None = None  # the fit's working size
        self.selection: list[int] = []      # triangle ids, in the order selected
        self.undo_stack = UndoStack()
        self.mask: FocusMask | None = None
        self.brush_px, self.strength = 8.0, 1.0
        self._press = None                  # (x, y, uv, shift) of the left button's press
        self._drag = None                   # {"id", "vertex", "start", "values"} while moving a triangle
        self._band = None                   # (x0, y0, x1, y1) widget pixels while drawing a rubber band
        self._stroke_before = None          # the mask before the stroke being painted
        self.colour_dialog: QtWidgets.QColorDialog | None = None
        self.panel: EditPanel | None = None  # (install() makes it, with the actions it shows)
        self.actions: dict[str, QtGui.QAction] = {}  # (install() makes them: the Edit menu's)
        self.canvas = None
        self.attach(window.canvas)

    # ------------------------------------------------------------------ wiring
    def attach(self, canvas) -> None:
        """Follow ``canvas`` (a new one after a device reset)."""
        if self.canvas is not None:
            self.canvas.removeEventFilter(self)
        self.canvas = canvas
        canvas.installEventFilter(self)
        canvas.set_edit_mode(self.active)
        self._show_mask()
        self._show_outline()

    def set_active(self, on: bool) -> None:
        self.active = bool(on)
        if self.active and hasattr(self, "dock"):
            self.dock.show()
            self.dock.raise_()  # its tools and the selection, in front
        self.canvas.set_edit_mode(self.active)
        self.worker.set_edit_view(self.active)
        self._press = self._drag = self._band = None
        self._show_outline()

    def set_tool(self, name: str) -> None:
        self.tool = name
        self._press = self._drag = self._band = None
        self._show_outline()

    def set_brush(self, radius_px: float, strength: float) -> None:
        self.brush_px, self.strength = float(radius_px), float(strength)

    def on_loaded(self, info) -> None:
        """A new fit: nothing selected, nothing to undo; its focus mask (a restored session's)."""
        self.view, self.selection = None, []
        self.undo_stack.clear()
        self._show_undo()
        self.size = (info.width, info.height)
        self.mask = FocusMask(info.width, info.height, info.focus) if info.focus is not None else None
        self._show_mask()
        self._show_outline()

    def on_progress(self, progress) -> None:
        view = getattr(progress, "triangles", None)
        if view is None:
            return
        self.view = view
        if self._drag is None:
            there = set(view.ids)
            self.selection = [k for k in self.selection if k in there]  # (re-placed or pruned meanwhile)
        self._show_outline()

    # ------------------------------------------------------------------ what is selected
    def _rows(self) -> list[tuple[int, int, np.ndarray, bool]]:
        """(id, index, values, locked) of each selected triangle there is, in painting order."""
        if self.view is None:
            return []
        where = {k: i for i, k in enumerate(self.view.ids)}
        locked = set(self.view.locked)
        rows = [(k, where[k], self.view.triangles[where[k]], k in locked) for k in self.selection if k in where]
        rows.sort(key=lambda r: r[1])
        if self._drag is not None:
            rows = [(k, i, self._drag["values"] if k == self._drag["id"] else v, lk) for k, i, v, lk in rows]
        return rows

    def _show_outline(self) -> None:
        rows = self._rows() if self.active else []
        tris = np.array([r[2] for r in rows]) if rows else np.zeros((0, 10))
        # While the fit runs a frame follows every chunk, and shows this; a frame of its own per
        # mouse event would cost a CPU adapter's GUI thread a draw every 16 ms.
        self.canvas.set_outline(tris, [r[3] for r in rows], self._band, draw=not self.window.running)
        if self.panel is not None:
            self.panel.show_selection([(i, tuple(v[6:9]), float(v[9]), lk) for _, i, v, lk in rows])
        for key in ("delete", "lock", "colour"):  # (they act on the selection: off without one)
            if key in self.actions:
                self.actions[key].setEnabled(bool(rows))

    def _show_mask(self) -> None:
        empty = self.mask is None or self.mask.empty
        self.canvas.set_focus_overlay(None if empty else self.mask.mask, draw=not self.window.running)
        if "clear_focus" in self.actions:
            self.actions["clear_focus"].setEnabled(not empty)

    # ------------------------------------------------------------------ mouse
    def eventFilter(self, obj, event) -> bool:  # noqa: N802 - Qt override
        if not self.active or obj is not self.canvas or self.size is None:
            return False
        kind = event.type()
        E = QtCore.QEvent.Type
        if kind == E.MouseButtonPress and event.button() == QtCore.Qt.MouseButton.LeftButton:
            self._on_press(event.position(), event.modifiers())
            return True
        if kind == E.MouseMove and self._press is not None:
            self._on_move(event.position())
            return True
        if kind == E.MouseButtonRelease and event.button() == QtCore.Qt.MouseButton.LeftButton and self._press:
            self._on_release(event.position(), event.modifiers())
            return True
        return False

    def _uv(self, pos):
        return self.canvas.image_point(pos.x(), pos.y())

    def _uv_from_press(self, x: float, y: float, press=None) -> tuple[float, float]:
        """Frame coordinates of widget point (x, y) in the pane the press was in (past its edge too)."""
        x0, y0, (u0, v0), _ = press or self._press
        across = self.canvas.image_scale()  # widget pixels per frame unit, across; down: the aspect's
        W, H = self.size
        return u0 + (x - x0) / across, v0 + (y - y0) / (across * H / W)

    def _on_press(self, pos, modifiers) -> None:
        shift = bool(modifiers & QtCore.Qt.KeyboardModifier.ShiftModifier)
        uv = self._uv(pos)
        self._press = (pos.x(), pos.y(), uv, shift)
        if self.tool != "select":
            if uv is None:
                self._press = None
                return
            if self.mask is None:
                self.mask = FocusMask(*self.size)
            self._stroke_before = self.mask.mask.copy()
            self.mask.begin_stroke(*uv, self.brush_px, self.strength, erase=self.tool == "eraser")
            self._show_mask()
            return
        if uv is None or self.view is None or shift:
            return  # (Shift: a click adds or removes one, a drag draws a rubber band -- decided on release)
        grab = self._vertex_under(uv)
        if grab is not None:
            self._drag = {"id": grab[0], "vertex": grab[1], "start": uv, "values": grab[2], "from": grab[2],
                          "moving": False}
            return
        index = pick(self.view.triangles, self.view.sigma, *self.size, *uv)
        if index is None:
            return  # a click on nothing, or the start of a rubber band
        tid = self.view.ids[index]
        if tid not in self.selection:
            self.selection = [tid]
        values = np.array(self.view.triangles[index])
        self._drag = {"id": tid, "vertex": None, "start": uv, "values": values, "from": values, "moving": False}
        self._show_outline()

    def _vertex_under(self, uv):
        """(id, vertex, values) of the selected triangle's vertex handle within GRAB_PX of uv."""
        scale = self.canvas.image_scale()
        W, H = self.size
        best = None
        for tid, _, values, _ in self._rows():
            for k in range(3):
                d = np.hypot((values[2 * k] - uv[0]) * scale, (values[2 * k + 1] - uv[1]) * scale * H / W)
                if d <= GRAB_PX and (best is None or d < best[0]):
                    best = (d, tid, k, np.array(values))
        return None if best is None else best[1:]

    def _on_move(self, pos) -> None:
        x0, y0, uv0, _ = self._press
        far = np.hypot(pos.x() - x0, pos.y() - y0) >= CLICK_PX
        if self.tool != "select":
            self.mask.stroke_to(*self._uv_from_press(pos.x(), pos.y()), self.brush_px, self.strength,
                                erase=self.tool == "eraser")
            self._show_mask()
            return
        if self._drag is not None:
            if far or self._drag["moving"]:
                uv = self._uv_from_press(pos.x(), pos.y())
                d = self._drag
                d["moving"] = True
                d["values"] = np.array(moved(d["from"], uv[0] - d["start"][0], uv[1] - d["start"][1], d["vertex"]))
                self._show_outline()
            return
        if far and uv0 is not None:
            self._band = (min(x0, pos.x()), min(y0, pos.y()), max(x0, pos.x()), max(y0, pos.y()))
            self._show_outline()

    def _on_release(self, pos, modifiers) -> None:
        press, self._press = self._press, None
        shift = press[3]
        if self.tool != "select":
            before, self._stroke_before = self._stroke_before, None
            after = self.mask.mask.copy()
            self._do(Step("focus painting" if self.tool == "brush" else "erasing", [("focus", after)],
                          [("focus", before)]))
            return
        drag, self._drag = self._drag, None
        if drag is not None:
            if drag["moving"]:
                what = "vertex move" if drag["vertex"] is not None else "move"
                self._do(Step(what, [("edit", {"op": "set", "id": drag["id"], "values": drag["values"].tolist()})],
                              [("edit", {"op": "set", "id": drag["id"], "values": drag["from"].tolist()})]))
            return
        band, self._band = self._band, None
        if band is not None and self.view is not None:
            a, b = self._uv_from_press(band[0], band[1], press), self._uv_from_press(band[2], band[3], press)
            inside = [self.view.ids[i] for i in pick_rect(self.view.triangles, *a, *b)]
            self.selection = list(dict.fromkeys(self.selection + inside)) if shift else inside
        elif shift and press[2] is not None and self.view is not None:
            index = pick(self.view.triangles, self.view.sigma, *self.size, *press[2])
            tid = None if index is None else self.view.ids[index]
            if tid in self.selection:
                self.selection = [k for k in self.selection if k != tid]
            elif tid is not None:
                self.selection = self.selection + [tid]
        else:
            self.selection = []  # a click on nothing
        self._show_outline()

    # ------------------------------------------------------------------ edits
    def delete_selected(self) -> None:
        rows = self._rows()
        if not rows:
            return
        if self.view is not None and len(rows) >= len(self.view.ids):
            self.window.show_error("Cannot delete", "A fit keeps at least one triangle.")
            return
        gone = {r[0] for r in rows}
        ids = self.view.ids
        # back in ascending order, each above the one it lay on (a deleted one beneath is back by then)
        below = [ids[index - 1] if index > 0 else -1 for _, index, _, _ in rows]
        undo = {"op": "insert", "ids": [r[0] for r in rows], "below": below, "hint": [r[1] for r in rows],
                "values": [np.asarray(r[2]).tolist() for r in rows], "locked": [r[3] for r in rows]}
        self.selection = []
        self._do(Step(f"delete ({len(rows)})", [("edit", {"op": "delete", "ids": sorted(gone)})], [("edit", undo)]))

    def toggle_lock(self) -> None:
        rows = self._rows()
        if not rows:
            return
        now = list(self.view.locked)
        chosen = [r[0] for r in rows]
        if all(r[3] for r in rows):
            new, what = [k for k in now if k not in chosen], "unlock"
        else:
            new, what = list(dict.fromkeys(now + chosen)), "lock"
        asked = self.window.controls.triangles.value()
        if len(new) > asked:
            self.window.show_error("Cannot lock", f"{len(new)} triangles to lock, more than the {asked} the fit keeps.")
            return
        self._do(Step(what, [("edit", {"op": "lock", "ids": new})], [("edit", {"op": "lock", "ids": now})]))

    def ask_colour(self) -> None:
        """A colour and opacity picker for the selection (not blocking: the fit goes on)."""
        rows = self._rows()
        if not rows:
            return
        v = rows[0][2]
        dialog = QtWidgets.QColorDialog(QtGui.QColor.fromRgbF(*(float(np.clip(c, 0, 1)) for c in v[6:10])), self.window)
        dialog.setOption(QtWidgets.QColorDialog.ColorDialogOption.ShowAlphaChannel, True)
        dialog.setWindowTitle("Colour and opacity")
        dialog.colorSelected.connect(self.set_colour)
        dialog.setAttribute(QtCore.Qt.WidgetAttribute.WA_DeleteOnClose)
        self.colour_dialog = dialog
        dialog.open()

    def set_colour(self, colour: QtGui.QColor) -> None:
        """Give the selected triangles this colour and opacity."""
        rows = self._rows()
        if not rows:
            return
        rgba = [colour.redF(), colour.greenF(), colour.blueF(), colour.alphaF()]
        do, undo = [], []
        for tid, _, values, _ in rows:
            new = np.array(values)
            new[6:10] = rgba
            do.append(("edit", {"op": "set", "id": tid, "values": new.tolist()}))
            undo.append(("edit", {"op": "set", "id": tid, "values": np.asarray(values).tolist()}))
        self._do(Step("colour", do, undo))

    def clear_focus(self) -> None:
        if self.mask is None or self.mask.empty:
            return
        self._do(Step("clear focus", [("focus", np.zeros_like(self.mask.mask))], [("focus", self.mask.mask.copy())]))

    def undo(self) -> None:
        step = self.undo_stack.undo()
        if step is not None:
            self._send(step.undo)
            self.window.show_message(f"Undid {step.label}")
        self._show_undo()

    def redo(self) -> None:
        step = self.undo_stack.redo()
        if step is not None:
            self._send(step.do)
            self.window.show_message(f"Redid {step.label}")
        self._show_undo()

    def _do(self, step: Step) -> None:
        self.undo_stack.push(step)
        self._send(step.do)
        self._show_undo()

    def _show_undo(self) -> None:
        """The Edit menu's Undo and Redo name the step each would take ("Undo delete (3)"), and are
        off where there is none: the stack is the one owner of what they say."""
        if not self.actions:
            return
        for key, verb, label in (("undo", "Undo", self.undo_stack.undo_label),
                                 ("redo", "Redo", self.undo_stack.redo_label)):
            self.actions[key].setText(verb if label is None else f"{verb} {label}")
            self.actions[key].setEnabled(label is not None)

    def _send(self, actions: list) -> None:
        for kind, value in actions:
            if kind == "focus":
                if self.mask is None:
                    self.mask = FocusMask(*self.size)
                self.mask.mask[:] = value
                self.worker.set_focus(None if self.mask.empty else self.mask.mask)
                self._show_mask()
            else:
                self.worker.edit(value)
                self._apply_locally(value)
                self.window.note_unsaved()
        self._show_outline()

    def _apply_locally(self, request: dict) -> None:
        """Show an edit on the GUI's copy at once (the worker's next view confirms it)."""
        v = self.view
        if v is None:
            return
        where = {k: i for i, k in enumerate(v.ids)}
        op = request["op"]
        if op == "set" and request["id"] in where:
            v.triangles = np.array(v.triangles)
            v.triangles[where[request["id"]]] = request["values"]
        elif op == "delete":
            keep = [i for i, k in enumerate(v.ids) if k not in set(request["ids"])]
            v.triangles, v.ids = np.asarray(v.triangles)[keep], [v.ids[i] for i in keep]
            v.locked = [k for k in v.locked if k in set(v.ids)]
        elif op == "lock":
            v.locked = [k for k in request["ids"] if k in where]


def install(window) -> EditTool:
    """Edit mode in ``window``: the tool, its Edit menu (and shortcuts) and its dock."""
    tool = EditTool(window)
    actions = tool.actions = _actions(window, tool)
    tool._show_undo()
    tool._show_outline()
    tool._show_mask()
    tool.panel = EditPanel(actions)
    tool.panel.tool_chosen.connect(lambda name: (tool.set_tool(name), tool.panel.show_tool(name)))
    tool.panel.brush_changed.connect(tool.set_brush)
    dock = QtWidgets.QDockWidget("Edit", window)
    dock.setObjectName("edit_dock")
    dock.setWidget(tool.panel)
    window.addDockWidget(QtCore.Qt.DockWidgetArea.LeftDockWidgetArea, dock)
    window.tabifyDockWidget(window.controls_dock, dock)  # a tab beside the controls: the canvas keeps its room
    dock.hide()  # until edit mode is on
    tool.dock = dock
    bar = window.menuBar()
    menu = QtWidgets.QMenu("&Edit", window)
    after_file = bar.actions()[1] if len(bar.actions()) > 1 else None
    bar.insertMenu(after_file, menu) if after_file is not None else bar.addMenu(menu)
    for key in ("undo", "redo", None, "edit_mode", "select", "brush", "eraser", None, "delete", "lock", "colour",
                "clear_focus"):
        menu.addSeparator() if key is None else menu.addAction(actions[key])
    menu.addAction(dock.toggleViewAction())
    s = window.worker.signals
    s.loaded.connect(tool.on_loaded)
    s.progress.connect(tool.on_progress)
    return tool


def _actions(window, tool: EditTool) -> dict:
    def make(text, slot, shortcut=None, checkable=False):
        action = QtGui.QAction(text, window)
        action.setCheckable(checkable)
        if shortcut is not None:
            action.setShortcut(QtGui.QKeySequence(shortcut))
        action.triggered.connect(slot)
        window.addAction(action)  # (its shortcut works wherever the window has focus)
        return action

    def choose(name):
        return lambda _checked=False: (tool.set_tool(name), tool.panel.show_tool(name))

    return {
        "edit_mode": make("Edit mode", lambda checked=False: tool.set_active(checked), "E", checkable=True),
        "undo": make("Undo", lambda _c=False: tool.undo(), "Ctrl+Z"),
        "redo": make("Redo", lambda _c=False: tool.redo(), "Ctrl+Shift+Z"),
        "select": make("Select tool", choose("select"), "V"),
        "brush": make("Focus brush", choose("brush"), "B"),
        "eraser": make("Focus eraser", choose("eraser"), "Shift+B"),
        "delete": make("Delete", lambda _c=False: tool.delete_selected(), QtCore.Qt.Key.Key_Delete),
        "lock": make("Lock / unlock", lambda _c=False: tool.toggle_lock(), "L"),
        "colour": make("Colour and opacity…", lambda _c=False: tool.ask_colour(), "C"),
        "clear_focus": make("Clear focus mask", lambda _c=False: tool.clear_focus()),
    }
