"""The canvas's place in the window: the preview canvas once an image is open, and before that a
hint saying what to do.

An empty canvas is a dark rectangle that tells a person nothing, and the wgpu canvas cannot draw
text; so while no image is open (the app starting, or the only open having failed) a plain label
stands in its place, in the canvas's colours: "Open an image (Ctrl+O) or drop one here". Being an
ordinary widget, the label is in every screenshot, whichever way the canvas presents. While a
file is being opened it says so, and a failed open brings the hint back.
"""

from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets

HINT = "Open an image ({shortcut}) or drop one here"
HINT_STYLE = "QLabel { background: rgb(33, 33, 36); color: rgb(205, 205, 210); font-size: 15pt; padding: 24px; }"


class CanvasView(QtWidgets.QStackedWidget):
    """The hint or the canvas (``canvas``), one at a time; see the module docstring."""

    def __init__(self, canvas: QtWidgets.QWidget, open_shortcut: QtGui.QKeySequence | None = None, parent=None):
        super().__init__(parent)
        shortcut = open_shortcut.toString(QtGui.QKeySequence.SequenceFormat.NativeText) if open_shortcut else ""
        self.hint_text = HINT.format(shortcut=shortcut or "Ctrl+O")
        self.hint = QtWidgets.QLabel(self.hint_text)
        self.hint.setObjectName("canvas_hint")
        self.hint.setAlignment(QtCore.Qt.AlignmentFlag.AlignCenter)
        self.hint.setWordWrap(True)
        self.hint.setStyleSheet(HINT_STYLE)
        self.canvas = canvas
        self.addWidget(self.hint)
        self.addWidget(canvas)
        self.setCurrentWidget(self.hint)

    @property
    def hint_shown(self) -> bool:
        return self.currentWidget() is self.hint

    def show_hint(self, text: str | None = None) -> None:
        """The hint in the canvas's place (``text``: another message, e.g. that a file is opening)."""
        self.hint.setText(text or self.hint_text)
        self.setCurrentWidget(self.hint)

    def show_canvas(self) -> None:
        self.hint.setText(self.hint_text)
        self.setCurrentWidget(self.canvas)

    def replace_canvas(self, canvas: QtWidgets.QWidget) -> None:
        """Put a new canvas where the old one was (the caller closes the old one)."""
        old, showing = self.canvas, self.currentWidget() is self.canvas
        self.insertWidget(self.indexOf(old), canvas)
        self.removeWidget(old)
        self.canvas = canvas
        self.setCurrentWidget(canvas if showing else self.hint)
