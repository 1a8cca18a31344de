"""Edits by hand (issue 20, render/edits.py): delete, set, insert, lock by id; parameters, Adam
moments and locks kept consistent; recorded and replayed to the same bytes; picking."""

import numpy as np
import pytest

from trifit import FitRun, Fitter, StopConditions, replay_run
from trifit.edits import check, moved, pick, pick_rect
from trifit.resources import sample_path

EVENTFUL = {"prune_cycle_min": 20, "respawn_alpha": 0.3}


def _state(f):
    """(raw, m, v) of image 0's triangles, (T, 10) each: its leading replica's, whose triangles
    ``triangles_now`` and ``locked`` report (a GPU's default runs two replicas)."""
    return [a[f.leaders()[0], : f.n_triangles * 10].reshape(-1, 10) for a in f._state()]


def _fixed(engine, n=8, size=24):
    f = Fitter(sample_path("astronaut.png"), triangles=n, size=size, engine=engine, strategy="fixed")
    f.step(6)  # non-zero moments
    return f


# ---------------------------------------------------------------------- each operation
@pytest.mark.gpu
def test_delete_takes_the_triangles_and_their_moments(gpu_engine):
    f = _fixed(gpu_engine)
    before, tris = _state(f), f.scene.triangles
    f.delete_triangles([5, 2])
    keep = [0, 1, 3, 4, 6, 7]
    assert f.n_triangles == 6 and f.triangle_ids_all()[0].tolist() == keep
    for now, then in zip(_state(f), before):
        assert np.array_equal(now, then[keep])  # the others' parameters and moments, bit for bit
    assert np.allclose(f.scene.triangles, tris[keep], rtol=0, atol=1e-6)  # (records: the host's sigmoid now)
    assert f.changes[-1] == [6, "edit", {"op": "delete", "indices": [2, 5]}]


@pytest.mark.gpu
def test_set_moves_recolours_and_restarts_the_moments(gpu_engine):
    f = _fixed(gpu_engine)
    before, tris = _state(f), f.scene.triangles.copy()
    new = moved(tris[3], 0.1, -0.05)
    new[6:10] = [0.2, 0.4, 0.6, 0.5]
    f.set_triangle(3, new)
    raw, m, v = _state(f)
    assert np.allclose(f.scene.triangles[3], new, atol=1e-6) and not m[3].any() and not v[3].any()
    others = [0, 1, 2, 4, 5, 6, 7]
    for now, then in zip((raw, m, v), before):
        assert np.array_equal(now[others], then[others])
    one = moved(tris[5], 0.2, 0.0, vertex=1)  # one vertex
    f.set_triangle(5, one)
    got = f.scene.triangles[5]
    assert np.allclose(got[[2, 3]], tris[5][[2, 3]] + [0.2, 0.0]) and np.array_equal(got[[0, 1, 4, 5]], tris[5][[0, 1, 4, 5]])


def test_insert_puts_triangles_back_with_zero_moments(ref_engine):
    f = _fixed(ref_engine)
    tris = f.scene.triangles.copy()
    f.delete_triangles([1, 6])
    f.insert_triangles([1, 6], tris[[1, 6]], locked=[6])
    assert f.n_triangles == 8 and np.allclose(f.scene.triangles, tris, atol=1e-6)
    assert f.locked == [6] and np.array_equal(f.scene.triangles[6], tris[6])  # locked: its values as given
    raw, m, v = _state(f)
    assert not m[[1, 6]].any() and not v[[1, 6]].any()


def test_bad_edits_are_refused_and_change_nothing(ref_engine):
    f = _fixed(ref_engine, n=3)
    before = f.scene.to_json()
    for bad, why in (({"op": "delete", "indices": [0, 1, 2]}, "at least one"), ({"op": "delete", "indices": [3]}, r"\[0, 3\)"),
                     ({"op": "set", "index": 0, "values": [0] * 9}, "10 numbers"),
                     ({"op": "set", "index": 0, "values": [0] * 9 + [2]}, r"in \[0, 1\]"),
                     ({"op": "set", "index": 0, "values": [float("nan")] * 10}, "finite"),
                     ({"op": "insert", "indices": [5], "values": [[0.5] * 10]}, "distinct and in"),
                     ({"op": "spin"}, "op one of")):
        with pytest.raises(ValueError, match=why):
            f.edit(bad)
    assert f.scene.to_json() == before
    assert check({"op": "delete", "indices": [2, 0]}, 3) == {"op": "delete", "indices": [0, 2]}


# ---------------------------------------------------------------------- by id, while the fit renumbers
@pytest.mark.gpu
def test_an_edit_by_id_finds_its_triangle_after_respawns_renumbered_it(gpu_engine):
    f = Fitter(sample_path("astronaut.png"), triangles=12, size=32, engine=gpu_engine, respawn_alpha=0.5,
               respawn_every=10)
    f.step(20)
    moved = []
    for _ in range(20):  # until a respawn below a triangle moved it down (re-placed ones go on top, new ids)
        tris, _, ids = f.triangles_now()
        f.step(10)
        now_tris, _, now_ids = f.triangles_now()
        for k, i in enumerate(ids):
            if i in now_ids:
                gone_below = sum(j not in now_ids for j in ids[:k])
                assert now_ids.index(i) == k - gone_below  # every survivor keeps its id, renumbered
                if gone_below:
                    moved.append(k)
        if moved:
            break
    assert moved and f.respawned > 0
    target_id, values = ids[moved[0]], tris[moved[0]]
    f.edit({"op": "delete", "ids": [target_id]})
    assert target_id not in f.triangles_now()[2]
    assert not np.any(np.all(np.isclose(f.triangles_now()[0], now_tris[now_ids.index(target_id)]), axis=1))
    f.edit({"op": "delete", "ids": [10**9]})  # gone meanwhile: nothing happens, nothing recorded
    assert [c[1] for c in f.changes].count("edit") == 1
    f.edit({"op": "insert", "ids": [target_id], "below": [now_ids[0]], "hint": [0], "values": [values.tolist()],
            "locked": [True]})
    assert f.triangles_now()[2][1] == target_id and f.locked == [1]
    f.edit({"op": "lock", "ids": []})
    assert f.locked == []
    f.close()


# ---------------------------------------------------------------------- locks survive
@pytest.mark.gpu
def test_locked_triangles_survive_edits_of_others_bit_for_bit(gpu_engine):
    f = Fitter(sample_path("astronaut.png"), triangles=12, size=32, engine=gpu_engine, **EVENTFUL)
    f.plan(200)
    f.step(40)
    f.set_locked([2, 6])
    values = f.triangles_now()[0][[2, 6]].copy()  # (the fit's own order: it may be over-grown)
    locked_raw = [a[[2, 6]].copy() for a in _state(f)]
    top = f.n_triangles - 1
    f.delete_triangles([0, 4])
    f.set_triangle(top - 2, moved(f.triangles_now()[0][top - 2], 0.05, 0.05))
    f.insert_triangles([0], [f.triangles_now()[0][1]])
    assert f.locked == [2, 5]
    for _ in range(8):
        f.step(20)
        idx = f.locked
        assert np.array_equal(f.triangles_now()[0][idx], values)
        assert all(np.array_equal(a[idx], b) for a, b in zip(_state(f), locked_raw))
    f.finish()
    assert np.array_equal(f.scene.triangles[f.scene.locked], values)
    f.close()


@pytest.mark.gpu
def test_delete_while_over_grown_then_pruning_ends_at_the_count(gpu_engine):
    f = Fitter(sample_path("astronaut.png"), triangles=12, size=32, engine=gpu_engine, **EVENTFUL)
    f.plan(300)
    while f.n_triangles <= 12:
        f.step(10)
    f.set_locked([1])
    kept = f.scene.triangles[1].copy()  # (over-grown: the scene holds the count's most costly)
    locked_value = f.triangles_now()[0][1].copy()
    f.delete_triangles([0, 2, f.n_triangles - 1])
    f.step(300 - f.iteration)
    f.finish()
    scene = f.scene
    assert scene.n_triangles == 12 and f.n_triangles == 12 and len(scene.locked) == 1
    assert np.array_equal(scene.triangles[scene.locked[0]], locked_value) and kept.shape == (10,)
    f.close()


# ---------------------------------------------------------------------- recorded, replayed
@pytest.mark.gpu
def test_edits_asked_while_running_replay_to_the_same_bytes(gpu_engine):
    f = Fitter(sample_path("astronaut.png"), triangles=12, size=32, seed=3, engine=gpu_engine, **EVENTFUL)
    run = FitRun(f, StopConditions(iterations=160), chunk=7)
    for progress in run:
        it = progress.stats.iteration
        if it == 35:
            tris, _, ids = f.triangles_now()
            run.request("edit", {"op": "delete", "ids": [ids[3]]})  # two edits in one chunk: both apply, in order
            run.request("edit", {"op": "set", "id": ids[5], "values": moved(tris[5], 0.1, 0.0)})
        if it == 70:
            run.request("edit", {"op": "lock", "ids": f.triangles_now()[2][:2]})
        if it == 98:
            run.request("edit", {"op": "insert", "indices": [0], "values": [[0.1, 0.1, 0.9, 0.1, 0.5, 0.9, 1, 0, 0, 0.5]],
                                 "locked": []})
    original = f.scene
    f.close()
    kinds = [(c[0], c[1], c[2].get("op") if isinstance(c[2], dict) else None) for c in original.meta["changes"]
             if c[1] in ("edit", "locked")]
    assert kinds == [(35, "edit", "delete"), (35, "edit", "set"), (70, "locked", None), (98, "edit", "insert")]
    g = Fitter(sample_path("astronaut.png"), engine=gpu_engine, **original.meta["settings"])
    replay_run(g, original.meta).run()
    assert g.scene.to_json() == original.to_json()
    g.close()


@pytest.mark.gpu
def test_a_scene_taken_over_grown_replays_to_the_same_bytes(gpu_engine):
    """The GUI's case: a lock and a delete while running, then paused (no finish) over-grown, some
    iterations after the last event -- the device's own scene records, not the host's rounding
    that a set state writes. Its scene is what stopping there gives, which the replay does."""
    f = Fitter(sample_path("astronaut.png"), triangles=20, size=48, seed=0, engine=gpu_engine)
    run = FitRun(f, StopConditions(), chunk=5)  # no stop: as the GUI runs, until paused
    for progress in run:
        if progress.stats.iteration == 55:
            tris, _, ids = f.triangles_now()
            run.request("edit", {"op": "lock", "ids": [ids[11]]})
            run.request("edit", {"op": "delete", "ids": [ids[10]]})
        if progress.stats.iteration >= 105:
            break
    assert f.n_triangles > f.settings.triangles  # over-grown (grown at 100), records the device's
    original = f.scene
    assert [c[1] for c in original.meta["changes"]] == ["locked", "edit"]
    f.close()
    g = Fitter(sample_path("astronaut.png"), engine=gpu_engine, **original.meta["settings"])
    replay_run(g, original.meta).run()  # (ends with finish(): pruned to the count)
    assert g.n_triangles == g.settings.triangles
    assert g.scene.to_json() == original.to_json()
    g.close()


def test_a_reference_scene_taken_over_grown_replays_to_the_same_bytes(ref_engine):
    """The same on the float64 reference, whose state a prune rounds to float32."""
    settings = {"growth_stages": 1, "overgrow": 2.0, "respawn_every": 0, "coarse_fraction": 0}
    f = Fitter(sample_path("astronaut.png"), triangles=6, size=24, seed=0, engine=ref_engine, **settings)
    for progress in FitRun(f, StopConditions(), chunk=3):
        if progress.stats.iteration >= 14:
            break
    assert f.n_triangles > f.settings.triangles
    original = f.scene
    g = Fitter(sample_path("astronaut.png"), engine=ref_engine, **original.meta["settings"])
    replay_run(g, original.meta).run()
    assert g.n_triangles == g.settings.triangles and g.scene.to_json() == original.to_json()


# ---------------------------------------------------------------------- picking
def _tri(x0, y0, x1, y1, x2, y2, a, rgb=(0.5, 0.5, 0.5)):
    return [x0, y0, x1, y1, x2, y2, *rgb, a]


def test_pick_takes_the_topmost_triangle_that_shows():
    big = _tri(0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.9)
    small = _tri(0.1, 0.1, 0.4, 0.1, 0.1, 0.4, 0.9)
    faint = _tri(0.1, 0.1, 0.4, 0.1, 0.1, 0.4, 0.01)
    cover = _tri(0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.995)
    p = (0.2, 0.2)
    assert pick(np.array([big, small]), 0.002, 40, 30, *p) == 1
    assert pick(np.array([big, faint]), 0.002, 40, 30, *p) == 0        # too faint to show: the one beneath
    assert pick(np.array([small, cover]), 0.002, 40, 30, *p) == 1      # on top and opaque
    assert pick(np.array([small, big, cover]), 0.002, 40, 30, *p) == 2
    assert pick(np.array([small, cover]), 0.002, 40, 30, 0.9, 0.9) is None  # outside both
    hidden = np.array([small, _tri(0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0)])  # an opaque one above: the small one never shows
    assert pick(hidden[:, :], 0.002, 40, 30, *p) == 1
    assert pick(np.zeros((0, 10)), 0.01, 4, 4, 0.5, 0.5) is None


def test_pick_rect_takes_centroids_inside():
    tris = np.array([_tri(0.1, 0.1, 0.2, 0.1, 0.1, 0.2, 1), _tri(0.7, 0.7, 0.8, 0.7, 0.7, 0.8, 1),
                     _tri(0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1)])
    assert pick_rect(tris, 0.0, 0.0, 0.5, 0.5) == [0, 2]
    assert pick_rect(tris, 0.9, 0.9, 0.6, 0.6) == [1]  # corners in any order
    assert pick_rect(tris, 0.5, 0.0, 0.6, 0.1) == []
