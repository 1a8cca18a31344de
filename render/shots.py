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

**Content that appears** starts a shot too: frame k does when it has content, ``c_k >=
CONTENT_MIN``, and each of the up to ``CUT_WINDOW`` frames before it had none. ``c_k`` is frame k's
**content**: the mean absolute deviation of its pixels from its mean colour (per channel, values in
[0, 1], at the working size), what a fit has to place triangles by. A black, white or one-colour
frame has about its noise's. So a fade in from black or white, gradual as it is, gets a fit of its
own at the first frame with something to fit, instead of the rest of the shot being refined from
triangles that were fitted to a blank frame (docs/QUALITY.md, "Video: a fade in"). The frames
before it must all be blank, so a dark scene that hovers about the threshold starts no shot at
every crossing. Callers that keep clips recorded before the rule pass ``fades=False``.

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
#: a frame with content to fit: its mean absolute deviation from its mean colour at least this (values in [0, 1])
CONTENT_MIN = 0.04


def frame_change(previous, current) -> float:
    """The mean absolute difference of two frames' targets ((H, W, 3) in [0, 1])."""
    return float(np.mean(np.abs(np.asarray(current, np.float64) - np.asarray(previous, np.float64))))


def frame_content(target) -> float:
    """A frame's content ((H, W, 3) in [0, 1]): the mean absolute deviation of its pixels from its
    mean colour, per channel."""
    t = np.asarray(target, np.float64)
    return float(np.mean(np.abs(t - t.mean(axis=(0, 1)))))


def content_appears(contents, i: int) -> bool:
    """Whether the frame whose content is ``contents[i]`` has some where each of the up to
    CUT_WINDOW frames before it that ``contents`` holds had none (the module doc); False for a
    frame with none before it."""
    c = np.asarray(contents, np.float64)
    before = c[max(0, i - CUT_WINDOW):i]
    return bool(c[i] >= CONTENT_MIN and len(before) and np.all(before < CONTENT_MIN))


def cut_at(changes, i: int) -> bool:
    """Whether ``changes[i]`` (frame i + 1's change, when ``changes`` starts at frame 1's) makes
    its frame a cut, from the changes within CUT_WINDOW of it that ``changes`` holds."""
    d = np.asarray(changes, np.float64)
    change = float(d[i])
    if change < CUT_MIN_CHANGE:
        return False
    near = np.concatenate([d[max(0, i - CUT_WINDOW):i], d[i + 1:i + 1 + CUT_WINDOW]])
    return len(near) == 0 or change >= CUT_RATIO * float(np.median(near))


def find_cuts(changes, contents=None) -> list[int]:
    """The frames that start a new shot, from the changes of frames 1, 2, ... (``changes[k - 1]``
    is frame k's) and, where given, the contents of frames 0, 1, ... (``contents[k]`` is frame
    k's; None: content that appears starts no shot): the module doc's rules."""
    cuts = {i + 1 for i in range(len(changes)) if cut_at(changes, i)}
    if contents is not None:
        cuts |= {k for k in range(1, len(contents)) if content_appears(contents, k)}
    return sorted(cuts)


def shot_seed(seed: int, start: int) -> int:
    """The seed of a fit that starts at frame ``start`` of a clip fitted with ``seed`` (the module doc)."""
    if start == 0:
        return int(seed)
    return int(np.random.SeedSequence([int(seed) % 2 ** 64, int(start)]).generate_state(1)[0])


class CutLookahead:
    """A clip's targets in order, each with whether it starts a new shot (:func:`cut_at` on the
    changes either side, :func:`content_appears` on the contents before), decided as
    :func:`find_cuts` decides over the whole clip: up to CUT_WINDOW frames are decoded ahead of the
    one handed out, and the changes and contents of the CUT_WINDOW before it are kept.

    ``targets``: the working-size targets of frames ``first``, ``first + 1``, ... The frames
    before ``start`` (from ``first``) are decoded for their changes only, e.g. on a resume, which
    needs the CUT_WINDOW + 1 frames before the first it fits for the same decisions. ``fades``:
    whether content that appears starts a shot (set it before the first frame that may)."""

    def __init__(self, targets: Iterator, first: int = 0, start: int | None = None, fades: bool = True):
        self._targets = targets
        self.fades = fades
        self._ahead: deque = deque()   # (k, target) decoded, not handed out
        self._changes: dict[int, float] = {}  # frame k's change, for the frames still in a window
        self._contents: dict[int, float] = {}  # frame k's content, likewise
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
        self._contents[k] = frame_content(target)
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
        for kept in (self._changes, self._contents):
            for old in [j for j in kept if j < k - CUT_WINDOW]:
                del kept[old]
        if k not in self._changes:  # the clip's first frame (or the first decoded)
            return target, False
        before = [self._changes[j] for j in range(k - CUT_WINDOW, k) if j in self._changes]
        after = [self._changes[j] for j in range(k + 1, k + CUT_WINDOW + 1) if j in self._changes]
        if cut_at([*before, self._changes[k], *after], len(before)):
            return target, True
        contents = [self._contents[j] for j in range(k - CUT_WINDOW, k + 1) if j in self._contents]
        return target, self.fades and content_appears(contents, len(contents) - 1)

    def close(self) -> None:
        close = getattr(self._targets, "close", None)
        if close is not None:
            close()


__all__ = ["CONTENT_MIN", "CUT_MIN_CHANGE", "CUT_RATIO", "CUT_WINDOW", "CutLookahead", "content_appears", "cut_at",
           "find_cuts", "frame_change", "frame_content", "shot_seed"]
