"""Undo and redo for edits by hand (app/edit_tool.py): a stack of steps, each the actions that do
it and the actions that undo it. An action is ``("edit", request)`` -- an edit request the fit
applies like any other (render/edits.py), so an undo is itself an edit, recorded in the scene's
changes, and a replay stays faithful -- or ``("focus", mask)``, a focus mask to paint with."""

from __future__ import annotations

from dataclasses import dataclass, field

#: steps kept (a focus step holds two masks of the working size)
UNDO_LIMIT = 200


@dataclass
class Step:
    label: str                                # what the Edit menu says: "Undo <label>"
    do: list = field(default_factory=list)    # [(kind, value)]
    undo: list = field(default_factory=list)


class UndoStack:
    def __init__(self, limit: int = UNDO_LIMIT):
        self.limit = limit
        self._done: list[Step] = []
        self._undone: list[Step] = []

    def push(self, step: Step) -> None:
        """A step just done: it can be undone, and nothing undone before it can be redone."""
        self._done.append(step)
        del self._done[: max(0, len(self._done) - self.limit)]
        self._undone.clear()

    def undo(self) -> Step | None:
        """The step to undo (its ``undo`` actions are for the caller to send), or None."""
        if not self._done:
            return None
        step = self._done.pop()
        self._undone.append(step)
        return step

    def redo(self) -> Step | None:
        if not self._undone:
            return None
        step = self._undone.pop()
        self._done.append(step)
        return step

    def clear(self) -> None:
        self._done.clear()
        self._undone.clear()

    @property
    def undo_label(self) -> str | None:
        return self._done[-1].label if self._done else None

    @property
    def redo_label(self) -> str | None:
        return self._undone[-1].label if self._undone else None
