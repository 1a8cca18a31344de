"""The controls dock: fit parameters and stop conditions.

Triangle count, sigma and learning rate change the running fit (the window forwards them to
the worker, which applies them between chunks); seed and working size shape the next fit
(Reset or a new image). For a clip a Video group shows how its frames are fitted (the
first frame's iterations, then each later frame's), for the next Reset or clip. Spin boxes
report on Enter / arrows / focus-out, not per keystroke, so typing "1500" does not rebuild the
fit at 1, 15 and 150 triangles on the way.
"""

from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets

from trifit import StopConditions
from trifit.fitter import MAX_TRIANGLES_FIT
from trifit.imageio import MAX_WORKING_SIZE
from trifit.limits import MAX_REPLICAS

from .worker import FitParams, VideoParams


def _spin(minimum: int, maximum: int, value: int, *, step: int = 1, suffix: str = "",
          off_text: str | None = None) -> QtWidgets.QSpinBox:
    box = QtWidgets.QSpinBox()
    box.setRange(minimum, maximum)
    box.setSingleStep(step)
    box.setValue(value)
    box.setSuffix(suffix)
    box.setKeyboardTracking(False)
    if off_text is not None:
        box.setSpecialValueText(off_text)  # shown at the minimum, which means "not set"
    return box


class _OffSpinBox(QtWidgets.QDoubleSpinBox):
    """A spin box whose minimum means "off" (its special value text, e.g. "auto (anneal)"), and
    which takes any beginning of that text typed by hand ("auto", "a") as the minimum."""

    def _is_off(self, text: str) -> bool:
        t = text.strip()
        suffix = self.suffix().strip()
        if suffix and t.endswith(suffix):  # the box keeps its suffix while one types
            t = t[: -len(suffix)].strip()
        t = t.lower()
        return bool(t) and bool(self.specialValueText()) and self.specialValueText().lower().startswith(t)

    def validate(self, text: str, pos: int):
        if self._is_off(text):
            return QtGui.QValidator.State.Acceptable, text, pos
        return super().validate(text, pos)

    def valueFromText(self, text: str) -> float:  # noqa: N802 - Qt override
        return self.minimum() if self._is_off(text) else super().valueFromText(text)


def _dspin(minimum: float, maximum: float, value: float, *, step: float, decimals: int = 2,
           suffix: str = "", off_text: str | None = None) -> QtWidgets.QDoubleSpinBox:
    box = _OffSpinBox() if off_text is not None else QtWidgets.QDoubleSpinBox()
    box.setRange(minimum, maximum)
    box.setDecimals(decimals)
    box.setSingleStep(step)
    box.setValue(value)
    box.setSuffix(suffix)
    box.setKeyboardTracking(False)
    if off_text is not None:
        box.setSpecialValueText(off_text)
    return box


class ControlsPanel(QtWidgets.QWidget):
    triangles_changed = QtCore.Signal(int)
    sigma_changed = QtCore.Signal(object)     # float px, or None for the annealing schedule
    lr_changed = QtCore.Signal(float)
    stop_changed = QtCore.Signal(object)      # render.StopConditions
    reset_requested = QtCore.Signal()

    def __init__(self, start_action: QtCore.QObject | None = None, parent=None):
        super().__init__(parent)
        self.triangles = _spin(1, MAX_TRIANGLES_FIT, 150, step=10)
        self.sigma = _dspin(0.0, 50.0, 0.0, step=0.1, suffix=" px", off_text="auto (anneal)")
        self.lr = _dspin(0.01, 20.0, 1.0, step=0.1, suffix=" ×")
        self.seed = _spin(0, 2**31 - 1, 0)
        self.size = _spin(16, MAX_WORKING_SIZE, 176, step=16, suffix=" px")
        self.replicas = _spin(0, MAX_REPLICAS, 0, off_text="auto")
        self.sharp = QtWidgets.QCheckBox("Sharp edges")
        self.stop_iterations = _spin(0, 10_000_000, 0, step=100, off_text="off")
        self.stop_time = _dspin(0.0, 86_400.0, 0.0, step=10.0, decimals=0, suffix=" s", off_text="off")
        self.stop_psnr = _dspin(0.0, 99.0, 0.0, step=0.5, decimals=1, suffix=" dB", off_text="off")
        self.stop_plateau = _spin(0, 1_000_000, 0, step=50, off_text="off")
        video = VideoParams()
        self.first_frame_iters = _spin(1, 1_000_000, video.first_frame_iters, step=100)
        self.iters_per_frame = _spin(1, 100_000, video.iters_per_frame, step=10)
        self.steady = _dspin(0.0, 100.0, video.steady, step=0.5, off_text="off")

        self.triangles.setToolTip("Grows (new triangles where the error is largest) or shrinks "
                                  "(keeps the triangles that matter most to the picture) the running fit.")
        self.sigma.setToolTip("Edge softness in pixels of the working size; 'auto' anneals it, then "
                              "tunes the final value to the picture.")
        self.lr.setToolTip("Scales every learning rate of the running fit.")
        self.size.setToolTip("Longer side of the working image; applies on Reset or a new image.")
        self.seed.setToolTip("Random seed of the initial triangles; applies on Reset or a new image.")
        self.replicas.setToolTip("Copies of the image fitted side by side, each placing new triangles its own way; "
                                 "each pruning cycle goes on from the best, and the picture shown is the best's "
                                 "(trifit fit --replicas). 'auto' runs two where the GPU has room for them, one "
                                 "otherwise; applies on Reset or a new image (a clip runs one).")
        self.sharp.setToolTip("Fit for crisp pictures (trifit fit --sharp): the edges end as soft as a crisp "
                              "picture's at the working size (0.25 px), not as soft as the fit would choose. "
                              "Exported crisp pictures score higher; the PSNR shown (the fit's own render) can "
                              "score lower. Applies on Reset or a new image; a clip's frames are always fitted so.")
        stop_tip = "Counted from the moment Start is pressed; 'off' disables the rule."
        for box in (self.stop_iterations, self.stop_time, self.stop_psnr, self.stop_plateau):
            box.setToolTip(stop_tip)
        self.first_frame_iters.setToolTip("Iterations of the first frame's full fit; applies on Reset or a new clip.")
        self.iters_per_frame.setToolTip("Iterations of every later frame, each starting from the previous frame's "
                                        "triangles; applies on Reset or a new clip.")
        self.steady.setToolTip("The temporal term (trifit video --steady W): pulls each triangle towards where the "
                               "previous frame left it, W times how still the picture is around it -- still regions "
                               "stop flickering, moving content stays free, at some PSNR. 1 is a good start; "
                               "applies on Reset or a new clip.")

        live = QtWidgets.QGroupBox("Live")
        form = QtWidgets.QFormLayout(live)
        form.addRow("Triangles", self.triangles)
        form.addRow("Sigma", self.sigma)
        form.addRow("Learning rate", self.lr)

        fresh = QtWidgets.QGroupBox("Next fit (Reset)")
        form = QtWidgets.QFormLayout(fresh)
        form.addRow("Seed", self.seed)
        form.addRow("Working size", self.size)
        form.addRow("Replicas", self.replicas)
        form.addRow("", self.sharp)

        self.video_group = QtWidgets.QGroupBox("Video (Reset)")
        form = QtWidgets.QFormLayout(self.video_group)
        form.addRow("First frame", self.first_frame_iters)
        form.addRow("Each frame", self.iters_per_frame)
        form.addRow("Steady", self.steady)
        self.video_group.setToolTip("A clip is fitted frame by frame; the Stop rules do not apply to it.")
        self.video_group.hide()  # shown while a clip is open

        stop = QtWidgets.QGroupBox("Stop when")
        form = QtWidgets.QFormLayout(stop)
        form.addRow("Iterations", self.stop_iterations)
        form.addRow("Time", self.stop_time)
        form.addRow("PSNR reaches", self.stop_psnr)
        form.addRow("Plateau for", self.stop_plateau)

        self.start_button = QtWidgets.QToolButton()
        self.start_button.setToolButtonStyle(QtCore.Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.start_button.setSizePolicy(QtWidgets.QSizePolicy.Policy.Expanding,
                                        QtWidgets.QSizePolicy.Policy.Fixed)
        if start_action is not None:
            self.start_button.setDefaultAction(start_action)
        self.reset_button = QtWidgets.QPushButton("Reset")
        self.reset_button.setToolTip("Start a fresh fit of the current image with these settings.")
        buttons = QtWidgets.QHBoxLayout()
        buttons.addWidget(self.start_button)
        buttons.addWidget(self.reset_button)

        layout = QtWidgets.QVBoxLayout(self)
        layout.addLayout(buttons)
        for group in (live, fresh, self.video_group, stop):
            layout.addWidget(group)
        layout.addStretch(1)

        self.triangles.valueChanged.connect(self.triangles_changed)
        self.sigma.valueChanged.connect(lambda _: self.sigma_changed.emit(self.sigma_px()))
        self.lr.valueChanged.connect(self.lr_changed)
        for box in (self.stop_iterations, self.stop_time, self.stop_psnr, self.stop_plateau):
            box.valueChanged.connect(lambda _: self.stop_changed.emit(self.stop_conditions()))
        self.reset_button.clicked.connect(self.reset_requested)

    # ------------------------------------------------------------------ values
    def sigma_px(self) -> float | None:
        v = self.sigma.value()
        return None if v <= 0 else v

    def params(self) -> FitParams:
        return FitParams(triangles=self.triangles.value(), size=self.size.value(), seed=self.seed.value(),
                         sigma_px=self.sigma_px(), lr_scale=self.lr.value(), replicas=self.replicas.value(),
                         sharp=self.sharp.isChecked())

    def set_params(self, p: FitParams) -> None:
        """Show ``p`` without emitting change signals (it is what the fit already uses)."""
        with QtCore.QSignalBlocker(self.triangles), QtCore.QSignalBlocker(self.sigma), \
                QtCore.QSignalBlocker(self.lr), QtCore.QSignalBlocker(self.seed), \
                QtCore.QSignalBlocker(self.size), QtCore.QSignalBlocker(self.replicas), \
                QtCore.QSignalBlocker(self.sharp):
            self.triangles.setValue(p.triangles)
            self.sigma.setValue(p.sigma_px or 0.0)
            self.lr.setValue(p.lr_scale)
            self.seed.setValue(p.seed)
            self.size.setValue(p.size)
            self.replicas.setValue(p.replicas)
            self.sharp.setChecked(p.sharp)

    def video_params(self) -> VideoParams:
        return VideoParams(iters_per_frame=self.iters_per_frame.value(),
                           first_frame_iters=self.first_frame_iters.value(), steady=self.steady.value())

    def set_video_params(self, v: VideoParams) -> None:
        self.iters_per_frame.setValue(v.iters_per_frame)
        self.first_frame_iters.setValue(v.first_frame_iters)
        self.steady.setValue(v.steady)

    def set_triangles_quietly(self, n: int) -> None:
        with QtCore.QSignalBlocker(self.triangles):
            self.triangles.setValue(n)

    def stop_conditions(self) -> StopConditions:
        return StopConditions(
            iterations=self.stop_iterations.value() or None,
            time_limit=self.stop_time.value() or None,
            target_psnr=self.stop_psnr.value() or None,
            plateau=self.stop_plateau.value() or None,
        )

    def set_stop_conditions(self, s: StopConditions) -> None:
        boxes = (self.stop_iterations, self.stop_time, self.stop_psnr, self.stop_plateau)
        values = (s.iterations, s.time_limit, s.target_psnr, s.plateau)
        for box, value in zip(boxes, values):
            with QtCore.QSignalBlocker(box):
                box.setValue(value or 0)
