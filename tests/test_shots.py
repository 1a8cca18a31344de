"""Where a clip's shots start (render/shots.py): the whole-clip fit's lookahead decides each frame
as the segmented run's pass over the whole clip does, from any frame it starts or resumes at."""

from __future__ import annotations

import numpy as np
import pytest

from trifit.shots import (
    CONTENT_MIN,
    CUT_WINDOW,
    CutLookahead,
    content_appears,
    cut_at,
    find_cuts,
    frame_change,
    frame_content,
)


def _clip(rng, n: int) -> list[np.ndarray]:
    """Tiny frames whose changes mix stillness, motion and jumps, so cuts come near each other, and
    whose contents (a pattern's contrast) wander about the threshold, from blank up, so shots
    start where content appears too."""
    levels = 0.5 + np.cumsum(rng.choice([0.0, 0.0, 0.02, 0.06, 0.3, -0.3], size=n))
    contrast = np.clip(np.cumsum(rng.choice([0.0, -0.03, 0.03, 0.0, -0.1], size=n)), 0.0, 0.2)
    pattern = np.array([[1, -1, 1], [-1, 1, -1]], np.float32)[..., None]
    return [(v + c * pattern).astype(np.float32) * np.ones(3, np.float32) for v, c in zip(levels, contrast)]


def _shots(frames) -> list[int]:
    return find_cuts([frame_change(a, b) for a, b in zip(frames, frames[1:])], [frame_content(f) for f in frames])


def _decisions(lookahead) -> list[bool]:
    return [cut for _, cut in lookahead]


@pytest.mark.parametrize("seed", range(40))
def test_the_lookahead_finds_the_cuts_the_whole_clip_pass_finds(seed):
    rng = np.random.default_rng(seed)
    frames = _clip(rng, int(rng.integers(1, 30)))
    cuts = _shots(frames)
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


def test_the_clips_have_both_kinds_of_start():
    """(so that the test above compares both rules: each kind of shot start is in some clip)"""
    rng = [np.random.default_rng(seed) for seed in range(40)]
    clips = [_clip(r, int(r.integers(1, 30))) for r in rng]
    changes = [[frame_change(a, b) for a, b in zip(f, f[1:])] for f in clips]
    assert any(find_cuts(c) for c in changes)
    assert any(set(_shots(f)) - set(find_cuts(c)) for f, c in zip(clips, changes))


def test_content_appears_after_blank_frames_only():
    blank, some = 0.2 * CONTENT_MIN, CONTENT_MIN
    assert content_appears([blank] * 4 + [some], 4)
    assert content_appears([blank, some], 1)                     # from the clip's first frame
    assert not content_appears([some], 0)                        # nothing before it
    assert not content_appears([blank] * 3 + [some, blank, some], 5)  # hovering about the threshold: once
    assert content_appears([some, blank, blank, blank, blank, some], 5)  # ... unless blank for the window
    assert not content_appears([blank] * 5, 4)


def test_a_fade_in_starts_one_shot_where_its_content_reaches_the_threshold():
    photo = np.random.default_rng(0).random((12, 16, 3)).astype(np.float32)  # content ~0.25
    fade = [photo * min(k / 10, 1.0) for k in range(16)]
    first = next(k for k, f in enumerate(fade) if frame_content(f) >= CONTENT_MIN)
    assert 0 < first < 10
    assert _shots(fade) == [first]
    assert find_cuts([frame_change(a, b) for a, b in zip(fade, fade[1:])]) == []  # gradual: no cut
    assert frame_content(np.full((4, 4, 3), 0.7)) < 1e-12  # one colour: none


def test_a_cut_needs_both_tests():
    calm = [0.01] * 4
    assert cut_at([*calm, 0.3, *calm], 4)             # large, and 3x its neighbours' median
    assert not cut_at([*calm, 0.05, *calm], 4)        # relatively large, absolutely small: noise
    assert not cut_at([0.3] * 9, 4)                   # fast motion: all alike
    assert not cut_at([0.01] * 4 + [0.11] * 5, 4)     # a fast pan's start: its later frames are as large
    assert cut_at([0.5], 0) and not cut_at([0.05], 0)  # no neighbours: the absolute test alone
