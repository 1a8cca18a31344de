"""The questions before a close or an open would lose work, for :class:`app.window.MainWindow`
(a mixin: the window owns the state read here).

- **An export being written** (closing only): Close when done / Stop it and close / Cancel.
- **A picture's fit that moved on since it was loaded or last saved** (iterations, edits, a count
  or sigma set while paused), or restored after a crash (the autosave, which a normal close
  removes, is its only copy): Save (to the last Ctrl+S file, or one named) / Discard / Cancel.
- **A clip's fitted frames not in a video exported since**: Export video (then the close or the
  open, once it is written) / Discard / Cancel.

Only the app asks (``ask_to_save``, set by ``trifit gui``); scripts and tests close and open at
once. Every question is a window-modal box that does not block the event loop: the fit and any
export go on while it is open."""

from __future__ import annotations

from pathlib import Path

from PySide6 import QtCore, QtWidgets

from .video_export import VIDEO_FILTER

B = QtWidgets.QMessageBox.StandardButton


class WorkQuestions:
    def note_unsaved(self) -> None:
        """The fit moved on (iterations ran, an edit) since it was loaded or last saved."""
        self.unsaved = True

    def running_export(self):
        """The picture or video export in progress, if any."""
        return next((e for e in (self.picture_export, self.video_export) if e is not None and e.active), None)

    def fit_needs_answer(self) -> bool:
        """Would replacing the fit now lose work: a picture's fit that moved on since it was saved,
        or a clip's fitted frames not in a video exported since?"""
        if not self.ask_to_save or self.fit_info is None:
            return False
        if self.clip is not None:
            return len(self.clip_scenes) > self.clip_exported
        return self.unsaved

    def close_needs_answer(self) -> bool:
        """Would closing now lose work: an export being written, or the fit's (fit_needs_answer)?"""
        if not self.ask_to_save:
            return False
        return self.running_export() is not None or (not self._close_answered and self.fit_needs_answer())

    def ask_before_close(self) -> None:
        """An export being written is asked about first; once it has ended, the close asks the
        fit's question too where there is work to lose."""
        export = self.running_export()
        if export is None:
            self._ask_about_fit("closing", self._close_now)
            return
        self._ask("Export in progress",
                  f"The export to {Path(export.path).name} is not written yet. Close once it is, or stop it?",
                  {B.Save: "Close when done", B.Discard: "Stop it and close"},
                  lambda answer: self._close_after(export, stop=answer == B.Discard) if answer != B.Cancel else None)

    def replace_fit(self, open_with, path) -> None:
        """``open_with(path)`` (an open that replaces the fit) at once, or after the fit's question
        where there is work to lose."""
        if self.fit_needs_answer():
            self._ask_about_fit(f"opening {Path(path).name}", lambda: open_with(path))
        else:
            open_with(path)

    # ------------------------------------------------------------------ the boxes and their answers
    def _ask_about_fit(self, before: str, then) -> None:
        name = Path(self.fit_info.source).name if self.fit_info.source else "the picture"
        if self.clip is not None:
            n = len(self.clip_scenes)
            many = n != 1
            title, text = "Export the clip?", (
                f"{n} fitted frame{'s' if many else ''} of {name} {'are' if many else 'is'} not in a video "
                f"exported since. Export {'them' if many else 'it'} before {before}?")
            labels = {B.Save: "Export video…"}
        else:
            title = "Save the fit?"
            text = f"The fit of {name} has changed since it was last saved. Save it before {before}?"
            labels = {}

        def answered(answer) -> None:
            if answer == B.Discard:
                then()
            elif answer == B.Save and self.clip is not None:
                self._export_then(then)
            elif answer == B.Save:
                self.ask_save_scene(then=then)  # (no name chosen: nothing happens)
        self._ask(title, text, labels, answered)

    def _ask(self, title: str, text: str, labels: dict, answered) -> None:
        box = QtWidgets.QMessageBox(QtWidgets.QMessageBox.Icon.Question, title, text,
                                    B.Save | B.Discard | B.Cancel, self)
        for button, label in labels.items():
            box.button(button).setText(label)
        box.setDefaultButton(B.Save)
        box.setAttribute(QtCore.Qt.WidgetAttribute.WA_DeleteOnClose)

        def finished(answer: int) -> None:
            self.question_box = None
            answered(B(answer))
        box.finished.connect(finished)
        self.question_box = box
        box.open()

    def _close_after(self, export, stop: bool) -> None:
        """Close once ``export`` has ended: written (then the fit's own question, if any), or, with
        ``stop``, cancelled. A write that fails or is cancelled otherwise keeps the window open."""
        def ended(*_):
            if self.isVisible():
                self.close()
        if not export.active:  # (it ended while the question was open)
            ended()
            return
        export.finished.connect(ended)
        if stop:
            export.cancelled.connect(ended)
            export.failed.connect(ended)
            export.cancel()

    def _export_then(self, then) -> None:
        """The clip's video, then ``then()`` once it is written (cancelled or failed: nothing more,
        and the next close or open asks again). The fit pauses: frames fitted after the export
        began would not be in it."""
        path = self._ask_save_path("Export video", ".trifit.mp4", VIDEO_FILTER)
        if not path:
            return
        self.pause_fit()
        self.export_video(path, then=then)

    def _close_now(self) -> None:
        self._close_answered = True
        self.close()
