"""The main window's side of autosave and crash restore: the start-up question, restoring a
crashed session, autosave status. A mixin of :class:`app.window.MainWindow` (the window owns
the session store, the worker and the controls); app/session.py writes and reads the files."""

from __future__ import annotations

import logging
import os

from PySide6 import QtCore, QtWidgets

from .session_record import restore_answer_from_env

log = logging.getLogger("trifit.app")


class SessionActions:
    def begin(self, image_path: str | os.PathLike, start: bool = False) -> None:
        """What a start of the app does: offer to restore the session a crashed trifit left
        (if any), else open ``image_path``. The question is non-blocking; ``TRIFIT_RESTORE``
        answers it, and :meth:`answer_restore` is the answer in code."""
        crashed = self.session.find_crashed() if self.session is not None else []
        for other in crashed[1:]:  # one question per start: the newest; the rest wait for later
            self.session.release(other)
        if not crashed:
            self.open_file(image_path, start=start)
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
        """Answer the pending restore question: restore the crashed session (its image and
        settings; the fit resumes from its checkpoint -- iteration, sigma, optimiser state --
        or, without a usable one, starts from its scene) or delete it and open the start-up image."""
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
                self.open_file(image_path, start=start)
            return
        # Adopted (later autosaves go to its folder) once its fit exists: if the image cannot be
        # read after all, its files stay for a later start instead of going with a clean quit.
        self._restoring = self.restored = crashed
        self.controls.set_params(crashed.params)
        self.controls.set_stop_conditions(crashed.stop)
        self.worker.set_stop_conditions(crashed.stop)
        self.worker.load(crashed.source, crashed.params, init_scene=crashed.scene, start=start,
                         resume=crashed.checkpoint, focus=crashed.focus)
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
