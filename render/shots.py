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
no cut (the two rules below start its shot instead). A frame with no neighbours (a clip of two
frames) has the absolute test alone.

**Content that appears** starts a shot too: frame k does when it has content, ``c_k >=
CONTENT_MIN``, and each of the up to ``CUT_WINDOW`` frames before it had none. ``c_k`` is frame k's
**content**: the mean absolute deviation of its pixels from its mean colour (per channel, values in
[0, 1], at the working size), what a fit has to place triangles by. A black, white or one-colour
frame has about its noise's. So a fade in from black or white, gradual as it is, gets a fit of its
own at the first frame with something to fit, instead of the rest of the shot being refined from
triangles that were fitted to a blank frame (docs/QUALITY.md, "Video: a fade in"). The frames
before it must all be blank, so a dark scene that hovers about the threshold starts no shot at
every crossing. Callers that keep clips recorded before the rule pass ``fades=False``.

**A transition that ends** starts a shot too: a dissolve from one shot to the next, or the end of
a fade. Frame k is a transition's end when the frames from ``k - TRANSITION_SPAN`` to ``k +
CUT_WINDOW`` changed by a cut's worth (the mean absolute difference of the first and the last at
least ``CUT_MIN_CHANGE``), and that change arrived gradually and has just settled: written as the
least-squares blend ``first + a_j (last - first)`` of the window's end frames, frame k - 1 is
below ``SETTLED`` of the way and frame k at or past it, so the ``CUT_WINDOW`` frames after k add
at most a tenth. Frame k must have content, and no frame in the ``TRANSITION_SPAN`` before it may
be a cut, content that appears or another such candidate (once per transition; a candidate is
judged on its own window only, so a decision needs a bounded stretch of frames around it:
``CONTEXT``). Motion at a steady pace never settles this way, so pans and zooms start no shot;
the window is judged on each frame's thumbnail (block means, at most ``THUMB_SIDE`` px a side),
which sensor noise hardly moves. Refined warm across a dissolve, a fit keeps the last shot's
layout of triangles and scores 0.4-0.9 dB under a fit of its own after it (docs/QUALITY.md,
"Video: a dissolve"). Callers that keep clips recorded before the rule pass ``transitions=False``.

**Seeds**: a fit that starts at frame s draws from the clip's seed when s = 0 (so one segment over
the whole clip is the whole-clip run) and otherwise from the first 32-bit word of
``numpy.random.SeedSequence([seed mod 2**64, s])``: a function of the seed and where the fit
starts, never of which task, worker or order fitted it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import numpy as np

#: a cut's change between two frames, at least (mean absolute difference, values in [0, 1])
CUT_MIN_CHANGE = 0.1
#: ... and at least this many times the median change of its neighbours
CUT_RATIO = 3.0
#: the neighbours: this many changes either side
CUT_WINDOW = 4
#: a frame with content to fit: its mean absolute deviation from its mean colour at least this (values in [0, 1])
CONTENT_MIN = 0.04
#: a transition's window reaches this many frames back from its end (and CUT_WINDOW ahead)
TRANSITION_SPAN = 16
#: ... and has settled at its end once that frame is this share of the way from the window's first to its last
SETTLED = 0.9
#: the thumbnails a transition is judged on: block means, at most this many pixels a side
THUMB_SIDE = 48
#: the frames before a frame that its decision needs (a transition candidate's window, for each
#: frame within TRANSITION_SPAN before it): a resumed run decodes these again
CONTEXT = 2 * TRANSITION_SPAN


def frame_change(previous, current) -> float:
    """The mean absolute difference of two frames' targets ((H, W, 3) in [0, 1])."""
    return float(np.mean(np.abs(np.asarray(current, np.float64) - np.asarray(previous, np.float64))))


def frame_content(target) -> float:
    """A frame's content ((H, W, 3) in [0, 1]): the mean absolute deviation of its pixels from its
    mean colour, per channel."""
    t = np.asarray(target, np.float64)
    return float(np.mean(np.abs(t - t.mean(axis=(0, 1)))))


def frame_thumb(target) -> np.ndarray:
    """A frame's thumbnail ((H, W, 3) in [0, 1]): the means of square blocks, at most THUMB_SIDE
    of them a side (the edge pixels a block does not fill left out), float32."""
    t = np.asarray(target, np.float32)
    f = max(1, -(-max(t.shape[:2]) // THUMB_SIDE))
    h, w = t.shape[0] // f, t.shape[1] // f
    rows = t[:h * f, :w * f].reshape(h, f, w * f * 3).sum(axis=1, dtype=np.float64)  # (rows first: contiguous)
    return (rows.reshape(h, w, f, 3).sum(axis=2) / (f * f)).astype(np.float32)


class Measured(NamedTuple):
    """A frame's target with what the rules read of it (:func:`measured`)."""

    target: np.ndarray
    change: float | None   # frame_change from the frame before (None: the first measured)
    content: float         # frame_content
    thumb: np.ndarray      # frame_thumb


def measure(target, previous=None) -> Measured:
    """What the rules read of a frame's target (``previous``: the target of the frame before it, None
    for the first)."""
    return Measured(target, None if previous is None else frame_change(previous, target), frame_content(target),
                    frame_thumb(target))


def measured(targets: Iterable) -> Iterator[Measured]:
    """Each target with what :func:`measure` reads of it against the one before, computed where the
    targets are made (the video loop's decoding thread: not on the thread that fits)."""
    previous = None
    for t in targets:
        yield measure(t, previous)
        previous = t


def transition_settles(thumbs, contents, i: int) -> bool:
    """Whether frame i is a transition's end by its own window (the module doc, less the check of
    the frames before it: :func:`find_cuts` and :class:`CutLookahead` make that): ``thumbs`` and
    ``contents`` hold frames 0, 1, ... at least to ``i + CUT_WINDOW`` (else False: a frame that
    close to the clip's end has too little after it to tell)."""
    if i < 1 or len(thumbs) <= i + CUT_WINDOW or contents[i] < CONTENT_MIN:
        return False
    window = np.stack(thumbs[max(0, i - TRANSITION_SPAN):i + CUT_WINDOW + 1]).astype(np.float64)
    k = i - max(0, i - TRANSITION_SPAN)  # frame i's place in the window
    delta = window[-1] - window[0]
    if float(np.mean(np.abs(delta))) < CUT_MIN_CHANGE:
        return False
    share = np.tensordot(window[k - 1:k + 1] - window[0], delta, axes=3) / float(np.sum(delta * delta))
    return bool(share[0] < SETTLED <= share[1])


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


def find_cuts(changes, contents=None, settles=None) -> list[int]:
    """The frames that start a new shot, from the changes of frames 1, 2, ... (``changes[k - 1]``
    is frame k's) and, where given, the contents of frames 0, 1, ... (``contents[k]`` is frame
    k's; None: content that appears starts no shot) and whether each frame 0, 1, ... settles a
    transition by its own window (:func:`transition_settles`; None: transitions start no shot):
    the module doc's rules."""
    n = len(changes) + 1
    marks = [k >= 1 and cut_at(changes, k - 1) for k in range(n)]
    if contents is not None:
        marks = [m or content_appears(contents, k) for k, m in enumerate(marks)]
    cuts = {k for k in range(n) if marks[k]}
    if settles is not None:
        marks = [m or bool(settles[k]) for k, m in enumerate(marks)]
        cuts |= {k for k in range(1, n) if settles[k] and not any(marks[max(0, k - TRANSITION_SPAN):k])}
    return sorted(cuts)


class TransitionWatch:
    """:func:`transition_settles` for each frame of a clip passed through in order, holding only
    the thumbnails its windows need: :meth:`push` each frame's thumbnail and content, and the
    answers come out CUT_WINDOW frames behind; :meth:`finish` gives the last frames' (False)."""

    def __init__(self):
        self._thumbs: deque = deque(maxlen=TRANSITION_SPAN + CUT_WINDOW + 1)
        self._contents: deque = deque(maxlen=TRANSITION_SPAN + CUT_WINDOW + 1)
        self._pushed = 0
        self.settles: list[bool] = []

    def push(self, thumb: np.ndarray, content: float) -> None:
        self._thumbs.append(thumb)
        self._contents.append(float(content))
        self._pushed += 1
        i = self._pushed - 1 - CUT_WINDOW  # the frame whose window is now whole
        if i >= 0:
            k = len(self._thumbs) - 1 - CUT_WINDOW  # its place in what is held
            self.settles.append(transition_settles(list(self._thumbs), list(self._contents), k) if i >= 1 else False)

    def finish(self) -> list[bool]:
        self.settles += [False] * (self._pushed - len(self.settles))
        return self.settles


def shot_seed(seed: int, start: int) -> int:
    """The seed of a fit that starts at frame ``start`` of a clip fitted with ``seed`` (the module doc)."""
    if start == 0:
        return int(seed)
    return int(np.random.SeedSequence([int(seed) % 2 ** 64, int(start)]).generate_state(1)[0])


class CutLookahead:
    """A clip's targets in order, each with whether it starts a new shot (:func:`cut_at` on the
    changes either side, :func:`content_appears` on the contents before, :func:`transition_settles`
    on the thumbnails around it), decided as :func:`find_cuts` decides over the whole clip: up to
    CUT_WINDOW frames are decoded ahead of the one handed out, and what the decisions need of the
    frames before it is kept.

    ``targets``: the working-size targets of frames ``first``, ``first + 1``, ..., or those
    targets :func:`measured` (where they are made, so the caller's thread does not). The frames
    before ``start`` (from ``first``) are decoded for what later decisions need of them only, e.g.
    on a resume, which needs the CONTEXT + 1 frames before the first it fits for the same
    decisions. ``fades``, ``transitions``: whether content that appears, and a transition that
    ends, start a shot (set them before the first frame that may)."""

    def __init__(self, targets: Iterator, first: int = 0, start: int | None = None, fades: bool = True,
                 transitions: bool = True):
        self._targets = targets
        self.fades, self.transitions = fades, transitions
        self._ahead: deque = deque()   # (k, target) decoded, not handed out
        self._changes: dict[int, float] = {}  # frame k's change, for the frames still in a window
        self._contents: dict[int, float] = {}  # frame k's content, likewise
        self._thumbs: dict[int, np.ndarray] = {}  # frame k's thumbnail, likewise
        self._marks: dict[int, tuple[bool, bool, bool]] = {}  # frame k's (cut, content appears, settles)
        self._last = None              # the last decoded target
        self._decoded = first          # the next frame to decode
        self._ended = False
        for _ in range((first if start is None else start) - first):
            if next(self, None) is None:
                break

    def _decode(self) -> bool:
        if self._ended:
            return False
        try:
            item = next(self._targets)
        except StopIteration:
            self._ended = True
            return False
        k, self._decoded = self._decoded, self._decoded + 1
        if not isinstance(item, Measured):
            item = measure(item, self._last)
            self._last = item.target
        if item.change is not None:
            self._changes[k] = item.change
        self._contents[k], self._thumbs[k] = item.content, item.thumb
        self._ahead.append((k, item.target))
        return True

    def __iter__(self):
        return self

    def __next__(self) -> tuple[np.ndarray, bool]:
        """The next frame's target and whether it starts a shot (StopIteration after the last)."""
        while (not self._ahead or self._ahead[-1][0] < self._ahead[0][0] + CUT_WINDOW) and self._decode():
            pass
        if not self._ahead:
            raise StopIteration
        k, target = self._ahead.popleft()
        for kept, reach in ((self._changes, CUT_WINDOW), (self._contents, TRANSITION_SPAN),
                            (self._thumbs, TRANSITION_SPAN), (self._marks, TRANSITION_SPAN)):
            for old in [j for j in kept if j < k - reach]:
                del kept[old]
        cut = False
        if k in self._changes:  # (not the clip's first frame, or the first decoded)
            before = [self._changes[j] for j in range(k - CUT_WINDOW, k) if j in self._changes]
            after = [self._changes[j] for j in range(k + 1, k + CUT_WINDOW + 1) if j in self._changes]
            cut = cut_at([*before, self._changes[k], *after], len(before))
        held = [j for j in range(k - TRANSITION_SPAN, k + CUT_WINDOW + 1) if j in self._thumbs]
        at = held.index(k)
        appears = content_appears([self._contents[j] for j in held[:at + 1]], at) if k in self._changes else False
        settles = transition_settles([self._thumbs[j] for j in held], [self._contents[j] for j in held], at)
        self._marks[k] = (cut, appears, settles)
        earlier = [self._marks[j] for j in range(k - TRANSITION_SPAN, k) if j in self._marks]
        return target, (cut or (self.fades and appears)
                        or (self.transitions and settles
                            and not any(c or (self.fades and a) or s for c, a, s in earlier)))

    def thumb(self, k: int) -> np.ndarray | None:
        """Frame k's thumbnail (:func:`frame_thumb`, made where the targets are), while a decision
        still needs it: from the frame's decoding until TRANSITION_SPAN frames after it is handed out."""
        return self._thumbs.get(k)

    def change(self, k: int) -> float | None:
        """Frame k's :func:`frame_change` from frame k - 1 (made where the targets are), from its
        decoding until CUT_WINDOW frames after it is handed out; None for the first frame decoded."""
        return self._changes.get(k)

    def close(self) -> None:
        close = getattr(self._targets, "close", None)
        if close is not None:
            close()


__all__ = ["CONTENT_MIN", "CONTEXT", "CUT_MIN_CHANGE", "CUT_RATIO", "CUT_WINDOW", "SETTLED", "THUMB_SIDE",
           "TRANSITION_SPAN", "CutLookahead", "Measured", "TransitionWatch", "content_appears", "cut_at", "find_cuts",
           "frame_change", "frame_content", "frame_thumb", "measure", "measured", "shot_seed", "transition_settles"]
