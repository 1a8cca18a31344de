"""Where new triangles go (render/placement.py): shaped to the residual around them."""

import numpy as np
import pytest

from trifit import reference as R
from trifit.fitloop import FitSettings
from trifit.placement import new_triangles, removal_costs, shape_to_residual, shapes_to_residual
from trifit.scene import Scene


def _bar_target(scale=1):
    """Grey with one red bar, 24 px long and 3 px high (at scale 1), across the middle."""
    t = np.full((40 * scale, 48 * scale, 3), 0.5)
    t[19 * scale:22 * scale, 12 * scale:36 * scale] = (0.9, 0.1, 0.1)
    return t


def _corners_px(verts, W, H):
    return verts.reshape(3, 2) * np.array([W, H])


@pytest.mark.parametrize("scale", [1, 12])  # 12: a window large enough to be read every few pixels
def test_a_triangle_on_a_bar_lies_along_it_in_its_colour(scale):
    t = _bar_target(scale)
    H, W = t.shape[:2]
    residual = t - t.mean(axis=(0, 1), keepdims=True)
    verts, rgb, rho = shape_to_residual(t, residual, 24.0 * scale, 20.5 * scale, r_px=12.0 * scale, angle=0.3)
    p = _corners_px(verts, W, H) / scale
    extent = p.max(axis=0) - p.min(axis=0)
    assert extent[0] > 4 * extent[1], f"not along the bar: extent {extent}"
    assert 12 <= p[:, 0].mean() <= 36 and 19 <= p[:, 1].mean() <= 22
    np.testing.assert_allclose(rgb, (0.9, 0.1, 0.1), atol=0.02)
    assert 1.0 < rho / scale < 12.0


def test_a_flat_residual_gives_no_shape():
    t = np.full((16, 16, 3), 0.3)
    assert shape_to_residual(t, t - 0.3, 8.0, 8.0, r_px=4.0, angle=0.0) is None


def _blobs(W=48, H=48, seed=0):
    truth = Scene.random(8, W, H, seed=seed, sigma_px=1.0)
    return np.clip(R.render(truth), 0, 1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shaped_first_triangles_start_closer_than_random_ones(seed):
    t = _blobs(seed=seed)
    H, W = t.shape[:2]
    mse = {}
    for shape in ("residual", "random"):
        s = FitSettings(triangles=12, insert_shape=shape)
        tris = new_triangles(t, 12, None, np.random.default_rng(seed), s)
        assert tris.shape == (12, 10) and np.all(np.isfinite(tris))
        img = R.render(Scene(W, H, 1.0 / min(W, H), t.mean(axis=(0, 1)), tris))
        mse[shape] = float(np.mean((img - t) ** 2))
    assert mse["residual"] < mse["random"], mse


def test_flat_targets_and_unknown_shapes():
    flat = np.full((20, 30, 3), 0.25)
    tris = new_triangles(flat, 5, None, np.random.default_rng(0), FitSettings(triangles=5))
    assert tris.shape == (5, 10) and np.all(np.isfinite(tris))  # falls back to the random rule
    with pytest.raises(ValueError, match="insert_shape"):
        new_triangles(flat, 5, None, np.random.default_rng(0), FitSettings(insert_shape="blob"))


@pytest.mark.parametrize("sigma_px", [0.5, 2.0])
def test_removal_costs_are_what_removing_each_triangle_costs(sigma_px):
    scene = Scene.random(7, 24, 20, seed=4, sigma_px=sigma_px)
    t = np.random.default_rng(1).uniform(0, 1, (20, 24, 3))
    base = np.sum((R.render(scene) - t) ** 2)
    brute = [np.sum((R.render(Scene(24, 20, scene.sigma, scene.background, np.delete(scene.triangles, i, 0))) - t) ** 2)
             - base for i in range(7)]
    np.testing.assert_allclose(removal_costs(scene.triangles, scene.background, scene.sigma, t), brute,
                               atol=1e-4 * max(np.abs(brute)))


def test_box_distances_are_the_reference_distances():
    from trifit.placement import _signed_distance_boxes

    rng = np.random.default_rng(3)
    verts = rng.uniform(-4, 20, (6, 3, 2))
    verts[5, 2] = verts[5, 0] + 0.5 * (verts[5, 1] - verts[5, 0])  # zero area: outside everywhere
    xs = np.arange(-2, 14)[None, None, :] + 0.5 + np.zeros((6, 1, 1))
    ys = np.arange(-1, 11)[None, :, None] + 0.5 + np.zeros((6, 1, 1))
    got = _signed_distance_boxes(verts, xs, ys)
    gx, gy = np.meshgrid(xs[0, 0], ys[0, :, 0])
    want, _ = R.signed_distance(verts, gx.ravel(), gy.ravel(), want_grad=False)
    # the reference keeps the lower edge on near-ties (TIE_ABS + TIE_REL * d): its value may be that much larger
    np.testing.assert_allclose(got.reshape(6, -1), want, atol=R.TIE_ABS + R.TIE_REL * 40, rtol=0)
    assert np.all(got[5] <= 0)


def test_shapes_for_many_centres_are_the_shapes_one_at_a_time():
    rng = np.random.default_rng(5)
    H, W = 40, 56
    target = rng.uniform(0, 1, (H, W, 3))
    residual = target - rng.uniform(0, 1, (H, W, 3))
    residual[4:12, 4:12] = 0  # no residual at a centre: no shape
    n = 40
    cx, cy = rng.uniform(-3, W + 3, n), rng.uniform(-3, H + 3, n)  # some windows cross the border
    cx[0], cy[0] = 8.0, 8.0
    r = rng.uniform(1.0, 20.0, n)
    r[1] = 600.0  # a window wider than 128 px: read every few pixels
    angle = rng.uniform(0, 2 * np.pi, n)
    many = shapes_to_residual(target, residual, cx, cy, r, angle)
    assert many[0] is None and many[1] is not None
    for i, got in enumerate(many):
        want = shape_to_residual(target, residual, cx[i], cy[i], r[i], angle[i])
        assert (got is None) == (want is None), i
        if want is not None:
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)
