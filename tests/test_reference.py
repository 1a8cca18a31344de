"""The float64 reference against the model's definitions and central finite differences."""

import numpy as np
import pytest

from trifit import Scene, reference as R


def _fd(scene, target, loss, h=1e-6, weights=None):
    def value(s):
        return R.loss_value(R.render(s), target, loss, weights)

    g_t = np.zeros_like(scene.triangles)
    for i in range(scene.n_triangles):
        for k in range(10):
            a, b = scene.copy(), scene.copy()
            a.triangles[i, k] += h
            b.triangles[i, k] -= h
            g_t[i, k] = (value(a) - value(b)) / (2 * h)
    g_b = np.zeros(3)
    for k in range(3):
        a, b = scene.copy(), scene.copy()
        a.background[k] += h
        b.background[k] -= h
        g_b[k] = (value(a) - value(b)) / (2 * h)
    return g_t, g_b


def _rel(a, b):
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)


CASES = [  # (triangles, W, H, sigma px, loss)
    (4, 12, 12, 1.5, "mse"),
    (6, 16, 10, 0.4, "mse"),   # sharp edges, non-square
    (3, 9, 14, 5.0, "mse"),    # very soft
    (5, 12, 12, 1.0, "l1"),
]


@pytest.mark.parametrize("n, W, H, sp, loss", CASES)
def test_gradient_matches_central_differences(n, W, H, sp, loss):
    scene = Scene.random(n, W, H, seed=n * 7 + W, sigma_px=sp)
    scene.triangles[0, :6] += np.array([1.3, 0.0, 1.3, 0.0, 1.3, 0.0])  # one triangle off the frame
    rng = np.random.default_rng(0)
    image = R.render(scene)
    # keep |render - target| away from 0 so the l1 kink is never within a step
    target = np.clip(image + rng.choice([-1, 1], image.shape) * rng.uniform(0.05, 0.3, image.shape), -1, 2)
    loss_v, g_t, g_b = R.loss_and_grad(scene, target, loss)
    assert loss_v == pytest.approx(R.loss_value(image, target, loss), rel=1e-12)
    fd_t, fd_b = _fd(scene, target, loss)
    assert _rel(g_t[:, :6], fd_t[:, :6]) <= 1e-5
    assert _rel(g_t[:, 6:], fd_t[:, 6:]) <= 1e-5
    assert _rel(g_b, fd_b) <= 1e-5


def test_compositing_order_and_background():
    # two opaque-ish full-frame triangles: the later one is on top
    big = [-2, -2, 4, -2, -2, 4]
    s = Scene(4, 4, 0.01, [0.0, 0.0, 1.0], [big + [1, 0, 0, 0.5], big + [0, 1, 0, 0.5]])
    img = R.render(s)
    # C1 = bg*.5 + red*.5 ; C2 = C1*.5 + green*.5
    np.testing.assert_allclose(img[0, 0], [0.25, 0.5, 0.25], atol=1e-9)
    empty = Scene(3, 2, 0.01, [0.2, 0.4, 0.6], np.zeros((0, 10)))
    np.testing.assert_allclose(R.render(empty), np.broadcast_to([0.2, 0.4, 0.6], (2, 3, 3)))


def test_coverage_is_half_on_edge_and_signed_distance_exact():
    # right triangle with legs on the axes: at the pixel centre (0.5, 0.5) of an 8x8 frame
    verts = np.array([[[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]]])
    px, py = np.array([0.5, 5.0, 1.0]), np.array([0.5, 5.0, 0.0])
    d, _ = R.signed_distance(verts, px, py, want_grad=False)
    assert d[0, 0] == pytest.approx(0.5)              # inside: nearest edge line
    assert d[0, 1] == pytest.approx(-6 / np.sqrt(2))  # outside: hypotenuse x + y = 4 from (5, 5)
    assert d[0, 2] == pytest.approx(0.0)              # on the boundary


def test_signed_distance_is_winding_independent_and_rounded_at_corners():
    verts = np.array([[[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]], [[0.0, 0.0], [0.0, 4.0], [4.0, 0.0]]])
    px, py = np.array([-3.0, 1.0]), np.array([-4.0, 1.0])
    d, _ = R.signed_distance(verts, px, py, want_grad=False)
    np.testing.assert_allclose(d[0], d[1])
    assert d[0, 0] == pytest.approx(-5.0)  # corner: distance to the vertex (0,0), not an edge line


def test_zero_area_triangle_has_no_inside():
    verts = np.array([[[1.0, 1.0], [3.0, 3.0], [2.0, 2.0]]])
    d, _ = R.signed_distance(verts, np.array([2.0, 2.5]), np.array([2.0, 1.5]), want_grad=False)
    assert d[0, 0] == pytest.approx(0.0) and d[0, 1] < 0


def test_resolution_independence():
    s = Scene.random(12, 20, 14, seed=5, sigma_px=1.0)
    one = R.render(s)
    four = R.render(s, 80, 56).reshape(14, 4, 20, 4, 3).mean(axis=(1, 3))
    mse = np.mean((one - four) ** 2)
    assert 10 * np.log10(1 / mse) > 40
