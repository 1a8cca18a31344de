"""Where a clip's shots start (render/shots.py): the whole-clip fit's lookahead decides each frame
as the segmented run's pass over the whole clip does, from any frame it starts or resumes at; cuts,
content that appears and transitions that end each start shots where they should and not elsewhere."""

from __future__ import annotations

import numpy as np
import pytest

from trifit.shots import (
    CONTENT_MIN,
    CONTEXT,
    CutLookahead,
    TransitionWatch,
    content_appears,
    cut_at,
    find_cuts,
    frame_change,
    frame_content,
    frame_thumb,
    measured,
    transition_settles,
)


def _clip(rng, n: int) -> list[np.ndarray]:
    """Tiny frames whose changes mix stillness, motion, jumps and gradual drifts that stop, so cuts
    and transitions' ends come near each other, and whose contents (a pattern's contrast) wander
    about the threshold, from blank up, so shots start where content appears too."""
    runs = []  # runs of a few frames each: still, drifting up or down, jittering, or one jump
    while len(runs) < n:
        kind, length = int(rng.integers(4)), int(rng.integers(2, 10))
        runs += [[0.0] * length, [rng.choice([0.03, -0.03])] * length,
                 list(rng.choice([0.02, -0.02, 0.06], size=length)), [rng.choice([0.3, -0.3])]][kind]
    levels = 0.5 + np.cumsum(runs[:n])
    contrast = np.clip(np.cumsum(rng.choice([0.0, -0.03, 0.03, 0.0, -0.1], size=n)), 0.0, 0.2)
    pattern = np.array([[1, -1, 1], [-1, 1, -1]], np.float32)[..., None]
    return [(v + c * pattern).astype(np.float32) * np.ones(3, np.float32) for v, c in zip(levels, contrast)]


def _settles(frames) -> list[bool]:
    watch = TransitionWatch()
    for m in measured(frames):
        watch.push(m.thumb, m.content)
    return watch.finish()


def _shots(frames, fades: bool = True, transitions: bool = True) -> list[int]:
    return find_cuts([frame_change(a, b) for a, b in zip(frames, frames[1:])],
                     [frame_content(f) for f in frames] if fades else None, _settles(frames) if transitions else None)


def _decisions(lookahead) -> list[bool]:
    return [cut for _, cut in lookahead]


@pytest.mark.parametrize("seed", range(40))
def test_the_lookahead_finds_the_cuts_the_whole_clip_pass_finds(seed):
    rng = np.random.default_rng(seed)
    frames = _clip(rng, int(rng.integers(1, 60)))
    fades, transitions = bool(seed % 3), bool(seed % 4)
    cuts = _shots(frames, fades, transitions)
    assert [k for k, cut in enumerate(_decisions(CutLookahead(iter(frames), fades=fades, transitions=transitions)))
            if cut] == cuts
    for start in range(1, len(frames)):  # a resume: the frame before first, the context before that
        first = max(0, start - 1 - CONTEXT)
        source = iter(frames[first:]) if start % 2 else measured(frames[first:])  # (measured where they are made)
        resumed = CutLookahead(source, first, start - 1)
        resumed.fades, resumed.transitions = fades, transitions  # (set after it is made, as a resume does)
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


def test_the_clips_have_every_kind_of_start():
    """(so that the test above compares all three rules: each kind of shot start is in some clip)"""
    rng = [np.random.default_rng(seed) for seed in range(40)]
    clips = [_clip(r, int(r.integers(1, 60))) for r in rng]
    cuts = [set(_shots(f, fades=False, transitions=False)) for f in clips]
    assert any(cuts)
    assert any(set(_shots(f, transitions=False)) - c for f, c in zip(clips, cuts))
    assert any(set(_shots(f, fades=False)) - c for f, c in zip(clips, cuts))
    assert any(set(_shots(f)) != set(_shots(f, fades=False)) | set(_shots(f, transitions=False)) for f in clips), \
        "no clip where one rule's start holds another's back"


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


def _patterns(n: int, seed: int) -> list[np.ndarray]:
    return list(np.random.default_rng(seed).random((n, 24, 32, 3)).astype(np.float32))


def test_a_dissolve_starts_one_shot_where_it_settles():
    a, b = _patterns(2, 0)
    for length in (1, 4, 10, 24):  # (1: a cut, which the transition rule finds too, at the same frame)
        ramp = np.clip((np.arange(40) - 8) / length, 0.0, 1.0)
        frames = [a * (1 - r) + b * r for r in ramp]
        end = 8 + length
        settled = [k for k, s in enumerate(_settles(frames)) if s]
        assert len(settled) == 1 and end - 1 <= settled[0] <= end, (length, settled)  # (0.9 of the way: its end)
        assert _shots(frames) == settled and _shots(frames, transitions=False) == ([end] if length == 1 else [])


def test_steady_motion_and_small_or_late_changes_start_no_shot():
    wide = np.random.default_rng(1).random((24, 200, 3)).astype(np.float32)
    pan = [wide[:, 4 * k:4 * k + 32] for k in range(40)]        # a steady pan: never settles
    assert not any(_settles(pan)) and _shots(pan) == []
    a, b = _patterns(2, 2)
    faint = [a * (1 - r) + (a + 0.08 * (b - a)) * r for r in np.clip((np.arange(30) - 5) / 6, 0, 1)]
    assert not any(_settles(faint))                              # less than a cut's worth of change
    late = [a * (1 - r) + b * r for r in np.clip((np.arange(30) - 20) / 7, 0, 1)]
    assert not any(_settles(late))                               # it settles in the last CUT_WINDOW frames
    blank = [np.full((24, 32, 3), 0.2 + 0.5 * r, np.float32) for r in np.clip((np.arange(30) - 5) / 6, 0, 1)]
    assert not any(_settles(blank))                              # a change of level with no content to fit


def test_the_watch_holds_a_window_and_answers_as_the_whole_list_does():
    frames = _clip(np.random.default_rng(7), 80)
    thumbs, contents = [frame_thumb(f) for f in frames], [frame_content(f) for f in frames]
    assert _settles(frames) == [transition_settles(thumbs, contents, i) for i in range(len(frames))]
    big = np.random.default_rng(0).random((130, 170, 3))
    assert frame_thumb(big).shape == (32, 42, 3) and frame_thumb(big).dtype == np.float32  # blocks of 4: at most 48 a side
    assert np.allclose(frame_thumb(big)[0, 0], big[:4, :4].mean(axis=(0, 1)))
