"""Focus maps (per-pixel loss weights, issue 20): the float64 reference's weighted loss against
central differences, the GPU's against the reference, a map of ones against no map (the same
bits), placement by weighted error, loading masks, and ``trifit fit --weights``."""

import math
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image
from test_gpu_engine import GRAD_TOL, VARIANTS, _groups, _rel, _scene
from test_reference import _fd

from trifit import Engine, Fitter, ImageError, Scene, focus, reference as R
from trifit.fitloop import FitSettings
from trifit.gpu import shaders
from trifit.imageio import load_image
from trifit.placement import error_map, new_triangles, removal_costs


def _weights(H, W, seed=0):
    """Random weights with a white band and a black one: every kind of pixel."""
    rng = np.random.default_rng(seed)
    w = rng.uniform(0, 1, (H, W))
    w[: H // 4] = 1.0
    w[:, : W // 4] = 0.0
    return w


# ---------------------------------------------------------------------- the reference
@pytest.mark.parametrize("n, W, H, sp, loss", [(4, 12, 12, 1.5, "mse"), (5, 14, 10, 0.6, "mse"), (4, 12, 12, 1.0, "l1")])
def test_weighted_gradient_matches_central_differences(n, W, H, sp, loss):
    scene = Scene.random(n, W, H, seed=n * 5 + W, sigma_px=sp)
    rng = np.random.default_rng(1)
    image = R.render(scene)
    # |render - target| kept away from 0: the l1 kink is never within a step
    target = np.clip(image + rng.choice([-1, 1], image.shape) * rng.uniform(0.05, 0.3, image.shape), -1, 2)
    w = _weights(H, W)
    loss_v, g_t, g_b = R.loss_and_grad(scene, target, loss, w)
    per = (image - target) ** 2 if loss == "mse" else np.abs(image - target)
    assert loss_v == pytest.approx(np.sum(per * w[..., None]) / (3 * np.sum(w)), rel=1e-12)  # the weighted mean
    fd_t, fd_b = _fd(scene, target, loss, weights=w)
    assert _rel(g_t[:, :6], fd_t[:, :6]) <= 1e-5
    assert _rel(g_t[:, 6:], fd_t[:, 6:]) <= 1e-5
    assert _rel(g_b, fd_b) <= 1e-5


@pytest.mark.parametrize("loss", ["mse", "l1"])
def test_reference_weights_of_ones_are_no_weights(loss):
    scene = Scene.random(6, 16, 12, seed=2)
    target = np.random.default_rng(3).uniform(0, 1, (12, 16, 3))
    plain = R.loss_and_grad(scene, target, loss)
    ones = R.loss_and_grad(scene, target, loss, np.ones((12, 16)))
    assert plain[0] == ones[0]
    assert np.array_equal(plain[1], ones[1]) and np.array_equal(plain[2], ones[2])
    # a black pixel counts for nothing: changing its target changes neither loss nor gradient
    w = _weights(12, 16)
    moved = target.copy()
    moved[:, 0] = 1 - moved[:, 0]
    a, b = R.loss_and_grad(scene, target, loss, w), R.loss_and_grad(scene, moved, loss, w)
    assert a[0] == pytest.approx(b[0], rel=1e-12) and np.allclose(a[1], b[1], rtol=1e-12, atol=1e-15)


def test_weighted_removal_costs_are_the_weighted_error_growth():
    scene = Scene.random(5, 20, 16, seed=4)
    target = np.random.default_rng(5).uniform(0, 1, (16, 20, 3))
    w = _weights(16, 20)
    costs = removal_costs(scene.triangles, scene.background, scene.sigma, target, w)

    def sse(s):
        return float(np.sum(w[..., None] * (R.render(s) - target) ** 2))

    base = sse(scene)
    for i in range(scene.n_triangles):
        less = scene.copy()
        less.triangles = np.delete(less.triangles, i, axis=0)
        assert costs[i] == pytest.approx(sse(less) - base, rel=1e-6, abs=1e-9)


# ---------------------------------------------------------------------- the GPU
@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["subgroups", "segmented", "4-pixels-per-thread"])
@pytest.mark.parametrize("n, W, H, sp", [(5, 64, 64, 1.5), (40, 48, 20, 0.2), (300, 40, 40, 1.0)])
def test_gpu_weighted_loss_gradient_and_removal_costs_match_reference(gpu_ctx, n, W, H, sp, variant):
    subgroups, segmented, ppt = VARIANTS[variant]
    eng = Engine("gpu", subgroups=subgroups and gpu_ctx.has_subgroups, segmented=segmented, pixels_per_thread=ppt)
    scene = _scene(n, W, H, seed=n + W, sigma_px=sp)
    target = np.random.default_rng(n).uniform(0, 1, (H, W, 3))
    w = _weights(H, W, seed=n)
    for loss in ("mse", "l1"):
        loss_g, grad = eng.loss_and_grad(scene, target, loss, weights=w)
        loss_r, gt, gb = R.loss_and_grad(scene, target, loss, w)
        assert loss_g == pytest.approx(loss_r, rel=1e-5)
        ours = _groups(grad.triangles, grad.background)
        for name, want in _groups(gt, gb).items():
            assert _rel(ours[name], want) <= GRAD_TOL, (name, loss)
    want = removal_costs(scene.triangles, scene.background, scene.sigma, target, w)
    got = eng.removal_costs(scene, target, weights=w)
    assert np.abs(got - want).max() <= 1e-4 * max(np.abs(want).max(), 1e-6)


@pytest.mark.gpu
def test_gpu_weights_of_ones_give_the_unweighted_bits(gpu_engine):
    scene = _scene(40, 48, 20, seed=3, sigma_px=1.0)
    target = np.random.default_rng(3).uniform(0, 1, (20, 48, 3))
    ones = np.ones((20, 48))
    for loss in ("mse", "l1"):
        (l0, g0), (l1, g1) = gpu_engine.loss_and_grad(scene, target, loss), \
            gpu_engine.loss_and_grad(scene, target, loss, weights=ones)
        assert l0 == l1 and np.array_equal(g0.triangles, g1.triangles) and np.array_equal(g0.background, g1.background)
    assert np.array_equal(gpu_engine.removal_costs(scene, target), gpu_engine.removal_costs(scene, target, weights=ones))


@pytest.mark.gpu
def test_a_fit_weighted_by_ones_is_the_unweighted_fit_to_the_bit(gpu_engine):
    # the default strategy at a small size: coarse stage, growth, over-growth and pruning,
    # respawn and sigma probes all run, each through its weighted path
    scenes = []
    for weights in (None, np.ones((48, 48))):
        f = Fitter(_astronaut(), triangles=20, size=48, engine=gpu_engine, weights=weights)
        f.plan(300)
        f.step(300)
        scenes.append(f.scene)
        f.close()
    plain, ones = scenes
    assert np.array_equal(plain.triangles, ones.triangles) and plain.sigma == ones.sigma
    assert np.array_equal(plain.background, ones.background)
    assert "weights" not in plain.meta and ones.meta["weights"]["sha256"] == focus.digest(np.ones((48, 48)))


@pytest.mark.gpu
def test_the_gpu_loop_follows_the_reference_loop_on_a_weighted_loss(gpu_engine, ref_engine):
    t = R.render(Scene.random(12, 40, 30, seed=0, sigma_px=1.0))
    w = _weights(30, 40)
    # (the GPU loop culled as renders are, 1e-5: the mechanism against the float64 loop; one replica
    # each, where a GPU's default would run two)
    fits = [Fitter(t, triangles=10, size=40, seed=3, engine=e, weights=w, cull_tolerance=1e-5, replicas=1)
            for e in (gpu_engine, ref_engine)]
    for f in fits:
        f.step(10)
    (fg, fr), plain = fits, Fitter(t, triangles=10, size=40, seed=3, engine=ref_engine, replicas=1)
    plain.step(10)
    np.testing.assert_allclose(fg.history.losses, fr.history.losses, rtol=2e-4)
    np.testing.assert_allclose(fg.scene.triangles, fr.scene.triangles, atol=2e-4)
    assert not np.allclose(fr.history.losses, plain.history.losses, rtol=1e-3)  # the weights are in force
    fg.close()


@pytest.mark.gpu
def test_a_focus_map_set_mid_fit_takes_over_the_loss(gpu_engine):
    t = _astronaut(40)
    w = np.zeros((40, 40))
    w[:, :20] = 1.0
    f = Fitter(t, triangles=10, size=40, engine=gpu_engine)
    f.set_sigma(1.0)  # (pinned: the next iteration renders the scene as it is now)
    f.step(20)
    f.set_weights(w)
    now = R.render(f.scene)
    f.step(1)  # its loss is of the parameters before its step
    assert f.last_losses()[0] == pytest.approx(R.loss_value(now, t, "mse", w), rel=1e-3)
    assert f.last_losses()[0] != pytest.approx(R.loss_value(now, t, "mse"), rel=1e-2)
    assert f.scene.meta["weights"]["sha256"] == focus.digest(w)
    f.set_weights(None)
    f.step(1)
    assert "weights" not in f.scene.meta and f.focus is None
    f.close()


def _astronaut(size=None):
    from trifit.resources import sample_path

    return load_image(sample_path("astronaut.png"), size or 96)


# ---------------------------------------------------------------------- the kernels' variants
def test_the_focus_variant_is_its_own_piece_and_binding():
    for name in ("forward.wgsl", "forward_listed.wgsl", "forward_fine.wgsl", "backward.wgsl"):
        plain = shaders.kernel_source(name, subgroups=False)
        weighted = shaders.kernel_source(name, subgroups=False, weighted=True)
        assert "shaders/focus_none.wgsl" in plain and "var<storage, read> weights" not in plain
        assert "shaders/focus_map.wgsl" in weighted and "@binding(WEIGHTS_BINDING) var<storage, read> weights" in weighted
        # the unweighted kernel is the weighted one with the focus piece swapped, nothing else
        strip = lambda src, piece: src.split(f"// ---- shaders/{piece}")[0]  # noqa: E731
        assert strip(plain, "focus_none.wgsl") == strip(weighted, "focus_map.wgsl")
    assert "focus" not in shaders.kernel_source("adam.wgsl", subgroups=False, weighted=True)


# ---------------------------------------------------------------------- maps and placement
def test_focus_maps_are_resized_checked_and_scaled(tmp_path):
    grey = np.zeros((40, 60), np.uint8)
    grey[:, :30] = 255
    Image.fromarray(grey, "L").save(tmp_path / "m.png")
    Image.fromarray(np.stack([grey] * 3, -1), "RGB").save(tmp_path / "rgb.png")
    m = focus.focus_map(tmp_path / "m.png", (20, 30))
    assert m.shape == (20, 30) and m[:, :14].min() == 1.0 and m[:, 16:].max() == 0.0
    assert np.array_equal(focus.focus_map(tmp_path / "rgb.png", (20, 30)), m)  # any mode: its grey levels
    assert np.array_equal(focus.focus_map(grey, (20, 30)), m)                  # uint8 arrays as 0..255
    assert focus.focus_map(grey.astype(float) / 255, (41, 61)).shape == (41, 61)  # a pixel of rounding is the aspect
    with pytest.raises(ImageError, match="aspect ratio"):
        focus.focus_map(tmp_path / "m.png", (30, 30))
    with pytest.raises(ImageError, match="all black"):
        focus.focus_map(np.zeros((20, 30)), (20, 30))
    for shape in ((20, 30), (40, 60)):  # (checked before a resize could hide it)
        with pytest.raises(ImageError, match=r"in \[0, 1\]"):
            focus.focus_map(np.full(shape, 1.5), (20, 30))
    see_through = Image.fromarray(np.zeros((40, 60, 4), np.uint8), "RGBA")  # transparent: white, as a file's
    assert np.all(focus.focus_map(see_through, (20, 30)) == 1.0)
    half = focus.half_size(m[None], (10, 15))[0]
    assert half.shape == (10, 15) and half[:, :7].min() == 1.0 and half[:, 8:].max() == 0.0
    s = focus.scaled(np.stack([np.ones((4, 5)), np.r_[np.zeros((2, 5)), np.ones((2, 5))]]))
    assert np.all(s[0] == 1.0) and np.allclose(s[1].mean(), 1.0) and np.all(s[1, :2] == 0)


def test_the_engine_takes_a_focus_picture_as_the_fitter_does(tmp_path, ref_engine):
    """Engine.loss_and_grad / removal_costs with a path or a PIL image: the map focus_map makes of
    it at the target's frame, the same numbers as that array; a bad picture is one ImageError."""
    grey = np.zeros((40, 60), np.uint8)
    grey[:, :30] = 255
    Image.fromarray(grey, "L").save(tmp_path / "m.png")
    scene = Scene.random(6, 30, 20, seed=1)
    target = np.random.default_rng(0).random((20, 30, 3))
    as_array = focus.focus_map(tmp_path / "m.png", (20, 30))
    want_loss, want_grad = ref_engine.loss_and_grad(scene, target, weights=as_array)
    for picture in (tmp_path / "m.png", str(tmp_path / "m.png"), Image.fromarray(grey, "L")):
        loss, grad = ref_engine.loss_and_grad(scene, target, weights=picture)
        assert loss == want_loss and np.array_equal(grad.triangles, want_grad.triangles)
        assert np.array_equal(ref_engine.removal_costs(scene, target, weights=picture),
                              ref_engine.removal_costs(scene, target, weights=as_array))
    unweighted = ref_engine.loss_and_grad(scene, target)[0]
    assert unweighted != want_loss  # (the map mattered)
    with pytest.raises(ImageError, match="aspect ratio"):
        ref_engine.loss_and_grad(scene, np.zeros((30, 30, 3)), weights=tmp_path / "m.png")
    with pytest.raises(ImageError, match="no such file"):
        ref_engine.loss_and_grad(scene, target, weights=tmp_path / "missing.png")


def test_new_triangles_go_where_the_weighted_error_is():
    target = np.random.default_rng(0).uniform(0, 1, (32, 32, 3)).astype(np.float32)
    w = np.zeros((32, 32))
    w[:, :8] = 1.0
    err = error_map(target, None, weights=w)
    assert err[:, 8:].max() < 1e-3 * err[:, :8].mean()
    tris = new_triangles(target, 40, None, np.random.default_rng(1), FitSettings(), weights=w)
    centres_x = tris[:, 0:6:2].mean(axis=1)
    assert centres_x.max() < 0.5  # every one centred in the left quarter, give or take its size


# ---------------------------------------------------------------------- the command line
def _cli(*args):
    p = subprocess.run([sys.executable, "-P", "-m", "trifit.cli", *map(str, args)], capture_output=True, text=True,
                       timeout=300)
    return p.returncode, p.stderr


@pytest.fixture
def astro(tmp_path):
    from trifit.resources import sample_path

    path = tmp_path / "astro.png"
    path.write_bytes(open(sample_path("astronaut.png"), "rb").read())
    return path


def test_bad_masks_are_refused_with_one_line(tmp_path, astro):
    Image.fromarray(np.zeros((64, 64), np.uint8)).save(tmp_path / "black.png")
    Image.fromarray(np.full((64, 128), 255, np.uint8)).save(tmp_path / "wide.png")
    (tmp_path / "junk.png").write_bytes(b"not an image")
    for mask, why in (("black.png", "all black"), ("wide.png", "aspect ratio"), ("junk.png", "not an image"),
                      ("missing.png", "no such file")):
        code, err = _cli("fit", astro, "--weights", tmp_path / mask, "--iters", "1", "-o", tmp_path / "o.json")
        assert code == 2 and err.count("\n") == 1 and why in err, (mask, err)
        assert not (tmp_path / "o.json").exists()


@pytest.mark.gpu
def test_a_left_half_mask_raises_the_left_half_psnr(tmp_path, astro, gpu_engine):
    """At equal triangles and iterations, a mask weighting the left half moves quality there."""
    left = np.zeros((512, 512), np.uint8)
    left[:, :256] = 255
    Image.fromarray(left).save(tmp_path / "left.png")
    target = load_image(astro, 48).astype(np.float64)
    psnr = {}
    for name, extra in (("plain", []), ("left", ["--weights", tmp_path / "left.png"])):
        out = tmp_path / f"{name}.json"
        code, err = _cli("fit", astro, "--tris", "30", "--size", "48", "--iters", "300", "--backend", "gpu",
                         "-o", out, "--quiet", *extra)
        assert code == 0, err
        img = gpu_engine.render(Scene.load(out)).astype(np.float64)
        psnr[name] = 10 * math.log10(1 / np.mean((img[:, :24] - target[:, :24]) ** 2))
    assert Scene.load(tmp_path / "left.json").meta["weights"]["source"] == str(tmp_path / "left.png")
    assert psnr["left"] > psnr["plain"] + 1.0, psnr


@pytest.mark.gpu
def test_a_weighted_fit_replays_only_with_its_map(tmp_path, astro, gpu_ctx):
    left = np.zeros((64, 64), np.uint8)
    left[:, :32] = 200
    Image.fromarray(left).save(tmp_path / "left.png")
    Image.fromarray(255 - left).save(tmp_path / "right.png")
    first, again = tmp_path / "a.json", tmp_path / "b.json"
    common = ["--tris", "10", "--size", "32", "--quiet", "--backend", "gpu"]
    assert _cli("fit", astro, *common, "--iters", "60", "--weights", tmp_path / "left.png", "-o", first)[0] == 0
    assert _cli("fit", astro, "--quiet", "--backend", "gpu", "--replay", first, "--weights", tmp_path / "left.png",
                "-o", again)[0] == 0
    assert Scene.load(first).triangles.tolist() == Scene.load(again).triangles.tolist()
    for extra in ([], ["--weights", tmp_path / "right.png"]):
        code, err = _cli("fit", astro, "--quiet", "--replay", first, "-o", again, *extra)
        assert code == 2 and "focus map" in err, err
