"""The main window's remembered state (QSettings): geometry and docks, the fit's parameters,
a clip's iterations and stop conditions, plot and view choices. A mixin of :class:`app.window.MainWindow`."""

from __future__ import annotations

from PySide6 import QtCore

from trifit import StopConditions

from .panes import ViewMode
from .worker import FitParams, VideoParams


class WindowSettings:
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
            replicas=s.value("params/replicas", 0, type=int),  # (the box keeps it within its range)
            sharp=s.value("params/sharp", False, type=bool),
        ))
        video = VideoParams()
        self.controls.set_video_params(VideoParams(
            iters_per_frame=s.value("video/iters_per_frame", video.iters_per_frame, type=int),
            first_frame_iters=s.value("video/first_frame_iters", video.first_frame_iters, type=int),
            steady=s.value("video/steady", video.steady, type=float),
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
        s.setValue("params/replicas", p.replicas)
        s.setValue("params/sharp", p.sharp)
        video = self.controls.video_params()
        s.setValue("video/iters_per_frame", video.iters_per_frame)
        s.setValue("video/first_frame_iters", video.first_frame_iters)
        s.setValue("video/steady", video.steady)
        stop = self.controls.stop_conditions()
        s.setValue("stop/iterations", stop.iterations or 0)
        s.setValue("stop/time_limit", stop.time_limit or 0.0)
        s.setValue("stop/target_psnr", stop.target_psnr or 0.0)
        s.setValue("stop/plateau", stop.plateau or 0)
        s.setValue("plots/log_loss", self.plots.log_loss.isChecked())
        s.setValue("view/mode", int(self.canvas.state.mode))
        s.sync()
