"""Batch mode: every image fitted, bad ones reported and skipped (exit 2), resumable, nothing
lost or half-written when interrupted."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from PIL import Image

from trifit import Scene
from trifit.batch import SUMMARY_NAME, find_images, output_names, run_batch
from trifit.cli import main
from trifit.run import StopConditions

pytestmark = pytest.mark.gpu

FIT = ["--tris", "4", "--size", "16", "--iters", "5", "--quiet"]


@pytest.fixture
def images(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    rng = np.random.default_rng(0)
    for name, (h, w) in {"a.png": (12, 16), "b.jpg": (12, 16), "c.png": (16, 10)}.items():
        Image.fromarray((rng.uniform(0, 1, (h, w, 3)) * 255).astype(np.uint8)).save(d / name)
    (d / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    (d / "notes.txt").write_text("not an image, and not an image suffix: ignored")
    return d


def _scenes(out):
    return sorted(p.name for p in out.glob("*.trifit.json"))


def test_batch_fits_all_reports_bad_and_exits_2(tmp_path, images, capsys, gpu_ctx):
    out = tmp_path / "out"
    assert main(["batch", str(images), "-o", str(out), *FIT]) == 2
    assert _scenes(out) == ["a.trifit.json", "b.trifit.json", "c.trifit.json"]
    for name in _scenes(out):
        s = Scene.load(out / name)
        assert s.n_triangles == 4 and max(s.width, s.height) == 16 and s.meta["iterations"] == 5
    err = capsys.readouterr().err
    assert "broken.png" in err and "failed" in err and "Traceback" not in err
    summary = json.loads((out / SUMMARY_NAME).read_text())
    assert (summary["done"], summary["skipped"], summary["failed"]) == (3, 0, 1)
    bad = [r for r in summary["images"] if r["status"] == "failed"]
    assert bad[0]["image"].endswith("broken.png") and bad[0]["error"]
    assert not [p for p in os.listdir(out) if p.endswith(".part")]


def test_batch_resumes_and_skips_finished_work(tmp_path, images, gpu_ctx):
    out = tmp_path / "out"
    (images / "broken.png").unlink()
    assert main(["batch", str(images), "-o", str(out), *FIT]) == 0
    stamps = {p: (out / p).stat().st_mtime_ns for p in _scenes(out)}
    (out / "c.trifit.json").write_text('{"format": "trifit-scene", "version": 1, "width": ')  # corrupt
    assert main(["batch", str(images), "-o", str(out), *FIT]) == 0
    summary = json.loads((out / SUMMARY_NAME).read_text())
    assert (summary["done"], summary["skipped"]) == (1, 2)
    assert (out / "a.trifit.json").stat().st_mtime_ns == stamps["a.trifit.json"]
    Scene.load(out / "c.trifit.json")  # refitted, valid again
    # other settings: the old results are stale and refitted
    assert main(["batch", str(images), "-o", str(out), "--tris", "5", "--size", "16", "--iters", "3", "--quiet"]) == 0
    assert all(Scene.load(out / p).n_triangles == 5 for p in _scenes(out))


def test_interrupted_batch_keeps_finished_results(tmp_path, images, gpu_ctx):
    out = tmp_path / "out"
    seen = []

    def stop_after_first(result):
        seen.append(result)
        if result.status == "done":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_batch([images / "a.png", images / "b.jpg", images / "c.png"], out, triangles=4, size=16,
                  stop=StopConditions(iterations=5), progress=False, on_result=stop_after_first)
    assert _scenes(out) == ["a.trifit.json"]
    Scene.load(out / "a.trifit.json")
    assert not [p for p in os.listdir(out) if p.endswith(".part")]
    assert json.loads((out / SUMMARY_NAME).read_text())["interrupted"] is True
    result = run_batch([str(images / "*.png"), str(images / "*.jpg")], out, triangles=4, size=16,
                       stop=StopConditions(iterations=5), progress=False)
    statuses = {os.path.basename(r.image): r.status for r in result.results}
    assert statuses == {"a.png": "skipped", "broken.png": "failed", "c.png": "done", "b.jpg": "done"}
    assert result.exit_status == 2


class _CtrlCAtFirstFit:
    """Ctrl+C during the batch's first fit, as its first chunk runs: the fit ends after that chunk,
    and no other starts."""

    def __init__(self):
        self.pressed = False

    def watch(self, run):
        step = run.fit.step

        def step_then_press(n, *a, **k):
            stats = step(n, *a, **k)
            if n > 0 and not self.pressed:
                self.pressed = True
                run.cancel()
            return stats

        run.fit.step = step_then_press

    def __bool__(self):
        return self.pressed


@pytest.mark.parametrize("sequential", [True, False], ids=["one-by-one", "batched"])
def test_a_rerun_finishes_what_ctrl_c_interrupted(tmp_path, images, gpu_ctx, sequential):
    """Interrupted scenes are marked and fitted again by a re-run, to an uninterrupted batch's
    bytes; an interrupted fit never replaces a finished scene or a partial one that ran further."""
    (images / "broken.png").unlink()
    opts = dict(triangles=4, size=16, stop=StopConditions(iterations=300), progress=False, backend="gpu",
                sequential=sequential)
    whole, out = tmp_path / "whole", tmp_path / "out"
    run_batch([images], whole, **opts)
    first = run_batch([images], out, ctrl_c=_CtrlCAtFirstFit(), **opts)
    assert first.interrupted and first.exit_status == 130 and first.stopped
    for r in first.stopped:
        partial = Scene.load(r.scene)
        assert partial.meta["interrupted"] is True and 0 < partial.meta["iterations"] == r.iterations < 300
    again = run_batch([images], out, **opts)
    assert {r.status for r in again.results} == {"done"} and len(again.results) == 3
    for name in _scenes(whole):
        assert (out / name).read_bytes() == (whole / name).read_bytes(), name
    # --force, interrupted again: the finished scene stays as it was
    before = {name: (out / name).read_bytes() for name in _scenes(out)}
    third = run_batch([images], out, force=True, ctrl_c=_CtrlCAtFirstFit(), **opts)
    assert third.stopped and all(r.kept_earlier for r in third.stopped)
    assert {name: (out / name).read_bytes() for name in _scenes(out)} == before


def test_an_interrupted_fit_keeps_a_partial_scene_that_ran_further(tmp_path):
    from trifit.batch import existing_result, keeps_earlier

    path = tmp_path / "a.trifit.json"
    assert not keeps_earlier(path, 10)  # nothing there
    scene = Scene.random(4, 16, 12, seed=0)
    scene.meta.update(iterations=50, interrupted=True)
    scene.save(path)
    assert keeps_earlier(path, 10) and keeps_earlier(path, 50) and not keeps_earlier(path, 51)
    assert existing_result(path, 4, 16) is None  # not finished: a re-run fits it
    del scene.meta["interrupted"]
    scene.save(path)
    assert keeps_earlier(path, 10_000) and existing_result(path, 4, 16) is not None


def test_batch_extras_and_name_collisions(tmp_path, images, gpu_ctx):
    Image.open(images / "a.png").save(images / "a.webp")
    out = tmp_path / "out"
    result = run_batch([str(images / "a.*")], out, triangles=3, size=16, stop=StopConditions(iterations=3),
                       render=True, reports=True, progress=False)
    assert result.exit_status == 0 and result.done == 2
    assert _scenes(out) == ["a_png.trifit.json", "a_webp.trifit.json"]
    assert Image.open(out / "a_png.trifit.png").size == (16, 12)
    assert json.loads((out / "a_webp.trifit-report.json").read_text())["iterations"] == 3


def test_outdir_may_be_the_input_folder(images, gpu_ctx):
    """Renders are named NAME.trifit.png: no source is overwritten, and none is refitted later."""
    (images / "broken.png").unlink()
    before = {p.name: p.read_bytes() for p in images.iterdir()}
    assert main(["batch", str(images), "-o", str(images), "--png", *FIT]) == 0
    assert all((images / n).read_bytes() == b for n, b in before.items())
    assert (images / "a.trifit.png").exists()
    assert main(["batch", str(images), "-o", str(images), "--png", *FIT]) == 0
    summary = json.loads((images / SUMMARY_NAME).read_text())
    assert (summary["done"], summary["skipped"]) == (0, 3)


def test_inputs_and_names(tmp_path, images):
    found = find_images([str(images), str(images / "a.png")])  # duplicates dropped
    assert [p.name for p in found] == ["a.png", "b.jpg", "broken.png", "c.png"]
    names = output_names([images / "x.png", images / "x.jpg", images / "y.png"])
    assert sorted(names.values()) == ["x_jpg", "x_png", "y"]
    assert main(["batch", str(tmp_path / "nothing-*.png"), "-o", str(tmp_path / "o"), "--quiet"]) == 2


def test_batched_and_sequential_paths(tmp_path, images, gpu_ctx):
    """--iters on the GPU batches equal-size images (a and b: 12x16); --sequential fits one by one."""
    (images / "broken.png").unlink()
    out, seq = tmp_path / "out", tmp_path / "seq"
    assert main(["batch", str(images), "-o", str(out), "--backend", "gpu", *FIT]) == 0
    assert main(["batch", str(images), "-o", str(seq), "--backend", "gpu", "--sequential", *FIT]) == 0
    a = Scene.load(out / "a.trifit.json")
    assert a.meta["batched"] == 2 and Scene.load(out / "c.trifit.json").meta["batched"] == 1
    assert a.meta["settings"]["strategy"] == "default" and a.meta["iterations"] == 5
    for name in ("a", "b", "c"):  # the same strategy in lockstep: each image as its own fit gives it
        batched, alone = Scene.load(out / f"{name}.trifit.json"), Scene.load(seq / f"{name}.trifit.json")
        np.testing.assert_allclose(batched.triangles, alone.triangles, atol=1e-5)
    assert "batched" not in Scene.load(seq / "a.trifit.json").meta
    assert _scenes(out) == _scenes(seq) == ["a.trifit.json", "b.trifit.json", "c.trifit.json"]


def test_a_batched_groups_bar_shows_its_images_lowest_and_highest_psnr(tmp_path, images, capsys, gpu_ctx):
    import re

    (images / "broken.png").unlink()
    out = tmp_path / "out"
    assert main(["batch", str(images), "-o", str(out), "--backend", "gpu", *FIT[:-1]]) == 0  # (the bar: no --quiet)
    shown = re.findall(r"in one batch.*it [1-9][0-9]* psnr ([0-9.]+)-([0-9.]+)", capsys.readouterr().err)
    assert shown, "the batched group's bar shows no PSNR"
    lo, hi = map(float, shown[-1])
    assert 0 < lo <= hi


def test_sharp_batches_fit_for_crisp_pictures_on_both_paths(tmp_path, images, gpu_ctx):
    """--sharp: every scene ends as soft as a crisp picture, batched as one by one (trifit fit --sharp)."""
    from trifit.export import CRISP_SIGMA_PX

    (images / "broken.png").unlink()
    fit = ["--tris", "4", "--size", "16", "--iters", "40", "--quiet", "--backend", "gpu", "--sharp"]
    out, seq = tmp_path / "out", tmp_path / "seq"
    assert main(["batch", str(images), "-o", str(out), *fit]) == 0
    assert main(["batch", str(images), "-o", str(seq), "--sequential", *fit]) == 0
    assert Scene.load(out / "a.trifit.json").meta["batched"] == 2
    for name in ("a", "b", "c"):
        batched, alone = Scene.load(out / f"{name}.trifit.json"), Scene.load(seq / f"{name}.trifit.json")
        for scene in (batched, alone):
            assert scene.sigma * min(scene.width, scene.height) == pytest.approx(CRISP_SIGMA_PX, rel=1e-6)
            assert scene.meta["settings"]["sigma_probes"] == 0
        np.testing.assert_allclose(batched.triangles, alone.triangles, atol=1e-5)
