"""Where a clip's shots start (render/shots.py): the whole-clip fit's lookahead decides each frame
as the segmented run's pass over the whole clip does, from any frame it starts or resumes at."""

from __future__ import annotations

import numpy as np
import pytest

from trifit.shots import CUT_WINDOW, CutLookahead, cut_at, find_cuts, frame_change


def _clip(rng, n: int) -> list[np.ndarray]:
    """Tiny frames whose changes mix stillness, motion and jumps, so cuts come near each other."""
    levels = 0.5 + np.cumsum(rng.choice([0.0, 0.0, 0.02, 0.06, 0.3, -0.3], size=n))
    return [np.full((2, 3, 3), v, np.float32) for v in levels]


def _decisions(lookahead) -> list[bool]:
    return [cut for _, cut in lookahead]


@pytest.mark.parametrize("seed", range(40))
def test_the_lookahead_finds_the_cuts_the_whole_clip_pass_finds(seed):
    rng = np.random.default_rng(seed)
    frames = _clip(rng, int(rng.integers(1, 30)))
    cuts = find_cuts([frame_change(a, b) for a, b in zip(frames, frames[1:])])
    assert [k for k, cut in enumerate(_decisions(CutLookahead(iter(frames)))) if cut] == cuts
    for start in range(1, len(frames)):  # a resume: the frame before first, the changes before that for the window
        first = max(0, start - 1 - CUT_WINDOW)
        resumed = CutLookahead(iter(frames[first:]), first, start - 1)
        target, _ = next(resumed)
        assert target is frames[start - 1]
        assert [k for k, cut in enumerate(_decisions(resumed), start) if cut] == [c for c in cuts if c >= start]


def test_the_lookahead_hands_out_every_frame_in_order_and_closes_its_source():
    frames = [np.full((1, 1, 3), k / 10, np.float32) for k in range(7)]
    closed = []

    def source():
        try:
            yield from frames
        finally:
            closed.append(True)

    gen = source()
    lookahead = CutLookahead(gen)
    first, _ = next(lookahead)
    assert first is frames[0]
    lookahead.close()
    assert closed == [True]
    assert [t for t, _ in CutLookahead(iter(frames))] == frames


def test_a_cut_needs_both_tests():
    calm = [0.01] * 4
    assert cut_at([*calm, 0.3, *calm], 4)             # large, and 3x its neighbours' median
    assert not cut_at([*calm, 0.05, *calm], 4)        # relatively large, absolutely small: noise
    assert not cut_at([0.3] * 9, 4)                   # fast motion: all alike
    assert not cut_at([0.01] * 4 + [0.11] * 5, 4)     # a fast pan's start: its later frames are as large
    assert cut_at([0.5], 0) and not cut_at([0.05], 0)  # no neighbours: the absolute test alone
