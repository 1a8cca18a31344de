"""The Edit dock (issue 20): the tools (select, focus brush, eraser), the brush's size and
strength, and the selection -- each selected triangle's index, colour and opacity, and whether it
is locked -- with Delete, Lock and Colour buttons. It shows and asks; app/edit_tool.py acts."""

from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets

TOOLS = (("select", "Select"), ("brush", "Focus brush"), ("eraser", "Eraser"))


class EditPanel(QtWidgets.QWidget):
    tool_chosen = QtCore.Signal(str)
    brush_changed = QtCore.Signal(float, float)   # radius in working pixels, strength

    def __init__(self, actions: dict, parent=None):
        super().__init__(parent)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        mode = QtWidgets.QToolButton()
        mode.setDefaultAction(actions["edit_mode"])
        layout.addWidget(mode)

        tools = QtWidgets.QHBoxLayout()
        self.tool_buttons: dict[str, QtWidgets.QToolButton] = {}
        group = QtWidgets.QButtonGroup(self)
        for name, label in TOOLS:
            button = QtWidgets.QToolButton()
            button.setText(label)
            button.setCheckable(True)
            button.clicked.connect(lambda _checked=False, n=name: self.tool_chosen.emit(n))
            group.addButton(button)
            tools.addWidget(button)
            self.tool_buttons[name] = button
        self.tool_buttons["select"].setChecked(True)
        layout.addLayout(tools)

        brush = QtWidgets.QFormLayout()
        self.brush_size = QtWidgets.QDoubleSpinBox()
        self.brush_size.setRange(1.0, 200.0)
        self.brush_size.setValue(8.0)
        self.brush_size.setSuffix(" px")
        self.brush_size.setToolTip("Brush radius in the fit's working pixels")
        self.brush_strength = QtWidgets.QDoubleSpinBox()
        self.brush_strength.setRange(0.05, 1.0)
        self.brush_strength.setSingleStep(0.05)
        self.brush_strength.setValue(1.0)
        self.brush_strength.setToolTip("How much a stroke matters (the eraser: how much it takes away)")
        for box in (self.brush_size, self.brush_strength):
            box.valueChanged.connect(lambda _v: self.brush_changed.emit(self.brush_size.value(),
                                                                         self.brush_strength.value()))
        brush.addRow("Brush size", self.brush_size)
        brush.addRow("Strength", self.brush_strength)
        layout.addLayout(brush)
        clear = QtWidgets.QToolButton()
        clear.setDefaultAction(actions["clear_focus"])
        layout.addWidget(clear)

        self.table = QtWidgets.QTableWidget(0, 4)
        self.table.setHorizontalHeaderLabels(["#", "Colour", "Opacity", "Locked"])
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QtWidgets.QAbstractItemView.SelectionMode.NoSelection)
        self.table.setFocusPolicy(QtCore.Qt.FocusPolicy.NoFocus)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.caption = QtWidgets.QLabel("Nothing selected")
        layout.addWidget(self.caption)
        layout.addWidget(self.table, 1)
        buttons = QtWidgets.QHBoxLayout()
        for key in ("delete", "lock", "colour"):
            button = QtWidgets.QToolButton()
            button.setDefaultAction(actions[key])
            buttons.addWidget(button)
        layout.addLayout(buttons)

    def show_tool(self, name: str) -> None:
        self.tool_buttons[name].setChecked(True)

    def show_selection(self, rows: list) -> None:
        """``rows``: (index, (r, g, b), opacity, locked) of each selected triangle, in painting order
        (the table is rebuilt only when what it shows changed: the fit sends its triangles ten
        times a second, and a table of a few hundred rows costs the GUI thread milliseconds)."""
        shown = [(i, tuple(round(c * 255) for c in rgb), round(alpha, 2), locked) for i, rgb, alpha, locked in rows]
        if shown == getattr(self, "_shown", None):
            return
        self._shown = shown
        self.caption.setText(f"{len(rows)} selected" if rows else "Nothing selected")
        self.table.setRowCount(len(rows))
        for k, (index, rgb, alpha, locked) in enumerate(rows):
            swatch = QtWidgets.QTableWidgetItem("#" + "".join(f"{round(c * 255):02x}" for c in rgb))
            swatch.setBackground(QtGui.QColor.fromRgbF(*(min(max(c, 0.0), 1.0) for c in rgb)))
            swatch.setForeground(QtGui.QColor("black" if sum(rgb) > 1.5 else "white"))
            for col, item in enumerate((QtWidgets.QTableWidgetItem(str(index)), swatch,
                                        QtWidgets.QTableWidgetItem(f"{alpha:.2f}"),
                                        QtWidgets.QTableWidgetItem("yes" if locked else ""))):
                self.table.setItem(k, col, item)
