"""The main window's file side: open, save and export dialogs, exports run on the worker
thread (pictures as a chain of tile jobs: app/picture_export.py; a clip's video as a chain of
frame jobs: app/video_export.py), the recent-files menu, drag and drop (a video, or a folder of
frames, opens as a clip; the questions before an open replaces work not saved are
app/work_questions.py's). A mixin of :class:`app.window.MainWindow`, which owns the state these
methods use (worker, settings, status and error display, the export progress widget)."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6 import QtWidgets

from trifit.errors import TrifitError
from trifit.fileutil import check_writable
from trifit.video import VIDEO_SUFFIXES, is_clip

from . import exports
from .export_dialog import ExportDialog
from .picture_export import PictureExport
from .video_export import VIDEO_FILTER, VideoExport

_IMAGES = "*.png *.jpg *.jpeg *.bmp *.gif *.tif *.tiff *.webp *.ppm *.pgm"
_VIDEOS = " ".join(f"*{s}" for s in VIDEO_SUFFIXES)
OPEN_FILTER = f"Images and videos ({_IMAGES} {_VIDEOS});;Images ({_IMAGES});;Videos ({_VIDEOS});;All files (*)"
SCENE_FILTER = "trifit scenes (*.json);;All files (*)"
MAX_RECENT = 8


class FileActions:
    def save_scene(self, path: str | os.PathLike, then=None) -> None:
        """Write the scene JSON (atomically); later Ctrl+S saves go to the same file. ``then()``
        runs once it is written (not if the save fails)."""
        def saved(written: str) -> None:
            self.scene_path = written
            self.unsaved = self.running  # (a running fit has moved on since the scene was taken)
            self.show_message(f"Saved scene to {written}")
            if then is not None:
                then()
        self._run_export(lambda: exports.scene_json_job(path), on_done=saved)

    def export_png(self, path: str | os.PathLike, width: int, edges: str = "crisp") -> PictureExport | None:
        """A picture ``width`` pixels wide, the fit's aspect kept (see :meth:`export_picture`)."""
        return self.export_picture(path, width=width, edges=edges)

    def export_picture(self, path: str | os.PathLike, *, scale: float | None = None, width: int | None = None,
                       edges: str = "crisp") -> PictureExport | None:
        """Export the fit as a PNG / JPEG / WebP picture (format by suffix) at ``scale`` x the
        fit's frame or ``width`` pixels wide, with ``edges`` "crisp" or "fit" (as ``trifit render``).

        Tiles render on the worker between fit chunks; the status bar shows the progress and a
        Cancel button. A path or size that cannot work is refused here, before any work. Returns
        the running export, or None when refused (the reason shown in a dialog)."""
        if self.fit_info is None:
            return None
        if self.picture_export is not None and self.picture_export.active:
            self.show_error("Export running", "A picture export is running: wait for it, or cancel it first.")
            return None
        try:
            picture_size = exports.engine_function("export", "picture_size")
            size = picture_size((self.fit_info.width, self.fit_info.height), scale=scale, width=width)
            job = PictureExport(self.worker, path, size, edges, lambda: self.running, parent=self)
            check_writable(job.path)
        except exports.ExportUnavailable as exc:
            self.show_error("Export not available", str(exc))
            return None
        except TrifitError as exc:
            self.show_error("Cannot export", str(exc))
            return None
        self.picture_export = self._start_export(job, lambda written: f"Exported picture to {written}")
        return job

    def export_video(self, path: str | os.PathLike, edges: str = "crisp", then=None) -> VideoExport | None:
        """Write the clip's fitted frames as a video (encoder by suffix, as ``trifit video``), at
        the clip's frame size and rate, with its sound when the container takes it. Frames render
        on the worker between fit chunks; the status bar shows the progress and a Cancel button.
        ``then()`` runs once it is written. Returns the running export, or None when refused (the
        reason shown in a dialog)."""
        if self.clip is None:
            return None
        if self.video_export is not None and self.video_export.active:
            self.show_error("Export running", "A video export is running: wait for it, or cancel it first.")
            return None
        try:
            if Path(path).resolve() == Path(self.clip.path).resolve():
                raise TrifitError(f"{Path(path).name} is the clip being fitted: choose another name")
            check_writable(Path(path))
            job = VideoExport(self.worker, path, self.clip, self.clip_scenes, edges=edges,
                              fit_running=lambda: self.running, parent=self)
        except TrifitError as exc:
            self.show_error("Cannot export", str(exc))
            return None
        count, clip = len(job.scenes), self.clip
        of = "" if job.complete else f" ({count} of {self.clip.count} frames: the ones fitted so far)"

        def exported(written: str) -> None:
            if self.clip is clip:  # (not a clip loaded since, nor the same one reset)
                self.clip_exported = max(self.clip_exported, count)
            if then is not None:
                then()
        job.finished.connect(exported)
        self.video_export = self._start_export(job, lambda written: f"Exported {count} frames to {written}{of}")
        return job

    def _start_export(self, job, done_text):
        """Say how ``job`` ends (``done_text(path)`` in the status bar), show its progress, start it."""
        job.finished.connect(lambda written: self.show_message(done_text(written)))
        job.failed.connect(lambda message: self.show_error("Export failed", message))
        job.cancelled.connect(lambda: self.show_message("Export cancelled: nothing was written"))
        self.export_progress.watch(job)
        job.start()
        return job

    def _render_preview(self, job, on_done, on_error) -> None:
        self.worker.submit(job, on_done=on_done, on_error=on_error)

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

    def open_file(self, path: str | os.PathLike, start: bool = False) -> None:
        """Open a picture, or a clip (a video by its suffix, or a folder of frames)."""
        if is_clip(path):
            self.open_video(path, start=start)
        else:
            self.open_image(path, start=start)

    def ask_open_image(self) -> None:
        path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Open image or video", self._folder(), OPEN_FILTER)
        if path:
            self._remember_folder(path)
            self.replace_fit(self.open_file, path)

    def ask_open_scene(self) -> None:
        path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Open scene to refine", self._folder(), SCENE_FILTER)
        if path:
            self.replace_fit(self.open_scene, path)

    def _ask_save_path(self, title: str, suffix: str, file_filter: str) -> str | None:
        stem = Path(self.fit_info.source).stem if self.fit_info and self.fit_info.source else "trifit"
        default = str(Path(self._folder()) / f"{stem}{suffix}")
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self, title, default, file_filter)
        if not path:
            return None
        self._remember_folder(path)
        return path

    def ask_save_scene(self, always_ask: bool = False, then=None) -> None:
        """Save to the last Ctrl+S file, or ask for one (``always_ask``: Save as); ``then()`` as
        :meth:`save_scene`. No name chosen: nothing happens."""
        if self.fit_info is None:
            return
        path = self.scene_path if (self.scene_path and not always_ask) else \
            self._ask_save_path("Save scene", ".json", SCENE_FILTER)
        if path:
            self.save_scene(path, then=then)

    def _check_available(self, module: str, name: str) -> bool:
        try:
            exports.engine_function(module, name)
            return True
        except exports.ExportUnavailable as exc:
            self.show_error("Export not available", str(exc))
            return False

    def ask_export_png(self) -> None:
        """The export dialog (non-blocking); the export starts once it has closed."""
        if self.fit_info is None or not self._check_available("export", "iter_tiles"):
            return
        if self.picture_export is not None and self.picture_export.active:
            self.show_error("Export running", "A picture export is running: wait for it, or cancel it first.")
            return
        s = self.settings
        stem = Path(self.fit_info.source).stem if self.fit_info.source else "trifit"
        suffix = str(s.value("export/suffix", ".png"))
        dialog = ExportDialog(self, (self.fit_info.width, self.fit_info.height),
                              str(Path(self._folder()) / f"{stem}.trifit{suffix}"), self._render_preview,
                              source=self.fit_info.source,
                              by_width=s.value("export/by", "scale") == "width",
                              scale=float(s.value("export/scale", 4.0, type=float)),
                              width=int(s.value("export/png_width", 1024, type=int)),
                              edges=str(s.value("export/edges", "crisp")), fitted_crisp=self.fit_info.crisp)
        dialog.accepted.connect(lambda: self._export_chosen(dialog))
        dialog.finished.connect(dialog.deleteLater)
        self.export_dialog = dialog
        dialog.open()

    def _export_chosen(self, dialog: ExportDialog) -> None:
        choice = dialog.choice()
        s = self.settings
        s.setValue("export/by", "width" if choice.by_width else "scale")
        s.setValue("export/scale", choice.scale)
        s.setValue("export/png_width", choice.width)
        s.setValue("export/edges", choice.edges)
        s.setValue("export/suffix", Path(choice.path).suffix.lower())
        self._remember_folder(choice.path)
        if choice.by_width:
            self.export_picture(choice.path, width=choice.width, edges=choice.edges)
        else:
            self.export_picture(choice.path, scale=choice.scale, edges=choice.edges)

    def ask_export_svg(self) -> None:
        if self.fit_info is None or not self._check_available("export", "save_svg"):
            return
        path = self._ask_save_path("Export SVG", ".svg", "SVG images (*.svg)")
        if path:
            self.export_svg(path)

    def ask_export_video(self) -> None:
        if self.clip is None or not self.clip_scenes:
            self.show_error("Nothing to export", "No frame of the clip is fitted yet: press Start.")
            return
        path = self._ask_save_path("Export video", ".trifit.mp4", VIDEO_FILTER)
        if path:
            self.export_video(path)

    def ask_export_report(self) -> None:
        if self.fit_info is None or not self._check_available("report", "write_report"):
            return
        path = self._ask_save_path("Export report", ".html", "HTML reports (*.html)")
        if path:
            self.export_report(path)

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
            there = Path(path).exists()  # (moved or deleted since: shown, but not offered)
            action = self.recent_menu.addAction(Path(path).name if there else f"{Path(path).name} (missing)",
                                                lambda p=path: self.replace_fit(self.open_file, p))
            action.setToolTip(path)
            action.setEnabled(there)

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
            self.replace_fit(self.open_scene, path)
        else:
            self._remember_folder(path)
            self.replace_fit(self.open_file, path)

    # ------------------------------------------------------------------ settings and shutdown
