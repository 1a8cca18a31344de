"""The library refuses wrong arguments at the call, with a one-line error naming the argument and
the rule (a TrifitError, or TypeError / ValueError), rather than hanging, failing deep inside a
later call, or doing something else silently: Fitter settings and counts, a closed fitter,
BatchFitter's images, stop conditions and live requests, Scene.save, run_batch's inputs."""

from __future__ import annotations

import numpy as np
import pytest

from trifit import BatchFitter, Fitter, Scene, SceneError, SettingsError, StopConditions, TrifitError
from trifit.batch import run_batch
from trifit.engine import Engine
from trifit.run import FitRun


@pytest.fixture(scope="module")
def ref():
    return Engine("reference")


@pytest.fixture
def target():
    return np.random.default_rng(0).random((16, 16, 3)).astype(np.float32)


@pytest.mark.parametrize("kwargs, error, words", [
    ({"chunk": 0}, SettingsError, "'chunk' is 0"),            # (hung: a chunk of 0 never advanced)
    ({"size": 10**6}, TrifitError, "working size"),           # (an array's size was never checked)
    ({"size": 0}, TrifitError, "working size"),               # (fitted a 1 x 1 image)
    ({"loss": "l2"}, SettingsError, "'loss'"),                # (failed at the first step)
    ({"sigma_start_px": 0}, SettingsError, "'sigma_start_px'"),
    ({"prune_stages": 0}, SettingsError, "'prune_stages'"),
    ({"lr_vertex": float("nan")}, SettingsError, "'lr_vertex'"),  # ("keeps diverging" after 8 rollbacks)
    ({"beta2": 1.0}, SettingsError, "'beta2'"),
    ({"init_alpha": 2.0}, SettingsError, "'init_alpha'"),
    ({"triangles": 2.7}, SettingsError, "triangles must be a whole number"),  # (was 2)
    ({"triangles": True}, SettingsError, "triangles must be a whole number"),
    ({"seed": -1}, SettingsError, "seeds must be >= 0"),
    ({"bogus": 1}, SettingsError, "unknown setting 'bogus'"),
])
def test_fitter_settings_are_checked_at_the_call(ref, target, kwargs, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(")):
        Fitter(target, **{"triangles": 3, "size": 16, "engine": ref, **kwargs})


def test_numpy_numbers_are_whole_numbers_and_a_closed_fitter_takes_no_calls(ref, target):
    fit = Fitter(target, triangles=np.int64(3), size=np.int32(16), engine=ref, lr_vertex=np.float64(0.01))
    fit.step(2)
    fit.close()
    fit.close()  # (twice is fine)
    for call in (lambda: fit.step(1), lambda: fit.scene, fit.checkpoint, lambda: fit.set_sigma(1.0)):
        with pytest.raises(TrifitError, match="this fitter is closed"):
            call()


def test_a_plan_is_a_whole_number_of_iterations(ref, target):
    fit = Fitter(target, triangles=3, size=16, engine=ref)
    for bad in (2.5, True, "300", float("nan")):
        with pytest.raises(SettingsError, match="a plan's iterations must be a whole number"):
            fit.plan(bad)
    fit.plan(np.int64(300))
    assert fit.settings.planned_iterations == 300
    fit.plan(0)  # (fewer than one: a plan of one, as a time limit's plan may ask)
    assert fit.settings.planned_iterations == 1
    fit.close()


def test_batch_fitter_wants_a_list_of_images(ref, target):
    for one in (target, "photo.png"):
        with pytest.raises(TrifitError, match="for one image use Fitter"):
            BatchFitter(one, triangles=3, size=16, engine=ref)
    with pytest.raises(SettingsError, match="whole number"):
        BatchFitter([target, target], triangles=3, size=16, seeds="12", engine=ref)
    with pytest.raises(TypeError, match="Checkpoint"):
        Fitter.resume(target, None, ref)


@pytest.mark.parametrize("kwargs, words", [
    ({"iterations": -5}, "iterations must be a whole number >= 0"),
    ({"iterations": 2.5}, "iterations"),
    ({"iterations": "10"}, "iterations"),
    ({"time_limit": 0}, "time_limit must be a positive"),
    ({"time_limit": float("nan")}, "time_limit"),
    ({"plateau": 0}, "plateau must be a whole number >= 1"),
    ({"target_psnr": float("nan")}, "target_psnr must be a finite"),
])
def test_stop_conditions_are_checked(kwargs, words):
    with pytest.raises(SettingsError, match=words):
        StopConditions(**kwargs)


def test_a_run_checks_its_stop_and_requests_on_the_callers_thread(ref, target):
    fit = Fitter(target, triangles=3, size=16, engine=ref)
    stop = StopConditions(iterations=5)
    stop.iterations = -1  # (set after it was made)
    with pytest.raises(SettingsError):
        FitRun(fit, stop)
    with pytest.raises(TypeError, match="StopConditions"):
        FitRun(fit, {"iterations": 5})
    run = FitRun(fit, StopConditions(iterations=5))
    with pytest.raises(SettingsError, match="unknown live change 'zap'"):
        run.request("zap", 1)
    with pytest.raises(SettingsError, match="StopConditions"):
        run.request("stop", None)
    run.run()
    assert fit.iteration == 5


@pytest.mark.parametrize("edit, words", [
    (lambda s: setattr(s, "sigma", -1.0), "'sigma' must be > 0"),
    (lambda s: s.triangles.__setitem__((0, 9), 5.0), "'triangles[0][9]'"),
    (lambda s: s.triangles.__setitem__((0, 1), np.nan), "'triangles[0][1]' must be finite"),
    (lambda s: setattr(s, "background", np.array([2.0, -1.0, 0.5])), "'background"),
    (lambda s: setattr(s, "width", 16.7), "'width' must be a whole number"),
    (lambda s: s.extra.__setitem__("locked", [5]), "locked"),
    (lambda s: setattr(s, "triangles", s.triangles.ravel()), "cannot be written"),
])
def test_scene_save_writes_only_what_load_reads(tmp_path, edit, words):
    p = tmp_path / "s.json"
    Scene.random(3, 16, 12).save(p)
    before = p.read_bytes()
    s = Scene.random(3, 16, 12, seed=1)
    edit(s)
    with pytest.raises(SceneError, match=words.replace("[", r"\[")):
        s.save(p)
    assert p.read_bytes() == before and [q.name for q in tmp_path.iterdir()] == ["s.json"]


def test_run_batch_takes_one_folder_and_checks_its_options_first(ref, tmp_path):
    from PIL import Image

    d = tmp_path / "in"
    d.mkdir()
    Image.fromarray((np.random.default_rng(0).random((12, 16, 3)) * 255).astype(np.uint8)).save(d / "a.png")
    with pytest.raises(SettingsError, match="'triangles'"):
        run_batch(d, tmp_path / "out", triangles=0, engine=ref, progress=False)
    with pytest.raises(SettingsError, match="'loss'"):
        run_batch(d, tmp_path / "out", loss="l2", engine=ref, progress=False)
    assert not (tmp_path / "out").exists()  # refused before the folder was made
    result = run_batch(str(d), tmp_path / "out", triangles=3, size=16, stop=StopConditions(iterations=2),
                       engine=ref, progress=False)  # (a str is one input, not its characters)
    assert [r.status for r in result.results] == ["done"]


def test_the_engine_checks_scene_objects_sizes_and_targets(ref):
    from trifit import BatchError

    s = Scene.random(3, 16, 12)
    for edit, words in ((lambda x: setattr(x, "sigma", float("nan")), "finite"),  # (rendered all NaN)
                        (lambda x: x.triangles.__setitem__((0, 9), 5.0), r"in \[0, 1\]"),  # (rendered)
                        (lambda x: setattr(x, "sigma", -1.0), "sigma must be > 0")):
        bad = s.copy()
        edit(bad)
        with pytest.raises(SceneError, match=words):
            ref.render(bad)
    for width in (0, 2.7, "8", True):
        with pytest.raises(SceneError, match="render"):
            ref.render(s, width)
    assert ref.render(s, np.int64(8)).shape == (6, 8, 3)  # (a width alone keeps the 16 x 12 frame's aspect)
    assert ref.render(s, height=3).shape == (3, 4, 3) and ref.render(s, 8, 12).shape == (12, 8, 3)
    assert ref.render(s, 1).shape == (1, 1, 3)  # (never 0 px high)
    target = (np.random.default_rng(0).random((12, 16, 3)) * 255).astype(np.uint8)
    with pytest.raises(BatchError, match=r"in \[0, 1\]"):  # (0-255 scored as a loss of ~20,000)
        ref.loss_and_grad(s, target)


def test_scene_random_checks_its_arguments():
    for args, kwargs in (((-1, 16, 16), {}), ((2.5, 16, 16), {}), ((3, 100000, 16), {}), ((3, 16, 16), {"seed": -1}),
                         ((3, 16, 16), {"sigma_px": 0.0}), ((3, 16, 16), {"opacity": (2, 3)})):
        with pytest.raises(SceneError):
            Scene.random(*args, **kwargs)
    assert Scene.random(np.int64(3), np.int64(16), 12).n_triangles == 3


def test_edit_wrappers_take_whole_indices_and_rows_of_ten(ref, target):
    fit = Fitter(target, triangles=5, size=16, engine=ref)
    fit.step(2)
    before = fit.scene.triangles.copy()
    for call in (lambda: fit.delete_triangles([1.7]), lambda: fit.delete_triangles([True]),  # (deleted #1)
                 lambda: fit.set_triangle(1.9, [0.5] * 10), lambda: fit.insert_triangles([0], [0.5] * 15)):
        with pytest.raises(SettingsError):
            call()
    assert np.array_equal(fit.scene.triangles, before)  # nothing changed
    n = fit.n_triangles
    fit.delete_triangles(np.array([1]))  # (numpy's whole numbers are whole numbers)
    assert fit.n_triangles == n - 1


def test_a_write_into_a_missing_folder_names_the_file_asked_for(tmp_path):
    from trifit.export import save_render

    with pytest.raises(TrifitError, match=r"x\.png: folder .*nodir does not exist"):
        save_render(Scene.random(2, 8, 8), tmp_path / "nodir" / "x.png", backend="reference")


def test_exports_check_frames_tiles_and_types(ref):
    from trifit.export import AnimationRecorder, render_large

    s = Scene.random(3, 16, 16)
    for kwargs in ({"max_tile": 0}, {"max_tile": (8, 0)}, {"dtype": np.int16}):  # (range() error; all zeros)
        with pytest.raises(ValueError):
            render_large(s, 16, 16, ref, **kwargs)
    assert np.array_equal(render_large(s, 16, 16, ref, max_tile=(8, 4)), render_large(s, 16, 16, ref))
    recorder = AnimationRecorder("unused.gif")
    for frame in (np.zeros((8, 8, 4)), np.zeros((8, 8)), np.zeros((0, 8, 3)), np.full((8, 8, 3), np.nan)):
        with pytest.raises(ValueError, match="a frame is"):  # (save() had failed later, in Pillow)
            recorder.add_frame(frame, 0)
    assert recorder.frames == []


def test_a_script_and_a_replay_are_checked_before_the_run(ref, target):
    from trifit import replay_run

    fit = Fitter(target, triangles=3, size=16, engine=ref)
    for script in ([[2]], [[2, "zap", 1]], [[-1, "sigma", 1.0]], [["2", "sigma", 1.0]], ["plan"]):
        with pytest.raises(SettingsError, match="a script entry"):  # (an unpack or KeyError mid-run)
            FitRun(fit, StopConditions(iterations=5), script=script)
    with pytest.raises(SettingsError, match="meta"):
        replay_run(fit, {})
    run = FitRun(fit, StopConditions(iterations=5), script=[(0, "plan", 5), [2, "sigma", 1.0]])
    run.run()
    assert fit.iteration == 5 and [c[1] for c in fit.changes] == ["plan", "sigma"]


def test_edits_and_locks_that_cannot_be_done_are_refused_whole(ref, target):
    fit = Fitter(target, triangles=5, size=16, engine=ref)
    fit.step(2)
    n = fit.n_triangles
    for request in ([1, 2], {"op": "set", "id": 0}, {"op": "insert", "ids": [1]}):  # (AttributeError, KeyError)
        with pytest.raises(ValueError, match="edit"):
            fit.edit(request)
    with pytest.raises(ValueError, match="more than a fit's 20000"):  # (the fit had gone to 30,000)
        fit.insert_triangles(list(range(20000)), np.full((20000, 10), 0.5))
    assert fit.n_triangles == n
    locked = Scene.random(3, 16, 16)
    locked.extra["locked"] = [7]
    with pytest.raises(SceneError, match="locked"):  # (an IndexError)
        Fitter(target, triangles=3, size=16, engine=ref, init_scene=locked)
    with pytest.raises(IndexError, match="image 5 of a batch of 2"):
        BatchFitter([target, target], triangles=3, size=16, engine=ref).member(5)
