"""The main window: canvas in the middle, controls and plots in docks, menus, status bar.

The window is the GUI thread's only link to the fit: it forwards user actions to the
:class:`~app.worker.FitWorker` and renders what the worker reports. It never calls a Fitter
method and never waits on the GPU. Dialogs about failures are opened non-modally (``open()``),
so the event loop and the preview keep running while one is up.

A clip (a video, or a folder of frames) is fitted frame by frame by the worker through the
engine's frame loop; the window shows each frame's target beside the render, counts the frames
in the status bar, keeps every fitted frame's scene (:attr:`MainWindow.clip_scenes`, a few KB a
frame) for File > Export > Video (app/video_export.py), and shows the Video group of the controls.

With a :class:`~app.session.SessionStore` the fit is autosaved while it runs, and
:meth:`MainWindow.begin` offers to restore a session a crashed trifit left behind.
"""

from __future__ import annotations

import logging
import os
import platform
from pathlib import Path

from PySide6 import QtCore, QtGui, QtWidgets

import trifit

from . import edit_tool
from .canvas import FitCanvas, make_canvas
from .canvas_view import CanvasView
from .controls import ControlsPanel
from .export_dialog import ExportDialog
from .export_progress import ExportProgress
from .file_actions import FileActions
from .gpu_gate import GpuGate
from .panes import ViewMode
from .picture_export import PictureExport
from .plots import PlotsPanel
from .session import SessionStore
from .session_actions import SessionActions
from .session_record import CrashedSession
from .video_export import VideoExport
from .window_settings import WindowSettings
from .work_questions import WorkQuestions
from .worker import FitInfo, FitWorker, Progress

log = logging.getLogger("trifit.app")



class MainWindow(FileActions, WorkQuestions, SessionActions, WindowSettings, QtWidgets.QMainWindow):
    def __init__(self, engine: trifit.Engine, settings: QtCore.QSettings | None = None,
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
        self.picture_export: PictureExport | None = None   # the latest picture export (running or ended)
        self.video_export: VideoExport | None = None       # the latest video export (running or ended)
        self.clip = None                                   # the open clip's trifit.video.Clip; None: a picture
        self.clip_scenes: list = []                        # its fitted frames' scenes, in order
        self.clip_exported = 0                             # how many of them the last video exported
        self.export_dialog: ExportDialog | None = None     # the latest export dialog opened
        self.ask_to_save = False      # the app sets it: a close or open that would lose work asks first (work_questions.py)
        self.unsaved = False          # the fit moved on since it was loaded or last saved
        self._close_answered = False  # the fit's question was answered: the next close goes through
        self.question_box: QtWidgets.QMessageBox | None = None  # such a question, while it is open
        self.setWindowTitle("trifit")
        self.setAcceptDrops(True)

        self.canvas = make_canvas(engine, present_method, self.gpu_gate)
        self._build_actions()
        self._build_central()
        self._build_docks()
        self._build_menus()
        self._build_status_bar()
        self._connect_worker()
        self._show_fit_actions()
        self.edit_tool = edit_tool.install(self)  # edit mode: the Edit menu and dock (app/edit_tool.py)
        for box in self.findChildren(QtWidgets.QAbstractSpinBox):
            box.installEventFilter(self)  # Space starts and pauses the fit there too
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
        self.act_open = self._action("&Open image or video…", self.ask_open_image, key.Open)
        self.act_open_scene = self._action("Open &scene to refine…", self.ask_open_scene)
        self.act_save = self._action("&Save scene", self.ask_save_scene, key.Save)
        self.act_save_as = self._action("Save scene &as…", lambda: self.ask_save_scene(always_ask=True),
                                        key.SaveAs)
        self.act_export_png = self._action("&Picture (PNG, JPEG, WebP)…", self.ask_export_png,
                                           tip="A picture of the fit at any size, crisp or as fitted")
        self.act_export_svg = self._action("&SVG…", self.ask_export_svg)
        self.act_export_json = self._action("Scene &JSON…", lambda: self.ask_save_scene(always_ask=True))
        self.act_export_report = self._action("&Report (HTML)…", self.ask_export_report)
        self.act_export_video = self._action("&Video (MP4, WebM, GIF)…", self.ask_export_video,
                                             tip="The clip's fitted frames as a video, at its frame rate")
        self.act_export_video.setEnabled(False)  # a clip's
        self.act_quit = self._action("&Quit", self.close, key.Quit)
        self.act_start = self._action("Start", self.toggle_running, QtCore.Qt.Key.Key_Space,
                                      "Start or pause the fit (Space)")
        self.act_start.setShortcutContext(QtCore.Qt.ShortcutContext.WindowShortcut)
        self.act_reset = self._action("Reset", self.reset_fit, tip="A fresh fit with the current settings")
        # what needs a fit: off until the first image or clip has loaded (_show_fit_actions)
        self.fit_actions = (self.act_save, self.act_save_as, self.act_export_png, self.act_export_svg,
                            self.act_export_json, self.act_export_report, self.act_start, self.act_reset)
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

    def _show_fit_actions(self) -> None:
        """Saving, exporting, Start and Reset are on once a fit is loaded (they would do nothing before)."""
        on = self.fit_info is not None
        for action in self.fit_actions:
            action.setEnabled(on)
        self.controls.reset_button.setEnabled(on)

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
        self.canvas_view = CanvasView(self.canvas, self.act_open.shortcut())  # a hint until an image is open
        layout.addWidget(self.canvas_view, 1)
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
        self.controls.triangles_changed.connect(lambda _n: self._update_title())
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
        for action in (self.act_export_png, self.act_export_svg, self.act_export_json, self.act_export_report,
                       self.act_export_video):
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
        self.export_progress = ExportProgress()
        status.addPermanentWidget(self.export_progress)
        self.status_adapter = QtWidgets.QLabel(f"{self.engine.backend}: {self.engine.adapter.get('name', '?')}")
        self.status_triangles = QtWidgets.QLabel("– triangles")
        self.status_iteration = QtWidgets.QLabel("iteration –")
        self.status_rate = QtWidgets.QLabel("– it/s")
        self.status_psnr = QtWidgets.QLabel("PSNR –")
        self.status_frame = QtWidgets.QLabel()   # a clip's: "frame 12 / 48" (", a new shot from frame 9")
        self.status_frame.hide()
        for label in (self.status_adapter, self.status_frame, self.status_triangles, self.status_iteration,
                      self.status_rate, self.status_psnr):
            status.addPermanentWidget(label)
        self._fps_timer = QtCore.QTimer(self)
        self._fps_timer.setInterval(1000)
        self._fps_timer.timeout.connect(lambda: self.plots.stats.set_fps(self.canvas.frames_per_second()))
        self._fps_timer.start()

    def _connect_worker(self) -> None:
        s = self.worker.signals
        s.loaded.connect(self._on_loaded)
        s.progress.connect(self._on_progress)
        s.frame_started.connect(self._on_frame_started)
        s.frame_done.connect(self._on_frame_done)
        s.running_changed.connect(self._on_running_changed)
        s.stopped.connect(self._on_stopped)
        s.failed.connect(self.show_error)
        s.applied.connect(self._on_applied)
        s.autosaved.connect(self._on_autosaved)
        s.autosave_failed.connect(self._on_autosave_failed)

    # ------------------------------------------------------------------ start-up and restore
    # ------------------------------------------------------------------ fit control
    def open_image(self, path: str | os.PathLike, start: bool = False) -> None:
        """Fit ``path`` with the current controls; an unreadable file leaves the current fit running."""
        path = os.path.abspath(os.fspath(path))  # saved scenes and autosaves name it from anywhere
        self.worker.load(path, self.controls.params(), start=start)
        self.statusBar().showMessage(f"Opening {Path(path).name}…", 3000)
        if self.fit_info is None:
            self.canvas_view.show_hint(f"Opening {Path(path).name}…")

    def open_video(self, path: str | os.PathLike, start: bool = False) -> None:
        """Fit a clip (a video file or a folder of frames) frame by frame with the current
        controls; one that cannot be read is said in a dialog and the current fit goes on."""
        path = os.path.abspath(os.fspath(path))
        self.worker.load_clip(path, self.controls.params(), self.controls.video_params(), start=start)
        self.statusBar().showMessage(f"Opening {Path(path).name} (every frame is read once)…", 3000)
        if self.fit_info is None:
            self.canvas_view.show_hint(f"Opening {Path(path).name}…")

    def open_scene(self, path: str | os.PathLike) -> bool:
        """Refine a saved scene against its source image (or the current one)."""
        try:
            scene = trifit.Scene.load(path)
        except trifit.SceneError as exc:
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

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 - Qt override
        """A spin box with focus would take Space as typing (a number has no spaces): let it
        reach the Start / Pause shortcut instead."""
        if (event.type() == QtCore.QEvent.Type.ShortcutOverride and event.key() == QtCore.Qt.Key.Key_Space
                and event.modifiers() == QtCore.Qt.KeyboardModifier.NoModifier):
            return True  # not accepted by the box: the shortcut fires
        return super().eventFilter(obj, event)

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
        self.worker.reset(self.controls.params(), self.controls.video_params() if self.clip is not None else None)

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
    def show_error(self, title: str, message: str) -> None:
        self.last_error = (title, message)
        log.info("%s: %s", title, message)
        if self.fit_info is None:
            self.canvas_view.show_hint()  # e.g. the open failed: say again what to do
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
        text = (f"<b>trifit {trifit.__version__}</b><br>Pictures as N soft triangles, fitted by "
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
        restored = self._restoring is not None and info.source == self._restoring.source
        if restored:
            self.session.adopt(self._restoring)  # its files stay until the fit autosaves over them
            self._restoring = None
        self.fit_info = info
        self.unsaved = restored  # (a restored fit exists only in the autosave, which a normal close removes)
        self._show_fit_actions()
        self.last_stats = None
        self._follow_engine_device()
        self.canvas.set_target(info.target)
        self.canvas_view.show_canvas()
        self.plots.clear()
        self.controls.set_triangles_quietly(info.triangles)
        self._update_title()
        self.status_iteration.setText(f"iteration {info.iteration}")
        self.status_psnr.setText("PSNR –")
        self.clip, self.clip_scenes, self.clip_exported = info.clip, [], 0
        self.status_frame.setVisible(info.clip is not None)
        self.controls.video_group.setVisible(info.clip is not None)
        self.act_export_video.setEnabled(info.clip is not None)
        if info.source:
            self._add_recent(info.source)

    def _on_frame_started(self, k: int, count: int, shot: int, target) -> None:
        """A clip's frame began: its target beside the render, the counter on (and, in a later
        shot -- a cut, a fade in, a dissolve's end: render/shots.py -- where that shot began)."""
        if k > 0:  # (the first frame's is the new fit's, shown when it was loaded)
            if self.fit_info is not None:
                self.fit_info.target = target
            self.canvas.set_target(target, keep_render=True)
        self.status_frame.setText(f"frame {k + 1} / {count}" + (f", a new shot from frame {shot + 1}" if shot else ""))

    def _on_frame_done(self, k: int, scene) -> None:
        if k == len(self.clip_scenes):  # (frames of a clip replaced meanwhile are not kept)
            self.clip_scenes.append(scene)

    def _update_title(self) -> None:
        """The title names the image and the count set (it follows live changes)."""
        info = self.fit_info
        if info is None:
            return
        name = Path(info.source).name if info.source else "image"
        self.setWindowTitle(f"trifit — {name} ({info.width}×{info.height}, "
                            f"{self.controls.triangles.value()} triangles)")

    def _follow_engine_device(self) -> None:
        """After a device reset (the fitter recovered from a lost device) the engine computes on
        a new device: the canvas is rebuilt there, since it binds the fitter's image buffer."""
        device = self.engine.device
        if device is None or not isinstance(self.canvas, FitCanvas) or self.canvas.device is device:
            return
        old = self.canvas
        self.canvas = make_canvas(self.engine, old.present_method, self.gpu_gate)
        self.canvas.set_view_mode(old.state.mode)
        self.canvas.set_split(old.state.split)
        if self.fit_info is not None:
            self.canvas.set_target(self.fit_info.target)
        self.canvas_view.replace_canvas(self.canvas)
        self.edit_tool.attach(self.canvas)
        old.close()
        old.deleteLater()
        log.warning("the GPU device was replaced: the canvas now draws on the new one")

    def _on_applied(self, kind: str, seconds: float) -> None:
        self.plots.stats.set_change_latency(kind, seconds)
        if kind in ("triangles", "sigma"):  # (on a paused fit: the scene a save writes changed)
            self.note_unsaved()

    def _on_progress(self, progress: Progress) -> None:
        self._follow_engine_device()
        if progress.gpu_image is not None:
            self.canvas.set_render_buffer(*progress.gpu_image)
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
        self.note_unsaved()
        self.status_iteration.setText(f"iteration {stats.iteration}")
        self.status_rate.setText(f"{stats.it_per_s:.1f} it/s")
        self.status_psnr.setText(f"PSNR {stats.psnr:.2f} dB")
        # The count shown is the count set; while the fit grows towards it in stages, or past it
        # for a while and prunes back (saves and exports always hold the count set), the working
        # count stands beside it.
        asked, now = self.controls.triangles.value(), stats.n_triangles
        phase = "" if now == asked else f" (now {now}, {'pruning' if now > asked else 'growing'})"
        self.status_triangles.setText(f"{asked} triangles{phase}")

    def _on_running_changed(self, running: bool) -> None:
        self.running = running
        self.act_start.setText("Pause" if running else "Start")

    def _on_stopped(self, reason: str) -> None:
        self.show_message(f"Stopped: {reason}")

    # ------------------------------------------------------------------ recent files
    def shutdown(self) -> bool:
        """Stop the worker thread and release the fit (idempotent); True when the thread ended."""
        if isinstance(self.canvas, FitCanvas):
            self.canvas.release_gpu_turn()  # the worker may need the gate to finish its chunk
        exports = [e for e in (self.picture_export, self.video_export) if e is not None]
        for export in exports:
            export.cancel()  # a file not written yet is not written
        ended = self.worker.shutdown()
        if not ended:
            log.warning("the fit worker did not stop in time")
        for export in exports:
            if not export.join():
                log.warning("the %s export did not stop in time", export.label.lower())
        if self.session is not None:
            for crashed in (self.restore_offer, self._restoring):  # not answered, or not restored
                if crashed is not None:                              # after all: ask next time
                    self.session.release(crashed)
            self.restore_offer = self._restoring = None
            if ended:  # a normal quit: nothing to restore next time
                self.session.close_clean()
        return ended

    def closeEvent(self, event):  # noqa: N802 - Qt override
        if self.close_needs_answer():
            event.ignore()  # the question decides (app/work_questions.py)
            if self.question_box is None:
                self.ask_before_close()
            return
        self._save_settings()
        self.shutdown()
        super().closeEvent(event)
