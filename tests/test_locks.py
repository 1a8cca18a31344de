"""Locked triangles (issue 20): the scene file's ``locked`` key, a fit that keeps locked triangles
to the bit through growth, respawn and pruning (on the device and in the reference loop), live
locks recorded and replayed, checkpoints, and ``trifit fit --resume`` of a scene with locks."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from trifit import FitRun, Fitter, Scene, SceneError, StopConditions, replay_run
from trifit.checkpoint import take
from trifit.resources import sample_path

# the default strategy at a small size, made eventful: growth stages, over-growth and pruning
# cycles, and respawns (a high respawn opacity re-places many triangles)
EVENTFUL = {"prune_cycle_min": 20, "respawn_alpha": 0.3}


# ---------------------------------------------------------------------- the scene file
def test_the_locked_key_is_checked_sorted_and_written_back(tmp_path):
    data = Scene.random(5, 10, 10, seed=1).to_dict()
    data["locked"] = [3, 0]
    scene = Scene.from_dict(data)
    assert scene.locked == [0, 3]
    scene.save(tmp_path / "s.json")
    assert json.loads((tmp_path / "s.json").read_text())["locked"] == [0, 3]
    assert Scene.load(tmp_path / "s.json").locked == [0, 3]
    plain = Scene.random(5, 10, 10, seed=1)
    assert plain.locked == [] and "locked" not in plain.to_dict()
    for bad, why in (("0", "must be a list"), ([1.0], r"'locked\[0\]' must be a triangle index in \[0, 5\)"),
                     ([True], "triangle index"), ([5], "got 5"), ([-1], "got -1"), ([2, 2], "twice")):
        data["locked"] = bad
        with pytest.raises(SceneError, match=why):
            Scene.from_dict(data)


# ---------------------------------------------------------------------- a fit keeps them
def _lock_and_run(engine, size, total, lock_at, indices, check_every=10, **settings):
    """A default-strategy fit that locks ``indices`` at ``lock_at``; checks after every chunk
    that the locked triangles' numbers (the scene's, the device's, the raw parameters and Adam
    moments) are the ones they had. Returns the fitter, the locked values, the counts it went
    through from the lock on and the triangles respawned after it."""
    f = Fitter(sample_path("astronaut.png"), triangles=12, size=size, engine=engine, **{**EVENTFUL, **settings})
    f.plan(total)
    f.step(lock_at)
    f.set_locked(indices)
    values = f.scene.triangles[indices]
    on_device = values if engine.backend == "reference" else values.astype(np.float32).astype(np.float64)

    def locked_numbers(slot, idx):  # a slot's raw parameters and Adam moments of its locked triangles
        return [a[slot, : f.n_triangles * 10].reshape(-1, 10)[idx] for a in f._state()]

    # every slot (a GPU's default runs two replicas, whose prunings may renumber the locked
    # triangles apart): each keeps them at its own indices, with the same numbers
    raw_m_v = locked_numbers(0, indices)
    counts, respawned = [f.n_triangles], f.respawned
    while f.iteration < total:
        f.step(check_every)
        counts.append(f.n_triangles)
        assert len(f.locked) == len(indices) and f.locked == sorted(f.locked)
        for slot in range(f.batch):
            idx = [int(i) for i in f.locks[slot]]
            assert all(np.array_equal(a, b) for a, b in zip(locked_numbers(slot, idx), raw_m_v)), (slot, f.iteration)
            assert np.array_equal(f._loop_values()[0][slot, idx], on_device)  # what the loop renders
    f.finish()
    return f, values, counts, f.respawned - respawned


@pytest.mark.gpu
@pytest.mark.parametrize("placement", ["host", "device"])
def test_locked_triangles_stay_to_the_bit_through_growth_respawn_and_pruning(gpu_engine, placement):
    f, values, counts, respawned = _lock_and_run(gpu_engine, 48, 400, 40, [0, 2, 5], placement=placement)
    scene = f.scene
    assert counts[0] < max(counts) > f.n_triangles == 12 and respawned > 0  # grown, over-grown, pruned back
    assert scene.locked == f.locked and np.array_equal(scene.triangles[scene.locked], values)
    assert [c[1:] for c in scene.meta["changes"] if c[1] == "locked"] == [["locked", [0, 2, 5]]]
    f.close()


def test_the_reference_loop_keeps_locked_triangles_too(ref_engine):
    f, values, counts, respawned = _lock_and_run(ref_engine, 20, 120, 20, [0, 3])
    assert counts[0] < max(counts) > f.n_triangles == 12 and respawned > 0
    scene = f.scene
    assert np.array_equal(scene.triangles[scene.locked], values)  # float64: the values themselves


@pytest.mark.gpu
def test_a_live_lock_replays_exactly(gpu_engine):
    f = Fitter(sample_path("astronaut.png"), triangles=12, size=48, seed=2, engine=gpu_engine, **EVENTFUL)
    run = FitRun(f, StopConditions(iterations=200), chunk=9)
    for progress in run:
        if progress.stats.iteration == 45:
            run.request("locked", [1, 4])
    original = f.scene
    f.close()
    assert [c for c in original.meta["changes"] if c[1] == "locked"] == [[45, "locked", [1, 4]]]
    g = Fitter(sample_path("astronaut.png"), engine=gpu_engine, **original.meta["settings"])
    replay_run(g, original.meta).run()
    assert g.scene.to_json() == original.to_json()
    g.close()


@pytest.mark.gpu
def test_a_checkpoint_keeps_the_locks(gpu_engine):
    f = Fitter(sample_path("astronaut.png"), triangles=12, size=48, engine=gpu_engine, **EVENTFUL)
    f.plan(300)
    f.step(60)
    f.set_locked([2, 3])
    f.step(40)
    ck = take(f)
    g = Fitter.resume(sample_path("astronaut.png"), ck, engine=gpu_engine)
    assert g.locked == f.locked
    for fit in (f, g):
        fit.step(200)
    assert f.scene.to_json() == g.scene.to_json() and g.scene.locked == f.locked
    f.close()
    g.close()


@pytest.mark.gpu
def test_a_lost_device_resumes_with_the_locks_where_its_snapshot_had_them(gpu_ctx):
    # in a subprocess (destroying the device must not disturb the other tests' shared device);
    # respawns between the snapshot and the loss renumber the triangles: the locks follow them back
    code = textwrap.dedent("""
        import warnings, numpy as np, trifit
        from trifit.resources import sample_path
        f = trifit.Fitter(sample_path("astronaut.png"), triangles=12, size=32, engine=trifit.Engine("gpu"),
                          respawn_alpha=0.9, respawn_every=10, host_snapshot_every=1000)
        f.step(30)
        f.set_locked([5, 6])  # the top two of seven: every respawn below them moves them down
        values = f.scene.triangles[[5, 6]]
        raw = f._state()[0][0, : f.n_triangles * 10].reshape(-1, 10)[[5, 6]]
        f.step(40)
        moved = f.locked
        assert moved != [5, 6]
        f.inject_fault("device-lost")
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            f.step(50)
        assert f.recoveries == 1 and np.array_equal(f.scene.triangles[f.locked], values), f.locked
        device = f._loop_values()[0][0]  # each locked triangle once on the device, where the locks say
        hits = [np.flatnonzero(np.all(device == row, axis=1)).tolist() for row in values.astype(np.float32)]
        assert hits == [[i] for i in f.locked], (hits, f.locked)
        assert np.array_equal(f._state()[0][0, : f.n_triangles * 10].reshape(-1, 10)[f.locked], raw)
        print("KEPT", moved, f.locked)
    """)
    p = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "KEPT" in p.stdout, p.stderr[-2000:]


def test_locks_are_checked(ref_engine):
    f = Fitter(sample_path("astronaut.png"), triangles=6, size=20, engine=ref_engine, strategy="fixed")
    with pytest.raises(SceneError, match="triangle index"):
        f.set_locked([6])
    f.set_locked([0, 1, 2, 3, 4, 5])
    f.set_locked([1, 4])
    values = f.scene.triangles[[1, 4]]
    with pytest.raises(ValueError, match="locked"):
        f.set_triangles(1)
    with pytest.raises(ValueError, match="drop or reorder locked"):
        f.keep(np.array([[0, 2, 3]]))       # drops triangle 4
    with pytest.raises(ValueError, match="drop or reorder locked"):
        f.keep(np.array([[4, 1, 0]]))       # keeps both, but swaps them
    f.replace([np.array([1, 2])], [f.scene.triangles[:2]])  # 1 is locked: only 2 is re-placed
    assert f.locked == [1, 3] and f.respawned == 1
    f.add([f.scene.triangles[:2]])          # growth adds on top
    assert f.locked == [1, 3] and f.n_triangles == 8
    with pytest.raises(ValueError, match="more than the 6"):
        f.set_locked(range(7))
    f.set_triangles(3)                      # pruning keeps the locked ones, in their order
    assert len(f.locked) == 2 and np.array_equal(f.scene.triangles[f.locked], values)


# ---------------------------------------------------------------------- trifit fit --resume
def _cli(*args):
    p = subprocess.run([sys.executable, "-P", "-m", "trifit.cli", *map(str, args)], capture_output=True, text=True,
                       timeout=300)
    return p.returncode, p.stderr


@pytest.mark.gpu
def test_resume_keeps_the_scenes_locked_triangles_and_writes_their_new_indices(tmp_path, gpu_ctx):
    image = sample_path("astronaut.png")
    first, second, third = (tmp_path / f"{k}.json" for k in "abc")
    common = ["--size", "48", "--backend", "gpu", "--quiet"]
    assert _cli("fit", image, "--tris", "12", "--iters", "150", *common, "-o", first)[0] == 0
    data = json.loads(first.read_text())
    data["locked"] = [1, 4, 7]
    data["triangles"][4][9] = 0.001  # a locked triangle that would be respawned, were it not locked
    data["triangles"][5][9] = 0.001  # ... and an unlocked one that will be
    first.write_text(json.dumps(data))
    locked = [data["triangles"][i] for i in (1, 4, 7)]
    faint = data["triangles"][5]
    # growth: 12 -> 16 triangles, respawns on the way
    assert _cli("fit", image, "--resume", first, "--tris", "16", "--iters", "200", *common, "-o", second,
                "--report", tmp_path / "r.json")[0] == 0
    grown = json.loads(second.read_text())
    assert len(grown["triangles"]) == 16 and json.loads((tmp_path / "r.json").read_text())["respawned"] > 0
    assert [grown["triangles"][i] for i in grown["locked"]] == locked  # the same floats, to the bit
    assert faint not in grown["triangles"]
    # pruning: 16 -> 10, the locked ones kept whatever they cost
    assert _cli("fit", image, "--resume", second, "--tris", "10", "--iters", "60", *common, "-o", third)[0] == 0
    pruned = json.loads(third.read_text())
    assert len(pruned["triangles"]) == 10 and len(pruned["locked"]) == 3
    assert [pruned["triangles"][i] for i in pruned["locked"]] == locked
    code, err = _cli("fit", image, "--resume", third, "--tris", "2", "--iters", "5", *common, "-o", tmp_path / "d.json")
    assert code == 2 and "locks 3 triangles" in err and err.count("\n") == 1
