"""Where a clip's shots start, and the seed of a fit that starts at a frame.

One rule serves both ways of fitting a clip: `trifit video --segment K` (render/videoseg.py)
splits the clip at the cuts :func:`find_cuts` finds in a pass over the whole clip, and the
whole-clip fit (render/videorun.py's frame loop, the window's too) starts a cold fit at each
frame :class:`CutLookahead` finds to be a cut as the frames are decoded, from the same changes
either side. So a shot's first frame is fitted the same way, with the same seed, whichever path
fits it.

``d_k`` is frame k's **change**: the mean absolute difference over pixels and channels (values in
[0, 1]) of frames k - 1 and k at the working size (what the fit sees). Frame k is a cut when
``d_k`` is both

- large absolutely: ``d_k >= CUT_MIN_CHANGE`` (a tenth of the full range on average: a new shot,
  not noise, grain or a small object moving), and
- large relative to its neighbours: ``d_k >= CUT_RATIO x`` the median of the changes within
  ``CUT_WINDOW`` frames either side (itself left out), so steady fast motion, whose every change
  is large, is not cut at every frame, nor is the start of a fast pan. The median makes one other
  cut nearby count for little.

Both numbers are ratios of the picture's own range and of its own changes: no unit of a
particular clip. A gradual transition (a fade, a dissolve) spreads its change over frames and is
no cut: it is fitted warm, as motion is. A frame with no neighbours (a clip of two frames) has the
absolute test alone.

**Seeds**: a fit that starts at frame s draws from the clip's seed when s = 0 (so one segment over
the whole clip is the whole-clip run) and otherwise from the first 32-bit word of
``numpy.random.SeedSequence([seed mod 2**64, s])``: a function of the seed and where the fit
starts, never of which task, worker or order fitted it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import numpy as np

#: a cut's change between two frames, at least (mean absolute difference, values in [0, 1])
CUT_MIN_CHANGE = 0.1
#: ... and at least this many times the median change of its neighbours
CUT_RATIO = 3.0
#: the neighbours: this many changes either side
CUT_WINDOW = 4


def frame_change(previous, current) -> float:
    """The mean absolute difference of two frames' targets ((H, W, 3) in [0, 1])."""
    return float(np.mean(np.abs(np.asarray(current, np.float64) - np.asarray(previous, np.float64))))


def cut_at(changes, i: int) -> bool:
    """Whether ``changes[i]`` (frame i + 1's change, when ``changes`` starts at frame 1's) makes
    its frame a cut, from the changes within CUT_WINDOW of it that ``changes`` holds."""
    d = np.asarray(changes, np.float64)
    change = float(d[i])
    if change < CUT_MIN_CHANGE:
        return False
    near = np.concatenate([d[max(0, i - CUT_WINDOW):i], d[i + 1:i + 1 + CUT_WINDOW]])
    return len(near) == 0 or change >= CUT_RATIO * float(np.median(near))


def find_cuts(changes) -> list[int]:
    """The frames that start a new shot, from the changes of frames 1, 2, ... (``changes[k - 1]``
    is frame k's): the module doc's rule."""
    return [i + 1 for i in range(len(changes)) if cut_at(changes, i)]


def shot_seed(seed: int, start: int) -> int:
    """The seed of a fit that starts at frame ``start`` of a clip fitted with ``seed`` (the module doc)."""
    if start == 0:
        return int(seed)
    return int(np.random.SeedSequence([int(seed) % 2 ** 64, int(start)]).generate_state(1)[0])


class CutLookahead:
    """A clip's targets in order, each with whether it starts a new shot (:func:`cut_at` on the
    changes either side), decided as :func:`find_cuts` decides over the whole clip: up to
    CUT_WINDOW frames are decoded ahead of the one handed out, and the changes of the CUT_WINDOW
    before it are kept.

    ``targets``: the working-size targets of frames ``first``, ``first + 1``, ... The frames
    before ``start`` (from ``first``) are decoded for their changes only, e.g. on a resume, which
    needs the CUT_WINDOW + 1 frames before the first it fits for the same decisions."""

    def __init__(self, targets: Iterator, first: int = 0, start: int | None = None):
        self._targets = targets
        self._ahead: deque = deque()   # (k, target) decoded, not handed out
        self._changes: dict[int, float] = {}  # frame k's change, for the frames still in a window
        self._last = None              # the last decoded target
        self._decoded = first          # the next frame to decode
        self._ended = False
        for _ in range((first if start is None else start) - first):
            if not self._decode():
                break
            self._ahead.popleft()

    def _decode(self) -> bool:
        if self._ended:
            return False
        try:
            target = next(self._targets)
        except StopIteration:
            self._ended = True
            return False
        k, self._decoded = self._decoded, self._decoded + 1
        if self._last is not None:
            self._changes[k] = frame_change(self._last, target)
        self._last = target
        self._ahead.append((k, target))
        return True

    def __iter__(self):
        return self

    def __next__(self) -> tuple[np.ndarray, bool]:
        """The next frame's target and whether it is a cut (StopIteration after the last)."""
        while (not self._ahead or self._ahead[-1][0] < self._ahead[0][0] + CUT_WINDOW) and self._decode():
            pass
        if not self._ahead:
            raise StopIteration
        k, target = self._ahead.popleft()
        for old in [j for j in self._changes if j < k - CUT_WINDOW]:
            del self._changes[old]
        if k not in self._changes:  # the clip's first frame (or the first decoded)
            return target, False
        before = [self._changes[j] for j in range(k - CUT_WINDOW, k) if j in self._changes]
        after = [self._changes[j] for j in range(k + 1, k + CUT_WINDOW + 1) if j in self._changes]
        return target, cut_at([*before, self._changes[k], *after], len(before))

    def close(self) -> None:
        close = getattr(self._targets, "close", None)
        if close is not None:
            close()


__all__ = ["CUT_MIN_CHANGE", "CUT_RATIO", "CUT_WINDOW", "CutLookahead", "cut_at", "find_cuts", "frame_change",
           "shot_seed"]
