"""The status bar's progress of an export (a picture or a video): what is written, a bar, and Cancel.

Not a dialog: the window stays usable (and the fit visible) while an export renders. The
widget is hidden between exports.
"""

from __future__ import annotations

from PySide6 import QtWidgets

from .export_chain import ChainedExport


class ExportProgress(QtWidgets.QWidget):
    def __init__(self, parent: QtWidgets.QWidget | None = None):
        super().__init__(parent)
        self.export: ChainedExport | None = None
        self.label = QtWidgets.QLabel()
        self.bar = QtWidgets.QProgressBar()
        self.bar.setMaximumWidth(160)
        self.bar.setTextVisible(True)
        self.cancel_button = QtWidgets.QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop the export: no file is written")
        self.cancel_button.clicked.connect(self.cancel)
        layout = QtWidgets.QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.label)
        layout.addWidget(self.bar)
        layout.addWidget(self.cancel_button)
        self.hide()

    def watch(self, export: ChainedExport) -> None:
        """Show ``export``'s progress until it ends."""
        self.export = export
        W, H = export.size
        self.label.setText(f"{export.label} {W} × {H}")
        self.setToolTip(export.describe())
        self.bar.setRange(0, 0)   # busy until the scene is read and the tiles are counted
        self.cancel_button.setEnabled(True)
        self.cancel_button.setText("Cancel")
        export.progress.connect(self._on_progress)
        export.encoding.connect(self._on_encoding)
        for signal in (export.finished, export.failed, export.cancelled):
            signal.connect(self._on_end)
        self.show()

    def cancel(self) -> None:
        if self.export is not None and self.export.active:
            self.cancel_button.setEnabled(False)
            self.cancel_button.setText("Cancelling…")
            self.export.cancel()

    def _on_progress(self, done: int, total: int) -> None:
        if total:
            self.bar.setRange(0, total)
            self.bar.setValue(done)

    def _on_encoding(self) -> None:
        self.bar.setRange(0, 0)
        self.label.setText("Writing")

    def _on_end(self, *_args) -> None:
        self.export = None
        self.hide()
