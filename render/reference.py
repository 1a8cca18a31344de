"""The float64 reference engine: the model of ``docs/MODEL.md`` in numpy, and its analytic
gradient. It is the oracle the GPU engine is tested against, so it favours plainness over speed:
vectorised over (triangles x pixels) in pixel chunks, with an explicit back-to-front loop.

Everything is computed in *pixel units* of the render: a vertex ``(x, y)`` goes to ``(x W, y H)``
and pixel ``(i, j)`` has centre ``(i + 0.5, j + 0.5)``. That is the spec's aspect space scaled by
``S' = min(W, H)``, so ``d / sigma`` (and therefore every coverage) is unchanged, with
``sigma_px = sigma S'``.
"""

from __future__ import annotations

import numpy as np

from .scene import Scene

# Pixels per chunk are chosen so the (T, N, 3) float64 canvas stack stays near this many bytes.
_CHUNK_BYTES = 48 * 1024 * 1024

LOSSES = ("mse", "l1")
# Edge distances closer than TIE_ABS + TIE_REL * d (pixels) count as a tie, broken to the lower
# edge index in both engines, so a zero-area triangle's gradient goes to the same vertices.
TIE_ABS = 1e-4
TIE_REL = 1e-5


def vertices_px(tris: np.ndarray, width: int, height: int) -> np.ndarray:
    """(T, 3, 2) vertex positions in pixel units."""
    v = tris[:, :6].reshape(-1, 3, 2).copy()
    v[..., 0] *= width
    v[..., 1] *= height
    return v


def edge_terms(ax, ay, bx, by, px, py):
    """Pixel centres (px, py) against the segment A->B (arrays that broadcast): the nearest point's
    parameter t in [0, 1], the offset (rx, ry) from it to the pixel, its length, and the cross
    product that says which side of the edge line the pixel is on."""
    ex, ey = bx - ax, by - ay
    wx, wy = px - ax, py - ay
    ee = ex * ex + ey * ey
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(ee > 0, (wx * ex + wy * ey) / np.where(ee > 0, ee, 1.0), 0.0)
    t = np.clip(t, 0.0, 1.0)
    rx, ry = wx - t * ex, wy - t * ey
    return t, rx, ry, np.hypot(rx, ry), ex * wy - ey * wx


def inside_closed(verts: np.ndarray, crosses) -> np.ndarray:
    """Inside test from the three edges' cross products (shape (T, ...)); a zero-area triangle has
    no inside."""
    e1 = verts[:, 1] - verts[:, 0]
    e2 = verts[:, 2] - verts[:, 0]
    orient = np.sign(e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]).reshape((-1,) + (1,) * (crosses[0].ndim - 1))
    return (orient != 0) & (crosses[0] * orient > 0) & (crosses[1] * orient > 0) & (crosses[2] * orient > 0)


def signed_distance(verts: np.ndarray, px: np.ndarray, py: np.ndarray, want_grad: bool):
    """Exact signed distance from pixel centres to each closed triangle, and its vertex gradient.

    verts: (T, 3, 2) in pixel units; px, py: (N,). Returns d (T, N), positive inside, and when
    ``want_grad`` dd/dverts (T, N, 3, 2). Inside, the distance to the nearest edge line equals the
    distance to the nearest edge segment (the largest inscribed disc touches its nearest edge within
    the segment), so one formula -- the nearest segment -- serves both sides, and its gradient is the
    segment distance's gradient with the sign applied.
    """
    T = verts.shape[0]
    N = px.shape[0]
    best = np.full((T, N), np.inf)
    best_edge = np.zeros((T, N), dtype=np.int64)
    best_t = np.zeros((T, N))
    best_rx = np.zeros((T, N))
    best_ry = np.zeros((T, N))
    crosses = []
    for k in range(3):
        t, rx, ry, dist, cross = edge_terms(verts[:, k, 0:1], verts[:, k, 1:2], verts[:, (k + 1) % 3, 0:1],
                                            verts[:, (k + 1) % 3, 1:2], px[None, :], py[None, :])
        crosses.append(cross)
        # near-ties (rounding level) keep the lower edge index, as the GPU kernel does
        closer = dist < best - (TIE_ABS + TIE_REL * np.where(np.isfinite(best), best, 0.0))
        best = np.where(closer, dist, best)
        best_edge = np.where(closer, k, best_edge)
        best_t = np.where(closer, t, best_t)
        best_rx = np.where(closer, rx, best_rx)
        best_ry = np.where(closer, ry, best_ry)
    inside = inside_closed(verts, crosses)
    sign = np.where(inside, 1.0, -1.0)
    d = sign * best
    if not want_grad:
        return d, None
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.where(best > 0, 1.0 / np.where(best > 0, best, 1.0), 0.0)
    nx, ny = best_rx * inv * sign, best_ry * inv * sign  # d(d)/dp direction, sign applied
    grad = np.zeros((T, N, 3, 2))
    rows = np.arange(T)[:, None]
    cols = np.arange(N)[None, :]
    a_idx = best_edge
    b_idx = (best_edge + 1) % 3
    # d|p - q|/dA = -(1 - t) n,  d|p - q|/dB = -t n  (q the nearest point of segment AB)
    grad[rows, cols, a_idx, 0] = -(1.0 - best_t) * nx
    grad[rows, cols, a_idx, 1] = -(1.0 - best_t) * ny
    grad[rows, cols, b_idx, 0] += -best_t * nx
    grad[rows, cols, b_idx, 1] += -best_t * ny
    return d, grad


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def _chunks(n_pixels: int, n_tris: int):
    per = max(256, _CHUNK_BYTES // (24 * max(1, n_tris)))
    for start in range(0, n_pixels, per):
        yield start, min(n_pixels, start + per)


def pixel_centres(width: int, height: int):
    jj, ii = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    return (ii.ravel() + 0.5).astype(np.float64), (jj.ravel() + 0.5).astype(np.float64)


def render(scene: Scene, width: int | None = None, height: int | None = None) -> np.ndarray:
    """Render ``scene`` at ``width`` x ``height`` (default: its frame). Returns (H, W, 3) float64."""
    W = int(width or scene.width)
    H = int(height or scene.height)
    px, py = pixel_centres(W, H)
    verts = vertices_px(scene.triangles, W, H)
    sigma_px = scene.sigma * min(W, H)
    rgb = scene.triangles[:, 6:9]
    a = scene.triangles[:, 9]
    out = np.empty((W * H, 3))
    for s, e in _chunks(W * H, scene.n_triangles):
        d, _ = signed_distance(verts, px[s:e], py[s:e], want_grad=False)
        alpha = a[:, None] * _sigmoid(d / sigma_px)
        C = np.broadcast_to(scene.background, (e - s, 3)).copy()
        for i in range(scene.n_triangles):
            C = C * (1.0 - alpha[i, :, None]) + rgb[i] * alpha[i, :, None]
        out[s:e] = C
    return out.reshape(H, W, 3)


def loss_value(image: np.ndarray, target: np.ndarray, loss: str = "mse", weights: np.ndarray | None = None) -> float:
    """The mean loss over pixels and channels; with ``weights`` (H, W) the weighted mean,
    ``sum(w l) / (3 sum(w))`` (docs/MODEL.md, section 5)."""
    diff = image - target
    if loss == "mse":
        per = diff * diff
    elif loss == "l1":
        per = np.abs(diff)
    else:
        raise ValueError(f"unknown loss {loss!r}; choose one of {', '.join(LOSSES)}")
    if weights is None:
        return float(np.mean(per))
    w = np.asarray(weights, dtype=np.float64)
    return float(np.sum(per * w[..., None]) / (3.0 * np.sum(w)))


def loss_and_grad(scene: Scene, target: np.ndarray, loss: str = "mse", weights: np.ndarray | None = None):
    """Loss of ``scene`` rendered at the target's size, and its exact gradient; ``weights``
    (H, W): each pixel's loss term is multiplied by its weight and the loss is the weighted mean
    (:func:`loss_value`), so every pixel's dL/dC is scaled by ``w / mean(w)``.

    Returns ``(loss, grad_triangles (T, 10), grad_background (3,))`` in float64.
    """
    if loss not in LOSSES:
        raise ValueError(f"unknown loss {loss!r}; choose one of {', '.join(LOSSES)}")
    target = np.asarray(target, dtype=np.float64)
    H, W = target.shape[:2]
    px, py = pixel_centres(W, H)
    tgt = target.reshape(-1, 3)
    verts = vertices_px(scene.triangles, W, H)
    sigma_px = scene.sigma * min(W, H)
    T = scene.n_triangles
    rgb = scene.triangles[:, 6:9]
    a = scene.triangles[:, 9]
    w_px = None if weights is None else np.asarray(weights, dtype=np.float64).reshape(-1, 1)
    # the divisor of the mean: every value counts once, or as its pixel's weight
    n_values = W * H * 3 if w_px is None else 3.0 * float(np.sum(w_px))
    total = 0.0
    g_tris = np.zeros((T, 10))
    g_bg = np.zeros(3)
    for s, e in _chunks(W * H, T):
        d, dd = signed_distance(verts, px[s:e], py[s:e], want_grad=True)
        cov = _sigmoid(d / sigma_px)
        alpha = a[:, None] * cov  # (T, n)
        below = np.empty((T, e - s, 3))  # C_{i-1}: the canvas beneath triangle i
        C = np.broadcast_to(scene.background, (e - s, 3)).copy()
        for i in range(T):
            below[i] = C
            C = C * (1.0 - alpha[i, :, None]) + rgb[i] * alpha[i, :, None]
        diff = C - tgt[s:e]
        if w_px is not None:
            total += _weighted_terms(diff, loss, w_px[s:e])
            G = (2.0 * diff if loss == "mse" else np.sign(diff)) * w_px[s:e] / n_values
        elif loss == "mse":
            total += float(np.sum(diff * diff))
            G = 2.0 * diff / n_values
        else:
            total += float(np.sum(np.abs(diff)))
            G = np.sign(diff) / n_values
        # T_i = prod_{k > i} (1 - alpha_k): transmittance above triangle i.
        one_minus = 1.0 - alpha
        above = np.ones((T, e - s))
        if T > 1:
            above[:-1] = np.cumprod(one_minus[::-1], axis=0)[::-1][1:]
        g_bg += np.sum((above[0] * one_minus[0])[:, None] * G, axis=0) if T else np.sum(G, axis=0)
        g_rgb = np.einsum("tn,nc->tc", above * alpha, G)
        g_alpha = above * np.einsum("nc,tnc->tn", G, rgb[:, None, :] - below)  # dL/dalpha per pixel
        g_tris[:, 6:9] += g_rgb
        g_tris[:, 9] += np.sum(g_alpha * cov, axis=1)
        g_d = g_alpha * a[:, None] * cov * (1.0 - cov) / sigma_px  # dL/dd per pixel
        g_v = np.einsum("tn,tnkc->tkc", g_d, dd)  # (T, 3, 2) in pixel units
        g_tris[:, 0:6:2] += g_v[:, :, 0] * W
        g_tris[:, 1:6:2] += g_v[:, :, 1] * H
    return total / n_values, g_tris, g_bg


def _weighted_terms(diff: np.ndarray, loss: str, w: np.ndarray) -> float:
    """The sum of the pixels' loss terms, each times its weight (``w`` (n, 1))."""
    return float(np.sum((diff * diff if loss == "mse" else np.abs(diff)) * w))


def anchor_penalty(triangles: np.ndarray, anchor: np.ndarray, weights: np.ndarray):
    """An anchor's penalty on a scene's triangles, ``sum(w (t - a)^2)`` over every number of every
    triangle (``triangles``, ``anchor``, ``weights``: (T, 10), the weights >= 0), and its exact
    gradient with respect to the triangles' numbers. A fit with an anchor adds this gradient to
    its loss's (the fit loops; a video's ``--steady`` term, render/videofit.py, picks the weights);
    it is not part of the loss a fit reports.

    Returns ``(penalty, grad (T, 10))`` in float64."""
    t, a, w = (np.asarray(x, dtype=np.float64) for x in (triangles, anchor, weights))
    d = t - a
    return float(np.sum(w * d * d)), 2.0 * w * d
