"""The picture export dialog: where, how large, which edges -- with a preview of those edges.

The choices are the command line's (``trifit render --scale K | --width W --edges crisp|fit``):
the size is a scale of the fit's frame or a width with the aspect kept, and the dialog shows
the resulting W x H. "crisp" antialiases edges over about one output pixel at any size; "fit"
keeps the softness the fit optimised, which a large picture shows as blur. The difference is
easy to miss in words, so the dialog shows the centre of the picture at the chosen size and
edges, in output pixels shown 2x. The preview is a worker job (``request_preview``), never a
GUI-thread render, and a newer request makes an older answer stale.

Where the fit was made for its own soft render (the window's Sharp edges box unchecked), the
dialog says that a fit made for crisp pictures exports crisper ones (docs/QUALITY.md, "Crisp
pictures").

The path is checked when Export is pressed (format by suffix, folder writable, not the image
being fitted): a refusal is said in the dialog, which stays open, and no work has begun. An
existing file is replaced only when Export is pressed again for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PySide6 import QtCore, QtGui, QtWidgets

from trifit.errors import TrifitError
from trifit.fileutil import check_writable

from .exports import engine_function
from .picture_export import PICTURE_FORMATS, PREVIEW_SIDE, picture_format, preview_job

PICTURE_FILTER = "PNG images (*.png);;JPEG images (*.jpg *.jpeg);;WebP images (*.webp)"
EDGE_CHOICES = (
    ("crisp", "Crisp", "edges antialiased over about one output pixel, at any size"),
    ("fit", "As fitted", "the softness the fit optimised, scaled with the picture"),
)
MAX_SIDE = 16384
PREVIEW_ZOOM = 2
PREVIEW_DELAY_MS = 150   # a spin box held down asks for one preview, not one per step


@dataclass
class ExportChoice:
    path: str
    size: tuple[int, int]
    edges: str
    by_width: bool
    scale: float
    width: int


class ExportDialog(QtWidgets.QDialog):
    """``request_preview(job, on_done, on_error)`` runs a worker job and calls back on the GUI
    thread. After ``accepted``, :meth:`choice` says what to export."""

    def __init__(self, parent: QtWidgets.QWidget | None, frame: tuple[int, int], path: str,
                 request_preview: Callable[[Callable, Callable, Callable], object], *,
                 by_width: bool = False, scale: float = 4.0, width: int = 1024, edges: str = "crisp",
                 source: str | None = None, fitted_crisp: bool = True):
        super().__init__(parent)
        self.setWindowTitle("Export picture")
        self.frame = (int(frame[0]), int(frame[1]))
        self.source = source             # the image being fitted: never overwritten
        self._replace_ok: Path | None = None  # an existing file the user chose to replace
        self._picture_size = engine_function("export", "picture_size")
        self._request_preview = request_preview
        self._preview_serial = 0
        self._closed = False
        self.preview_pixels: np.ndarray | None = None   # the crop shown (tests read it)
        self.preview_key: tuple | None = None            # (size, edges) of that crop

        self.path_edit = QtWidgets.QLineEdit(path)
        browse = QtWidgets.QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        path_row = QtWidgets.QHBoxLayout()
        path_row.addWidget(self.path_edit, 1)
        path_row.addWidget(browse)

        self.by_scale_radio = QtWidgets.QRadioButton("Scale")
        self.by_width_radio = QtWidgets.QRadioButton("Width")
        self.scale_box = QtWidgets.QDoubleSpinBox()
        self.scale_box.setRange(0.1, MAX_SIDE / max(self.frame))
        self.scale_box.setDecimals(2)
        self.scale_box.setSingleStep(0.5)
        self.scale_box.setSuffix(" ×")
        self.scale_box.setValue(scale)
        self.width_box = QtWidgets.QSpinBox()
        self.width_box.setRange(16, MAX_SIDE)
        self.width_box.setSingleStep(16)
        self.width_box.setSuffix(" px")
        self.width_box.setValue(int(width))
        # (radio buttons of one parent are one exclusive set unless grouped)
        self._size_group = QtWidgets.QButtonGroup(self)
        self._size_group.addButton(self.by_scale_radio)
        self._size_group.addButton(self.by_width_radio)
        (self.by_width_radio if by_width else self.by_scale_radio).setChecked(True)
        self.size_label = QtWidgets.QLabel()
        size_grid = QtWidgets.QGridLayout()
        size_grid.addWidget(self.by_scale_radio, 0, 0)
        size_grid.addWidget(self.scale_box, 0, 1)
        size_grid.addWidget(QtWidgets.QLabel(f"of the fit's {self.frame[0]} × {self.frame[1]} frame"), 0, 2)
        size_grid.addWidget(self.by_width_radio, 1, 0)
        size_grid.addWidget(self.width_box, 1, 1)
        size_grid.addWidget(QtWidgets.QLabel("height follows the aspect"), 1, 2)
        size_grid.addWidget(self.size_label, 2, 0, 1, 3)

        self.edge_buttons: dict[str, QtWidgets.QRadioButton] = {}
        edge_box = QtWidgets.QVBoxLayout()
        self._edge_group = QtWidgets.QButtonGroup(self)
        for key, label, tip in EDGE_CHOICES:
            button = QtWidgets.QRadioButton(f"{label}: {tip}")
            self._edge_group.addButton(button)
            button.setChecked(key == edges)
            self.edge_buttons[key] = button
            edge_box.addWidget(button)
        if not any(b.isChecked() for b in self.edge_buttons.values()):
            self.edge_buttons["crisp"].setChecked(True)

        side = PREVIEW_SIDE * PREVIEW_ZOOM
        self.preview_label = QtWidgets.QLabel("rendering the preview…")
        self.preview_label.setAlignment(QtCore.Qt.AlignmentFlag.AlignCenter)
        self.preview_label.setFixedSize(side, side)
        self.preview_label.setStyleSheet("background: #202020; color: #c0c0c0;")
        preview_caption = QtWidgets.QLabel(f"Centre of the picture at this size and edges\n"
                                           f"(one output pixel shown as {PREVIEW_ZOOM} × {PREVIEW_ZOOM})")
        preview_caption.setAlignment(QtCore.Qt.AlignmentFlag.AlignCenter)

        # (a fit made for its own soft render: crisp pictures of one made for them score higher)
        self.fitted_crisp = fitted_crisp
        self.sharp_hint = QtWidgets.QLabel(
            "This fit's edges end as soft as its own render suits. For crisper pictures (0.2 to 4 dB "
            "closer to the image on the photographs measured), tick <b>Sharp edges</b> under Next fit "
            "and press Reset.")
        self.sharp_hint.setWordWrap(True)
        self.sharp_hint.hide()

        self.error_label = QtWidgets.QLabel()
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet("color: #c03030;")
        self.error_label.hide()

        buttons = QtWidgets.QDialogButtonBox(QtWidgets.QDialogButtonBox.StandardButton.Cancel)
        self.export_button = buttons.addButton("Export", QtWidgets.QDialogButtonBox.ButtonRole.AcceptRole)
        self.export_button.setDefault(True)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)

        form = QtWidgets.QFormLayout()
        form.addRow("File", path_row)
        form.addRow("Size", size_grid)
        form.addRow("Edges", edge_box)
        left = QtWidgets.QVBoxLayout()
        left.addLayout(form)
        left.addWidget(self.sharp_hint)
        left.addWidget(self.error_label)
        left.addStretch(1)
        right = QtWidgets.QVBoxLayout()
        right.addWidget(self.preview_label)
        right.addWidget(preview_caption)
        right.addStretch(1)
        columns = QtWidgets.QHBoxLayout()
        columns.addLayout(left, 1)
        columns.addLayout(right)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addLayout(columns)
        layout.addWidget(buttons)

        self._preview_timer = QtCore.QTimer(self)
        self._preview_timer.setSingleShot(True)
        self._preview_timer.setInterval(PREVIEW_DELAY_MS)
        self._preview_timer.timeout.connect(self._ask_preview)
        for signal in (self.scale_box.valueChanged, self.width_box.valueChanged, self.by_width_radio.toggled,
                       *(b.toggled for b in self.edge_buttons.values())):
            signal.connect(self._changed)
        self._changed()

    # ------------------------------------------------------------------ the choice
    @property
    def edges(self) -> str:
        return next(k for k, b in self.edge_buttons.items() if b.isChecked())

    def picture_size(self) -> tuple[int, int]:
        """W x H of the picture as chosen; TrifitError if out of range."""
        if self.by_width_radio.isChecked():
            return self._picture_size(self.frame, width=self.width_box.value())
        return self._picture_size(self.frame, scale=self.scale_box.value())

    def choice(self) -> ExportChoice:
        return ExportChoice(self.path_edit.text().strip(), self.picture_size(), self.edges,
                            self.by_width_radio.isChecked(), self.scale_box.value(), self.width_box.value())

    def _changed(self, *_args) -> None:
        self.sharp_hint.setVisible(not self.fitted_crisp and self.edges == "crisp")
        self.scale_box.setEnabled(self.by_scale_radio.isChecked())
        self.width_box.setEnabled(self.by_width_radio.isChecked())
        try:
            W, H = self.picture_size()
        except TrifitError as exc:
            self.size_label.setText(str(exc))
            self.export_button.setEnabled(False)
            return
        self.size_label.setText(f"Picture: <b>{W} × {H}</b> px")
        self.export_button.setEnabled(True)
        self._preview_timer.start()

    # ------------------------------------------------------------------ preview
    def _ask_preview(self) -> None:
        if self._closed:
            return
        try:
            key = (self.picture_size(), self.edges)
        except TrifitError:
            return
        self._preview_serial += 1
        serial = self._preview_serial
        self._request_preview(preview_job(*key), lambda pixels: self._show_preview(serial, key, pixels),
                              lambda message: self._preview_failed(serial, message))

    def _show_preview(self, serial: int, key: tuple, pixels: np.ndarray) -> None:
        if self._closed or serial != self._preview_serial:
            return  # closed meanwhile, or a newer request is on its way
        pixels = np.ascontiguousarray(pixels)
        h, w = pixels.shape[:2]
        image = QtGui.QImage(pixels.data, w, h, w * 3, QtGui.QImage.Format.Format_RGB888).copy()
        image = image.scaled(w * PREVIEW_ZOOM, h * PREVIEW_ZOOM, QtCore.Qt.AspectRatioMode.IgnoreAspectRatio,
                             QtCore.Qt.TransformationMode.FastTransformation)
        self.preview_label.setPixmap(QtGui.QPixmap.fromImage(image))
        self.preview_pixels = pixels
        self.preview_key = key

    def _preview_failed(self, serial: int, message: str) -> None:
        if not self._closed and serial == self._preview_serial:
            self.preview_label.setText(f"no preview:\n{message}")

    # ------------------------------------------------------------------ path
    def _browse(self) -> None:
        current = self.path_edit.text().strip()
        path, selected = QtWidgets.QFileDialog.getSaveFileName(self, "Export picture", current, PICTURE_FILTER)
        if not path:
            return
        if Path(path).suffix.lower() not in PICTURE_FORMATS:  # the filter's first pattern gives the suffix
            path += selected.split("*", 1)[1].split()[0].rstrip(")") if "*" in selected else ".png"
        self.path_edit.setText(path)
        self._replace_ok = Path(path).resolve()  # the file dialog asked about replacing it

    def refusal(self) -> str | None:
        """Why the path or size cannot be exported (before any work), or None."""
        text = self.path_edit.text().strip()
        if not text:
            return "Choose a file to write."
        path = Path(text).expanduser()
        if self.source and path.exists() and path.resolve() == Path(self.source).resolve():
            return f"{path} is the image being fitted: choose another name."
        try:
            picture_format(path)
            check_writable(path)
            self.picture_size()
        except TrifitError as exc:
            return str(exc)
        return None

    def accept(self) -> None:
        reason = self.refusal()
        path = Path(self.path_edit.text().strip()).expanduser()
        if reason is None and path.exists() and path.resolve() != self._replace_ok:
            self._replace_ok = path.resolve()
            reason = f"{path.name} exists: press Export again to replace it."
        if reason is not None:
            self.error_label.setText(reason)
            self.error_label.show()
            return
        self.path_edit.setText(str(Path(self.path_edit.text().strip()).expanduser()))
        super().accept()

    def done(self, result: int) -> None:
        self._closed = True
        self._preview_timer.stop()
        super().done(result)
