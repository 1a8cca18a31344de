"""The main window: canvas in the middle, controls and plots in docks, menus, status bar.

The window is the GUI thread's only link to the fit: it forwards user actions to the
:class:`~app.worker.FitWorker` and renders what the worker reports. It never calls a Fitter
method and never waits on the GPU. Dialogs about failures are opened non-modally (``open()``),
so the event loop and the preview keep running while one is up.

With a :class:`~app.session.SessionStore` the fit is autosaved while it runs, and
:meth:`MainWindow.begin` offers to restore a session a crashed trifit left behind.
"""

from __future__ import annotations

import logging
import os
import platform
from pathlib import Path

from PySide6 import QtCore, QtGui, QtWidgets

import render
from render import StopConditions

from . import exports
from .canvas import FitCanvas, ImageCanvas, ViewMode
from .controls import ControlsPanel
from .gpu_gate import GpuGate
from .plots import PlotsPanel
from .session import CrashedSession, SessionStore, restore_answer_from_env
from .worker import FitInfo, FitParams, FitWorker, Progress

log = logging.getLogger("trifit.app")

IMAGE_FILTER = "Images (*.png *.jpg *.jpeg *.bmp *.gif *.tif *.tiff *.webp *.ppm *.pgm);;All files (*)"
SCENE_FILTER = "trifit scenes (*.json);;All files (*)"
MAX_RECENT = 8


def make_canvas(engine: render.Engine, present_method: str | None = None, gate: GpuGate | None = None):
    """A wgpu canvas on the engine's device; the QPainter canvas only where wgpu has no adapter."""
    try:
        from render.gpu.device import get_context

        device = get_context().device
    except render.AdapterError as exc:
        log.warning("no wgpu device for the canvas (%s); drawing with QPainter", exc)
        return ImageCanvas()
    try:
        return FitCanvas(device, present_method=present_method, gate=gate)
    except Exception as exc:  # e.g. no native surface: a bitmap present still works
        if present_method == "bitmap":
            raise
        log.warning("screen present failed (%s); presenting through a bitmap", exc)
        return FitCanvas(device, present_method="bitmap", gate=gate)


class MainWindow(QtWidgets.QMainWindow):
    def __init__(self, engine: render.Engine, settings: QtCore.QSettings | None = None,
                 present_method: str | None = None, session: SessionStore | None = None):
        super().__init__()
        self.engine = engine
        self.settings = settings if settings is not None else QtCore.QSettings()
        self.gpu_gate = GpuGate()   # the worker and the canvas take turns on the device
        self.worker = FitWorker(engine, self.gpu_gate)
        self.fit_info: FitInfo | None = None
        self.running = False
        self.last_stats = None
        self.scene_path: str | None = None
        self.last_error: tuple[str, str] | None = None   # for tests and scripts
        self.last_message: str = ""
        self.session = session                            # autosave; None: off
        self.restore_offer: CrashedSession | None = None  # a crashed session waiting for an answer
        self.restored: CrashedSession | None = None       # the session restored at start, if any
        self._restoring: CrashedSession | None = None     # restored, its fit not loaded yet
        self.last_autosave: tuple[str, int] | None = None  # (folder, iteration) of the latest autosave
        self._restore_box: QtWidgets.QMessageBox | None = None
        self._restore_fallback: tuple[str | None, bool] = (None, False)
        self._autosave_error_shown = False
        self.setWindowTitle("trifit")
        self.setAcceptDrops(True)

        self.canvas = make_canvas(engine, present_method, self.gpu_gate)
        self._build_actions()
        self._build_central()
        self._build_docks()
        self._build_menus()
        self._build_status_bar()
        self._connect_worker()
        self._restore_settings()
        if session is not None:
            self.worker.configure_autosave(session.save, session.interval_s)
        self.worker.start()

    # ------------------------------------------------------------------ construction
    def _action(self, text: str, slot, shortcut=None, tip: str = "") -> QtGui.QAction:
        action = QtGui.QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QtGui.QKeySequence(shortcut))
        if tip:
            action.setStatusTip(tip)
        action.triggered.connect(lambda checked=False: slot())
        return action

    def _build_actions(self) -> None:
        key = QtGui.QKeySequence.StandardKey
        self.act_open = self._action("&Open image…", self.ask_open_image, key.Open)
        self.act_open_scene = self._action("Open &scene to refine…", self.ask_open_scene)
        self.act_save = self._action("&Save scene", self.ask_save_scene, key.Save)
        self.act_save_as = self._action("Save scene &as…", lambda: self.ask_save_scene(always_ask=True),
                                        key.SaveAs)
        self.act_export_png = self._action("&PNG at chosen size…", self.ask_export_png)
        self.act_export_svg = self._action("&SVG…", self.ask_export_svg)
        self.act_export_json = self._action("Scene &JSON…", lambda: self.ask_save_scene(always_ask=True))
        self.act_export_report = self._action("&Report (HTML)…", self.ask_export_report)
        self.act_quit = self._action("&Quit", self.close, key.Quit)
        self.act_start = self._action("Start", self.toggle_running, QtCore.Qt.Key.Key_Space,
                                      "Start or pause the fit (Space)")
        self.act_start.setShortcutContext(QtCore.Qt.ShortcutContext.WindowShortcut)
        self.act_reset = self._action("Reset", self.reset_fit, tip="A fresh fit with the current settings")
        self.act_about = self._action("&About trifit", self.show_about)

        self.view_group = QtGui.QActionGroup(self)
        self.view_actions: dict[ViewMode, QtGui.QAction] = {}
        for mode in ViewMode:
            action = QtGui.QAction(mode.label, self, checkable=True)
            action.setShortcut(QtGui.QKeySequence(f"Ctrl+{int(mode) + 1}"))
            action.triggered.connect(lambda checked=False, m=mode: self.set_view_mode(m))
            self.view_group.addAction(action)
            self.view_actions[mode] = action
        self.view_actions[ViewMode.SIDE_BY_SIDE].setChecked(True)

    def _build_central(self) -> None:
        self.mode_box = QtWidgets.QComboBox()
        for mode in ViewMode:
            self.mode_box.addItem(mode.label, int(mode))
        self.mode_box.currentIndexChanged.connect(lambda i: self.set_view_mode(ViewMode(self.mode_box.itemData(i))))
        self.split_slider = QtWidgets.QSlider(QtCore.Qt.Orientation.Horizontal)
        self.split_slider.setRange(0, 1000)
        self.split_slider.setValue(500)
        self.split_slider.setToolTip("Overlay: how much of the picture shows the render (left) vs the target")
        self.split_slider.valueChanged.connect(lambda v: self.canvas.set_split(v / 1000))
        self.split_label = QtWidgets.QLabel("render ◀ ▶ target")

        bar = QtWidgets.QHBoxLayout()
        bar.setContentsMargins(6, 4, 6, 0)
        bar.addWidget(QtWidgets.QLabel("View"))
        bar.addWidget(self.mode_box)
        bar.addSpacing(12)
        bar.addWidget(self.split_label)
        bar.addWidget(self.split_slider, 1)
        central = QtWidgets.QWidget()
        layout = QtWidgets.QVBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(bar)
        layout.addWidget(self.canvas, 1)
        self.setCentralWidget(central)
        self._show_split_controls(False)

    def _build_docks(self) -> None:
        self.controls = ControlsPanel(self.act_start)
        self.controls_dock = QtWidgets.QDockWidget("Controls", self)
        self.controls_dock.setObjectName("controls_dock")
        self.controls_dock.setWidget(self.controls)
        self.addDockWidget(QtCore.Qt.DockWidgetArea.LeftDockWidgetArea, self.controls_dock)

        self.plots = PlotsPanel()
        self.plots_dock = QtWidgets.QDockWidget("Plots", self)
        self.plots_dock.setObjectName("plots_dock")
        self.plots_dock.setWidget(self.plots)
        self.addDockWidget(QtCore.Qt.DockWidgetArea.RightDockWidgetArea, self.plots_dock)

        self.controls.triangles_changed.connect(self.worker.set_triangles)
        self.controls.sigma_changed.connect(self.worker.set_sigma)
        self.controls.lr_changed.connect(self.worker.set_learning_rate)
        self.controls.stop_changed.connect(self.worker.set_stop_conditions)
        self.controls.reset_requested.connect(self.reset_fit)

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file_menu = bar.addMenu("&File")
        file_menu.addAction(self.act_open)
        self.recent_menu = file_menu.addMenu("Open &recent")
        self.recent_menu.aboutToShow.connect(self._fill_recent_menu)
        file_menu.addAction(self.act_open_scene)
        file_menu.addSeparator()
        file_menu.addAction(self.act_save)
        file_menu.addAction(self.act_save_as)
        export_menu = file_menu.addMenu("&Export")
        for action in (self.act_export_png, self.act_export_svg, self.act_export_json, self.act_export_report):
            export_menu.addAction(action)
        file_menu.addSeparator()
        file_menu.addAction(self.act_quit)

        fit_menu = bar.addMenu("F&it")
        fit_menu.addAction(self.act_start)
        fit_menu.addAction(self.act_reset)

        view_menu = bar.addMenu("&View")
        view_menu.addAction(self.controls_dock.toggleViewAction())
        view_menu.addAction(self.plots_dock.toggleViewAction())
        view_menu.addSeparator()
        for action in self.view_actions.values():
            view_menu.addAction(action)

        help_menu = bar.addMenu("&Help")
        help_menu.addAction(self.act_about)

    def _build_status_bar(self) -> None:
        status = self.statusBar()
        self.status_adapter = QtWidgets.QLabel(f"{self.engine.backend}: {self.engine.adapter.get('name', '?')}")
        self.status_triangles = QtWidgets.QLabel("– triangles")
        self.status_iteration = QtWidgets.QLabel("iteration –")
        self.status_rate = QtWidgets.QLabel("– it/s")
        self.status_psnr = QtWidgets.QLabel("PSNR –")
        for label in (self.status_adapter, self.status_triangles, self.status_iteration, self.status_rate,
                      self.status_psnr):
            status.addPermanentWidget(label)
        self._fps_timer = QtCore.QTimer(self)
        self._fps_timer.setInterval(1000)
        self._fps_timer.timeout.connect(lambda: self.plots.stats.set_fps(self.canvas.frames_per_second()))
        self._fps_timer.start()

    def _connect_worker(self) -> None:
        s = self.worker.signals
        s.loaded.connect(self._on_loaded)
        s.progress.connect(self._on_progress)
        s.running_changed.connect(self._on_running_changed)
        s.stopped.connect(self._on_stopped)
        s.failed.connect(self.show_error)
        s.applied.connect(self.plots.stats.set_change_latency)
        s.autosaved.connect(self._on_autosaved)
        s.autosave_failed.connect(self._on_autosave_failed)

    # ------------------------------------------------------------------ start-up and restore
    def begin(self, image_path: str | os.PathLike, start: bool = False) -> None:
        """What a start of the app does: offer to restore the session a crashed trifit left
        (if any), else open ``image_path``. The question is non-blocking; ``TRIFIT_RESTORE``
        answers it, and :meth:`answer_restore` is the answer in code."""
        crashed = self.session.find_crashed() if self.session is not None else []
        for other in crashed[1:]:  # one question per start: the newest; the rest wait for later
            self.session.release(other)
        if not crashed:
            self.open_image(image_path, start=start)
            return
        self.restore_offer = crashed[0]
        self._restore_fallback = (str(image_path), start)
        answer = restore_answer_from_env()
        if answer is not None:
            self.answer_restore(answer)
            return
        box = QtWidgets.QMessageBox(
            QtWidgets.QMessageBox.Icon.Question, "Restore the previous session?",
            "trifit did not quit normally last time.\n\nRestore the previous session "
            f"({crashed[0].describe()})?\n\nNo deletes the autosave.",
            QtWidgets.QMessageBox.StandardButton.Yes | QtWidgets.QMessageBox.StandardButton.No, self)
        box.setDefaultButton(QtWidgets.QMessageBox.StandardButton.Yes)
        box.setAttribute(QtCore.Qt.WidgetAttribute.WA_DeleteOnClose)
        yes = box.button(QtWidgets.QMessageBox.StandardButton.Yes)
        box.finished.connect(lambda _result: self.answer_restore(box.clickedButton() is yes))
        self._restore_box = box
        box.open()  # window-modal, not blocking

    def answer_restore(self, restore: bool) -> None:
        """Answer the pending restore question: restore the crashed session (its image, settings
        and scene; the fit starts from that scene) or delete it and open the start-up image."""
        crashed, self.restore_offer = self.restore_offer, None
        box, self._restore_box = self._restore_box, None
        if box is not None and box.isVisible():
            box.done(0)  # answered in code: close the question (its handler finds nothing pending)
        if crashed is None:
            return
        image_path, start = self._restore_fallback
        if not restore:
            self.session.discard(crashed)
            log.info("discarded the autosaved session in %s", crashed.folder)
            if image_path:
                self.open_image(image_path, start=start)
            return
        # Adopted (later autosaves go to its folder) once its fit exists: if the image cannot be
        # read after all, its files stay for a later start instead of going with a clean quit.
        self._restoring = self.restored = crashed
        self.controls.set_params(crashed.params)
        self.controls.set_stop_conditions(crashed.stop)
        self.worker.set_stop_conditions(crashed.stop)
        self.worker.load(crashed.source, crashed.params, init_scene=crashed.scene, start=start)
        log.info("restoring the session autosaved in %s (%s)", crashed.folder, crashed.describe())
        self.show_message(f"Restored the previous session ({crashed.describe()})")

    def _on_autosaved(self, folder: str, iteration: int) -> None:
        self.last_autosave = (folder, iteration)
        self._autosave_error_shown = False
        if not self.statusBar().currentMessage():
            self.statusBar().showMessage(f"Autosaved (iteration {iteration})", 2000)

    def _on_autosave_failed(self, message: str) -> None:
        self.statusBar().showMessage(f"Autosave failed: {message}", 6000)
        if not self._autosave_error_shown:  # one dialog per run of failures, not one per period
            self._autosave_error_shown = True
            self.show_error("Autosave failed", f"The session could not be autosaved: {message}\n\n"
                            "Fitting goes on; save the scene by hand to keep it.")

    # ------------------------------------------------------------------ fit control
    def open_image(self, path: str | os.PathLike, start: bool = False) -> None:
        """Fit ``path`` with the current controls; an unreadable file leaves the current fit running."""
        path = os.path.abspath(os.fspath(path))  # saved scenes and autosaves name it from anywhere
        self.worker.load(path, self.controls.params(), start=start)
        self.statusBar().showMessage(f"Opening {Path(path).name}…", 3000)

    def open_scene(self, path: str | os.PathLike) -> bool:
        """Refine a saved scene against its source image (or the current one)."""
        try:
            scene = render.Scene.load(path)
        except render.SceneError as exc:
            self.show_error("Cannot open scene", str(exc))
            return False
        meta = scene.meta if isinstance(scene.meta, dict) else {}
        source = meta.get("source")
        if not (isinstance(source, str) and Path(source).is_file()):
            source = self.fit_info.source if self.fit_info else None
        if source is None:
            self.show_error("Cannot open scene", "Open the image the scene was made from first: "
                            "the scene does not name a readable source image.")
            return False
        params = self.controls.params()
        params.triangles = scene.n_triangles
        self.worker.load(source, params, init_scene=scene)
        self.scene_path = str(path)
        self._remember_folder(path)
        return True

    def toggle_running(self) -> None:
        if self.running:
            self.worker.pause()
        else:
            self.worker.run()

    def start_fit(self) -> None:
        self.worker.run()

    def pause_fit(self) -> None:
        self.worker.pause()

    def reset_fit(self) -> None:
        self.worker.reset(self.controls.params())

    def set_view_mode(self, mode: ViewMode) -> None:
        mode = ViewMode(mode)
        self.canvas.set_view_mode(mode)
        self.view_actions[mode].setChecked(True)
        with QtCore.QSignalBlocker(self.mode_box):
            self.mode_box.setCurrentIndex(self.mode_box.findData(int(mode)))
        self._show_split_controls(mode == ViewMode.OVERLAY)

    def _show_split_controls(self, visible: bool) -> None:
        self.split_slider.setVisible(visible)
        self.split_label.setVisible(visible)

    # ------------------------------------------------------------------ saving and exporting
    def save_scene(self, path: str | os.PathLike) -> None:
        """Write the scene JSON (atomically); later Ctrl+S saves go to the same file."""
        def saved(written: str) -> None:
            self.scene_path = written
            self.show_message(f"Saved scene to {written}")
        self._run_export(lambda: exports.scene_json_job(path), on_done=saved)

    def export_png(self, path: str | os.PathLike, width: int) -> None:
        if self.fit_info is None:
            return
        w, h = exports.png_size_for_width(width, self.fit_info.width, self.fit_info.height)
        self._run_export(lambda: exports.png_job(path, w, h), "Exported PNG to")

    def export_svg(self, path: str | os.PathLike) -> None:
        self._run_export(lambda: exports.svg_job(path), "Exported SVG to")

    def export_report(self, path: str | os.PathLike) -> None:
        self._run_export(lambda: exports.report_job(path), "Wrote report to")

    def _run_export(self, make_job, done_text: str = "", on_done=None) -> None:
        """Hand an export to the worker; a missing engine module is reported before any work."""
        try:
            job = make_job()
        except exports.ExportUnavailable as exc:
            self.show_error("Export not available", str(exc))
            return
        self.worker.submit(job, on_done=on_done or (lambda path: self.show_message(f"{done_text} {path}")),
                           on_error=lambda msg: self.show_error("Export failed", msg))

    # ------------------------------------------------------------------ dialogs (interactive only)
    def _folder(self) -> str:
        return str(self.settings.value("last_folder", str(Path.home())))

    def _remember_folder(self, path) -> None:
        self.settings.setValue("last_folder", str(Path(path).resolve().parent))

    def ask_open_image(self) -> None:
        path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Open image", self._folder(), IMAGE_FILTER)
        if path:
            self._remember_folder(path)
            self.open_image(path)

    def ask_open_scene(self) -> None:
        path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Open scene to refine", self._folder(), SCENE_FILTER)
        if path:
            self.open_scene(path)

    def _ask_save_path(self, title: str, suffix: str, file_filter: str) -> str | None:
        stem = Path(self.fit_info.source).stem if self.fit_info and self.fit_info.source else "trifit"
        default = str(Path(self._folder()) / f"{stem}{suffix}")
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self, title, default, file_filter)
        if not path:
            return None
        self._remember_folder(path)
        return path

    def ask_save_scene(self, always_ask: bool = False) -> None:
        if self.fit_info is None:
            return
        path = self.scene_path if (self.scene_path and not always_ask) else \
            self._ask_save_path("Save scene", ".json", SCENE_FILTER)
        if path:
            self.save_scene(path)

    def _check_available(self, module: str, name: str) -> bool:
        try:
            exports.engine_function(module, name)
            return True
        except exports.ExportUnavailable as exc:
            self.show_error("Export not available", str(exc))
            return False

    def ask_export_png(self) -> None:
        if self.fit_info is None or not self._check_available("export", "save_png"):
            return
        default = int(self.settings.value("export/png_width", 1024, type=int))
        width, ok = QtWidgets.QInputDialog.getInt(
            self, "Export PNG", f"Width in pixels (height follows the {self.fit_info.width}:"
            f"{self.fit_info.height} aspect ratio):", default, 16, 16384, 16)
        if not ok:
            return
        self.settings.setValue("export/png_width", width)
        path = self._ask_save_path("Export PNG", ".png", "PNG images (*.png)")
        if path:
            self.export_png(path, width)

    def ask_export_svg(self) -> None:
        if self.fit_info is None or not self._check_available("export", "save_svg"):
            return
        path = self._ask_save_path("Export SVG", ".svg", "SVG images (*.svg)")
        if path:
            self.export_svg(path)

    def ask_export_report(self) -> None:
        if self.fit_info is None or not self._check_available("report", "write_report"):
            return
        path = self._ask_save_path("Export report", ".html", "HTML reports (*.html)")
        if path:
            self.export_report(path)

    def show_error(self, title: str, message: str) -> None:
        self.last_error = (title, message)
        log.info("%s: %s", title, message)
        box = QtWidgets.QMessageBox(QtWidgets.QMessageBox.Icon.Warning, title, message,
                                    QtWidgets.QMessageBox.StandardButton.Ok, self)
        box.setAttribute(QtCore.Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()  # window-modal but not blocking: the fit and the preview go on

    def show_message(self, text: str) -> None:
        self.last_message = text
        self.statusBar().showMessage(text, 6000)

    def show_about(self) -> None:
        import numpy
        import pyqtgraph
        import PySide6
        import rendercanvas
        import wgpu

        a = self.engine.adapter
        text = (f"<b>trifit {render.__version__}</b><br>Pictures as N soft triangles, fitted by "
                "gradient descent through a differentiable rasterizer (WGSL via wgpu).<br><br>"
                f"Backend: {self.engine.backend}<br>Adapter: {a.get('name')} ({a.get('backend')}, "
                f"{a.get('type')})<br>Driver: {a.get('driver', '')}<br>"
                f"Canvas: {self._canvas_description()}<br><br>"
                f"Python {platform.python_version()} · wgpu {wgpu.__version__} · rendercanvas "
                f"{rendercanvas.__version__} · PySide6 {PySide6.__version__} (Qt {QtCore.qVersion()}) · "
                f"pyqtgraph {pyqtgraph.__version__} · numpy {numpy.__version__}")
        box = QtWidgets.QMessageBox(QtWidgets.QMessageBox.Icon.Information, "About trifit", text,
                                    QtWidgets.QMessageBox.StandardButton.Ok, self)
        box.setAttribute(QtCore.Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()

    def _canvas_description(self) -> str:
        if isinstance(self.canvas, FitCanvas):
            return f"wgpu, {self.canvas.present_method} present, {self.canvas.texture_format}"
        return "QPainter (no wgpu adapter)"

    # ------------------------------------------------------------------ worker reports
    def _on_loaded(self, info: FitInfo) -> None:
        if self._restoring is not None and info.source == self._restoring.source:
            self.session.adopt(self._restoring)  # its files stay until the fit autosaves over them
            self._restoring = None
        self.fit_info = info
        self.last_stats = None
        self.canvas.set_target(info.target)
        self.plots.clear()
        self.controls.set_triangles_quietly(info.triangles)
        name = Path(info.source).name if info.source else "image"
        self.setWindowTitle(f"trifit — {name} ({info.width}×{info.height}, {info.triangles} triangles)")
        self.status_iteration.setText(f"iteration {info.iteration}")
        self.status_psnr.setText("PSNR –")
        if info.source:
            self._add_recent(info.source)

    def _on_progress(self, progress: Progress) -> None:
        if progress.gpu_image is not None:
            buffer, width, height = progress.gpu_image
            self.canvas.set_render_buffer(buffer, width, height)
            # The worker waits for this frame with the GPU idle: draw it now, then let it go on.
            self.canvas.draw_now()
            self.gpu_gate.frame_handled()
        elif progress.pixels is not None:
            self.canvas.set_render_pixels(progress.pixels)
        self.plots.add_progress(progress)
        stats = progress.stats
        if stats is None:
            return
        self.last_stats = stats
        self.status_iteration.setText(f"iteration {stats.iteration}")
        self.status_rate.setText(f"{stats.it_per_s:.1f} it/s")
        self.status_psnr.setText(f"PSNR {stats.psnr:.2f} dB")
        # The fitter grows towards the count asked for in stages, past it for a while (then prunes
        # back; saves and exports always hold the count asked for): show where it is.
        asked = self.controls.triangles.value()
        pruning = f" (pruning to {asked})" if stats.n_triangles > asked else ""
        self.status_triangles.setText(f"{stats.n_triangles} triangles{pruning}")

    def _on_running_changed(self, running: bool) -> None:
        self.running = running
        self.act_start.setText("Pause" if running else "Start")

    def _on_stopped(self, reason: str) -> None:
        self.show_message(f"Stopped: {reason}")

    # ------------------------------------------------------------------ recent files
    def _recent(self) -> list[str]:
        value = self.settings.value("recent", [])
        if isinstance(value, str):
            value = [value]
        return [str(v) for v in (value or [])]

    def _add_recent(self, path: str) -> None:
        path = str(Path(path).resolve())
        items = [p for p in self._recent() if p != path]
        self.settings.setValue("recent", [path] + items[: MAX_RECENT - 1])

    def _fill_recent_menu(self) -> None:
        self.recent_menu.clear()
        items = self._recent()
        if not items:
            self.recent_menu.addAction("(none)").setEnabled(False)
            return
        for path in items:
            self.recent_menu.addAction(Path(path).name, lambda p=path: self.open_image(p)).setToolTip(path)

    # ------------------------------------------------------------------ drag and drop
    @staticmethod
    def _dropped_file(event) -> str | None:
        mime = event.mimeData()
        if mime is None or not mime.hasUrls():
            return None
        for url in mime.urls():
            if url.isLocalFile():
                return url.toLocalFile()
        return None

    def dragEnterEvent(self, event):  # noqa: N802 - Qt override
        if self._dropped_file(event):
            event.acceptProposedAction()

    def dragMoveEvent(self, event):  # noqa: N802
        if self._dropped_file(event):
            event.acceptProposedAction()

    def dropEvent(self, event):  # noqa: N802
        path = self._dropped_file(event)
        if not path:
            return
        event.acceptProposedAction()
        if path.lower().endswith(".json"):
            self.open_scene(path)
        else:
            self._remember_folder(path)
            self.open_image(path)

    # ------------------------------------------------------------------ settings and shutdown
    def _restore_settings(self) -> None:
        s = self.settings
        geometry = s.value("geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        else:
            self.resize(1280, 760)
        state = s.value("window_state")
        if state is None or not self.restoreState(state):
            # First run: keep the canvas the widest part of the window.
            self.resizeDocks([self.controls_dock, self.plots_dock], [230, 360], QtCore.Qt.Orientation.Horizontal)
        self.controls.set_params(FitParams(
            triangles=s.value("params/triangles", 150, type=int),
            size=s.value("params/size", 176, type=int),
            seed=s.value("params/seed", 0, type=int),
            sigma_px=s.value("params/sigma_px", 0.0, type=float) or None,
            lr_scale=s.value("params/lr_scale", 1.0, type=float),
        ))
        self.controls.set_stop_conditions(StopConditions(
            iterations=s.value("stop/iterations", 0, type=int) or None,
            time_limit=s.value("stop/time_limit", 0.0, type=float) or None,
            target_psnr=s.value("stop/target_psnr", 0.0, type=float) or None,
            plateau=s.value("stop/plateau", 0, type=int) or None,
        ))
        self.plots.log_loss.setChecked(s.value("plots/log_loss", True, type=bool))
        self.set_view_mode(ViewMode(s.value("view/mode", 0, type=int) % len(ViewMode)))
        # What the worker starts with (the spin boxes were set without signals).
        p = self.controls.params()
        self.worker.set_sigma(p.sigma_px)
        self.worker.set_learning_rate(p.lr_scale)
        self.worker.set_stop_conditions(self.controls.stop_conditions())

    def _save_settings(self) -> None:
        s = self.settings
        s.setValue("geometry", self.saveGeometry())
        s.setValue("window_state", self.saveState())
        p = self.controls.params()
        s.setValue("params/triangles", p.triangles)
        s.setValue("params/size", p.size)
        s.setValue("params/seed", p.seed)
        s.setValue("params/sigma_px", p.sigma_px or 0.0)
        s.setValue("params/lr_scale", p.lr_scale)
        stop = self.controls.stop_conditions()
        s.setValue("stop/iterations", stop.iterations or 0)
        s.setValue("stop/time_limit", stop.time_limit or 0.0)
        s.setValue("stop/target_psnr", stop.target_psnr or 0.0)
        s.setValue("stop/plateau", stop.plateau or 0)
        s.setValue("plots/log_loss", self.plots.log_loss.isChecked())
        s.setValue("view/mode", int(self.canvas.state.mode))
        s.sync()

    def shutdown(self) -> bool:
        """Stop the worker thread and release the fit (idempotent); True when the thread ended."""
        if isinstance(self.canvas, FitCanvas):
            self.canvas.release_gpu_turn()  # the worker may need the gate to finish its chunk
        ended = self.worker.shutdown()
        if not ended:
            log.warning("the fit worker did not stop in time")
        if self.session is not None:
            for crashed in (self.restore_offer, self._restoring):  # not answered, or not restored
                if crashed is not None:                              # after all: ask next time
                    self.session.release(crashed)
            self.restore_offer = self._restoring = None
            if ended:  # a normal quit: nothing to restore next time
                self.session.close_clean()
        return ended

    def closeEvent(self, event):  # noqa: N802 - Qt override
        self._save_settings()
        self.shutdown()
        super().closeEvent(event)
