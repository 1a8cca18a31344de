"""Where new triangles go and what they look like: the first scene of a fit, and the triangles
that growth stages, respawns and a larger triangle count add (render/fitter.py calls these).

A new triangle is centred on a pixel sampled in proportion to the squared error of the current
render (the target's mean colour for the first scene). With ``insert_shape="residual"`` (the
default) it is then shaped to the patch around that pixel that wants the same colour change: the
triangle gets the patch's centroid and second moments, and the patch's mean target colour. On the
bundled samples this starts a fit 1.7 / 2.5 dB higher than randomly oriented triangles and ends
0.0-0.2 dB higher (docs/QUALITY.md); ``"random"`` keeps the older rule for comparison.

Pruning (render/fitter.py over-grows a fit, then prunes it back) ranks triangles by the exact
growth of the squared error if each alone were removed: :func:`removal_costs` here in float64 (the
reference backend's), one backward pass on the GPU (``Engine.removal_costs``).
"""

from __future__ import annotations

import math

import numpy as np

from .fitloop import FitSettings, raw_from_scene
from .scene import Scene

INSERT_SHAPES = ("residual", "random")
# the three corners of an equilateral triangle on the unit circle, from angle 0
_CORNERS = np.array([0.0, 2 * np.pi / 3, 4 * np.pi / 3])
# (the next three are events.wgsl's too: render/gpu/shaders.py writes them into it)
#: a filled equilateral triangle of circumradius r has variance r^2 / 8 along every axis
VAR_PER_R2 = 1.0 / 8.0
#: pixel variance added to a patch's second moments (and their floor): a triangle at least ~1.4 px wide
MIN_VAR_PX = 0.25
#: a window wider than 2x this many pixels is read every few pixels: its moments barely change
MAX_SAMPLES_PER_SIDE = 64


def _residual(target: np.ndarray, image: np.ndarray | None) -> np.ndarray:
    """target - image (None: the target's mean colour), in the arrays' own precision."""
    return target - (image if image is not None else target.mean(axis=(0, 1), keepdims=True))


def error_map(target: np.ndarray, image: np.ndarray | None, residual: np.ndarray | None = None,
              weights: np.ndarray | None = None) -> np.ndarray:
    """Squared error per pixel of ``image`` (None: the target's mean colour), never all zero
    (``residual``: target - image when the caller has it); with a focus map ``weights`` (H, W),
    each pixel's error times its weight, so new triangles go where the weighted loss is."""
    r = _residual(target, image) if residual is None else residual
    err = np.einsum("ijc,ijc->ij", r, r).astype(np.float64)
    if weights is not None:
        err = err * weights
    return err + 1e-6 * max(err.mean(), 1e-12)


def new_triangles(target: np.ndarray, n: int, image: np.ndarray | None, rng: np.random.Generator,
                  settings: FitSettings, radius_scale: float = 1.0, n_after: int | None = None,
                  weights: np.ndarray | None = None) -> np.ndarray:
    """n triangles (n, 10) centred where the error of ``image`` is largest (sampled; weighted by
    the focus map ``weights``), sized so that ``n_after`` triangles (default: the target count)
    would cover the frame ~1.5x, larger ones first (painted below the finer ones)."""
    if settings.insert_shape not in INSERT_SHAPES:
        raise ValueError(f"unknown insert_shape {settings.insert_shape!r}; choose one of {', '.join(INSERT_SHAPES)}")
    H, W = target.shape[:2]
    S = min(W, H)
    residual = _residual(target, image)
    u, jx, jy, r, ang0, jitter = _draws(n, rng, settings, radius_scale, n_after)
    # sampled in proportion to the error: what rng.choice(p=...) does (the same draws from the
    # same random stream), without its validation of p, which a respawn of a few triangles paid
    cdf = np.cumsum(error_map(target, image, residual, weights).ravel())
    idx = np.searchsorted(cdf / cdf[-1], u, side="right")
    cy, cx = (idx // W + jy) / H, (idx % W + jx) / W
    # the random rule: corners on a circle of radius r, each angle jittered
    angles = ang0[:, None] + _CORNERS[None] + jitter
    vx = cx[:, None] + np.cos(angles) * r[:, None] * S / W
    vy = cy[:, None] + np.sin(angles) * r[:, None] * S / H
    verts = np.stack([vx, vy], axis=-1).reshape(n, 6)
    px = np.clip((cx * W).astype(int), 0, W - 1)
    py = np.clip((cy * H).astype(int), 0, H - 1)
    rgb = target[py, px].astype(np.float64)
    size = r.copy()
    if settings.insert_shape == "residual":
        for i, shaped in enumerate(shapes_to_residual(target, residual, cx * W, cy * H, r * S, ang0)):
            if shaped is not None:
                verts[i], rgb[i], size[i] = shaped[0], shaped[1], shaped[2] / S
    alpha = np.full((n, 1), settings.init_alpha if image is None else settings.insert_alpha)
    tris = np.concatenate([verts, rgb, alpha], axis=1)
    return tris[np.argsort(-size, kind="stable")]


def _draws(n: int, rng: np.random.Generator, settings: FitSettings, radius_scale: float, n_after: int | None):
    """A placement's random numbers, in the order both placements take them from the stream: the
    error sample's uniform, the centre's jitter in its pixel (y, x), the circumradius (frame
    units of the short side), the first corner's angle and the random rule's angle jitters."""
    u = rng.random(n)
    jy, jx = rng.uniform(0, 1, n), rng.uniform(0, 1, n)
    base = math.sqrt(1.5 / max(n_after or settings.triangles, 1)) * radius_scale
    r = base * rng.uniform(0.5, 1.5, n)
    ang0 = rng.uniform(0, 2 * np.pi, n)
    return u, jx, jy, r, ang0, rng.uniform(-0.4, 0.4, (n, 3))


# ---------------------------------------------------------------- placement on the device
# (FitSettings.placement = "device": render/gpu/events.py and shaders/events.wgsl have the render
# and the per-pixel errors; the host keeps the random stream and samples tiles by their sums)
PLACEMENTS = ("host", "device")
TILE = 16  # the error sums' tiles (shaders/events.wgsl)


def tile_pixels(H: int, W: int) -> np.ndarray:
    """Pixels in each 16 x 16 tile of an H x W frame (row-major tiles): edge tiles have fewer."""
    ty, tx = -(-H // TILE), -(-W // TILE)
    rows = np.minimum(H - np.arange(ty) * TILE, TILE)
    cols = np.minimum(W - np.arange(tx) * TILE, TILE)
    return (rows[:, None] * cols[None, :]).ravel()


def error_floor(tile_sums: np.ndarray, H: int, W: int) -> float:
    """What :func:`error_map` adds to every pixel so the map is never all zero, from the tiles' sums."""
    return 1e-6 * max(float(np.sum(tile_sums, dtype=np.float64)) / (H * W), 1e-12)


def sample_tiles(tile_sums: np.ndarray, H: int, W: int, u: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Tiles sampled in proportion to their error (with the per-pixel floor) by the uniforms
    ``u``: (tile indices, where in its tile's sum each sample falls as a fraction in [0, 1),
    the floor) -- the device then finds the pixel at that fraction of the tile's running sum,
    so the pixel is sampled in proportion to its error as on the host, in tile order."""
    floor = error_floor(tile_sums, H, W)
    weights = np.asarray(tile_sums, dtype=np.float64) + floor * tile_pixels(H, W)
    cdf = np.cumsum(weights)
    pos = np.asarray(u, dtype=np.float64) * cdf[-1]
    idx = np.minimum(np.searchsorted(cdf, pos, side="right"), len(cdf) - 1)
    frac = np.clip((pos - (cdf[idx] - weights[idx])) / weights[idx], 0.0, np.nextafter(1.0, 0.0))
    return idx, frac, floor


def device_records(b: int, n: int, tile_sums: np.ndarray, H: int, W: int, rng: np.random.Generator,
                   settings: FitSettings, radius_scale: float = 1.0, n_after: int | None = None) -> np.ndarray:
    """(n, 12) float32 records of shaders/events.wgsl for n new triangles of image ``b``, from
    its tiles' error sums and the same random numbers :func:`new_triangles` takes."""
    if settings.insert_shape not in INSERT_SHAPES:
        raise ValueError(f"unknown insert_shape {settings.insert_shape!r}; choose one of {', '.join(INSERT_SHAPES)}")
    u, jx, jy, r, ang0, jitter = _draws(n, rng, settings, radius_scale, n_after)
    tile, frac, floor = sample_tiles(tile_sums, H, W, u)
    rec = np.zeros((n, 12), dtype=np.float32)
    rec[:, 0] = np.full(n, b, np.uint32).view(np.float32)
    rec[:, 1] = tile.astype(np.uint32).view(np.float32)
    rec[:, 2], rec[:, 3], rec[:, 4] = frac, jx, jy
    rec[:, 5], rec[:, 6], rec[:, 7:10] = r * min(W, H), ang0, jitter
    rec[:, 10], rec[:, 11] = floor, float(settings.insert_shape == "residual")
    return rec


def device_triangles(placed: np.ndarray, alpha: float, S: int) -> np.ndarray:
    """(n, 10) triangles from the device's (n, 12) results, larger ones first (as
    :func:`new_triangles` orders them): vertices, rgb, then opacity ``alpha``."""
    placed = np.asarray(placed, dtype=np.float64)
    tris = np.concatenate([placed[:, :9], np.full((len(placed), 1), alpha)], axis=1)
    return tris[np.argsort(-placed[:, 9] / S, kind="stable")]


def pick_in_tile(err: np.ndarray, tile: int, frac: float, floor: float) -> tuple[int, int]:
    """The host's version of the device's pixel choice inside ``tile`` (shaders/events.wgsl
    place_new): the first pixel, row by row, whose running sum of ``err`` (H, W) + ``floor``
    passes ``frac`` of the tile's sum, as (y, x)."""
    H, W = err.shape
    tx = -(-W // TILE)
    y0, x0 = (tile // tx) * TILE, (tile % tx) * TILE
    block = err[y0:y0 + TILE, x0:x0 + TILE].astype(np.float64) + floor
    run = np.cumsum(block.ravel())
    k = min(int(np.searchsorted(run, frac * run[-1], side="right")), len(run) - 1)
    return y0 + k // block.shape[1], x0 + k % block.shape[1]


def _window(r_px: float) -> tuple[float, int, int]:
    """Gaussian window of a patch for circumradius r_px: (its sigma, half-width h, read step)."""
    sw = max(r_px * math.sqrt(VAR_PER_R2), 0.75)
    h = math.ceil(3 * sw)
    return sw, h, max(1, h // MAX_SAMPLES_PER_SIDE)


def shapes_to_residual(target: np.ndarray, residual: np.ndarray, cx: np.ndarray, cy: np.ndarray,
                       r_px: np.ndarray, angle: np.ndarray) -> list:
    """:func:`shape_to_residual` for n centres at once: centres whose windows have the same read
    step and about the same half-width (padded to a multiple of 4) are done a bucket at a time,
    one numpy pass per bucket, each over exactly its own clipped window -- a growth event places
    tens of triangles, and per-triangle numpy calls were most of its cost. The Gaussian window and
    the window's bounds are separable, so they are formed per row and per column, and the second
    moments come from the weights' row and column sums (and one product for the cross term)."""
    H, W = target.shape[:2]
    out: list = [None] * len(cx)
    windows = [_window(float(r)) for r in r_px]
    buckets: dict[tuple[int, int], list[int]] = {}
    for i, (_, h, step) in enumerate(windows):
        buckets.setdefault((-(-h // 4) * 4, step), []).append(i)
    res_flat, tgt_flat = residual.reshape(-1, 3), target.reshape(-1, 3)
    for (h, step), members in buckets.items():
        idx = np.array(members)
        sw, own_h = np.array([windows[i][:2] for i in members]).T
        own_h = own_h.astype(int)
        ccx, ccy = np.asarray(cx, float)[idx], np.asarray(cy, float)[idx]
        ix = np.clip(ccx.astype(int), 0, W - 1)
        iy = np.clip(ccy.astype(int), 0, H - 1)
        # each window is read from its clipped start every `step` px up to its clipped end
        reads = np.arange(0, 2 * h + 1, step)
        xs = np.maximum(ix - own_h, 0)[:, None] + reads                      # (m, w) columns, rows
        ys = np.maximum(iy - own_h, 0)[:, None] + reads
        x_ok = xs < np.minimum(ix + own_h + 1, W)[:, None]
        y_ok = ys < np.minimum(iy + own_h + 1, H)[:, None]
        flat = (np.minimum(ys, H - 1) * W)[:, :, None] + np.minimum(xs, W - 1)[:, None, :]  # (m, w, w)
        u = res_flat[iy * W + ix].astype(np.float64)                          # (m, 3)
        norm = np.linalg.norm(u, axis=1)
        unit = u / np.maximum(norm, 1e-30)[:, None]
        proj = np.maximum(np.einsum("mijc,mc->mij", res_flat[flat], unit), 0.0)
        dx, dy = xs + 0.5 - ccx[:, None], ys + 0.5 - ccy[:, None]             # (m, w) from the centre
        inv = (1.0 / (2 * sw ** 2))[:, None]
        gx = np.where(x_ok, np.exp(-dx * dx * inv), 0.0)                       # zero outside the window
        gy = np.where(y_ok, np.exp(-dy * dy * inv), 0.0)
        w = proj * proj * gy[:, :, None] * gx[:, None, :]
        wx, wy = w.sum(axis=1), w.sum(axis=2)                                 # per column, per row
        total = wx.sum(axis=1)
        ok = (norm >= 1e-6) & (total > 1e-12)  # else no residual to follow: no shape
        tot = np.where(ok, total, 1.0)
        ox, oy = (wx * dx).sum(axis=1) / tot, (wy * dy).sum(axis=1) / tot     # the centroid's offset
        ex, ey = dx - ox[:, None], dy - oy[:, None]
        cxx, cyy = (wx * ex * ex).sum(axis=1) / tot, (wy * ey * ey).sum(axis=1) / tot
        cxy = np.einsum("mij,mi,mj->m", w, ey, ex) / tot
        cov = np.stack([np.stack([cxx, cxy], -1), np.stack([cxy, cyy], -1)], -2) + MIN_VAR_PX * np.eye(2)
        rgb = np.einsum("mijc,mij->mc", tgt_flat[flat], w) / tot[:, None]
        verts, radius = _triangles_from_moments(ccx + ox, ccy + oy, cov, np.asarray(angle, float)[idx], W, H)
        for k, i in enumerate(members):
            if ok[k]:
                out[i] = (verts[k], rgb[k], float(radius[k]))
    return out


def _triangles_from_moments(mx, my, cov, angle, W: int, H: int):
    """(vertices (m, 6) in frame units, circumradii (m,) px): equilateral triangles, first corner
    at ``angle``, stretched along cov's (m, 2, 2) principal axes to its second moments, centred
    at (mx, my)."""
    lam, axes = np.linalg.eigh(cov)
    rho = np.sqrt(np.maximum(lam, MIN_VAR_PX) / VAR_PER_R2)  # circumradius along each axis
    a = angle[:, None] + _CORNERS[None]
    corners = np.stack([np.cos(a), np.sin(a)], axis=-1) * rho[:, None, :]  # (m, 3, 2)
    p = np.stack([mx, my], axis=-1)[:, None, :] + corners @ np.swapaxes(axes, 1, 2)
    return (p / np.array([W, H])).reshape(len(mx), 6), np.sqrt(rho[:, 0] * rho[:, 1])


def shape_to_residual(target: np.ndarray, residual: np.ndarray, cx: float, cy: float, r_px: float,
                      angle: float):
    """A triangle for the patch around pixel position (cx, cy) whose residual (target - render)
    points the way the centre's does, weighted by that projection squared and a Gaussian window
    sized so a uniform patch gives back circumradius ``r_px``.

    Returns (vertices (6,) in frame units, rgb (3,), circumradius in px) -- the triangle with the
    patch's centroid and second moments (an equilateral triangle, first corner at ``angle``,
    stretched along the patch's principal axes), coloured with the patch's mean target colour --
    or None where the centre has no residual to follow."""
    return shapes_to_residual(target, residual, np.array([cx], float), np.array([cy], float),
                              np.array([r_px], float), np.array([angle], float))[0]


def initial_raw(target: np.ndarray, n: int, rng: np.random.Generator, settings: FitSettings,
                sigma_start: float, weights: np.ndarray | None = None) -> np.ndarray:
    """Raw parameters of a first scene: ``n`` triangles (:func:`new_triangles`, placed by the
    focus map ``weights`` when given) over the mean colour."""
    H, W = target.shape[:2]
    bg = target.reshape(-1, 3).mean(axis=0).astype(np.float64)
    scene = Scene(W, H, sigma_start, bg, new_triangles(target, n, None, rng, settings, n_after=n, weights=weights))
    return raw_from_scene(scene)


def removal_costs(tris: np.ndarray, background: np.ndarray, sigma: float, target: np.ndarray,
                  weights: np.ndarray | None = None) -> np.ndarray:
    """How much the summed squared error of the scene at the target's size would grow if each
    triangle alone were removed. Removing triangle i takes ``T_i a_i (c_i - C_i)`` off every pixel
    (``T_i`` the transmittance above it, ``C_i`` the canvas beneath it, ``a_i`` its opacity times
    coverage), so the cost is ``sum(|delta|^2 - 2 residual . delta)`` -- exact up to coverage below
    e^-12 beyond each triangle's box, which is left out (two passes over the triangles' boxes).
    ``weights`` (H, W): each pixel's term times its focus weight (the growth of ``sum(w |e|^2)``)."""
    from . import reference

    H, W = target.shape[:2]
    T = len(tris)
    verts = reference.vertices_px(tris, W, H)
    sigma_px = sigma * min(W, H)
    reach = 12.0 * sigma_px + 1.0
    lo = np.maximum(np.floor(verts.min(axis=1) - reach).astype(int), 0)        # (T, 2) x, y
    hi = np.minimum(np.ceil(verts.max(axis=1) + reach).astype(int), [W, H])
    size = hi - lo
    windows, alphas = [None] * T, [None] * T
    # boxes padded to multiples of 8 px and computed a bucket at a time: one numpy pass per bucket,
    # not one per triangle (the per-triangle calls were most of the cost)
    pad = [-(-int(v) // 8) * 8 for v in size.ravel()]
    buckets: dict[tuple[int, int], list[int]] = {}
    for i in range(T):
        if size[i, 0] > 0 and size[i, 1] > 0:
            buckets.setdefault((pad[2 * i + 1], pad[2 * i]), []).append(i)
    for (bh, bw), idx in buckets.items():
        idx = np.array(idx)
        xs = lo[idx, 0, None, None] + np.arange(bw)[None, None, :] + 0.5   # (n, 1, bw)
        ys = lo[idx, 1, None, None] + np.arange(bh)[None, :, None] + 0.5   # (n, bh, 1)
        d = _signed_distance_boxes(verts[idx], xs, ys)                      # (n, bh, bw)
        a = tris[idx, 9, None, None] * reference._sigmoid(d / sigma_px)
        for j, i in enumerate(idx):
            (x0, y0), (w, h) = lo[i], size[i]
            windows[i] = (slice(y0, y0 + h), slice(x0, x0 + w))
            alphas[i] = a[j, :h, :w]
    # top-down: the transmittance above each triangle, inside its box
    trans = np.ones((H, W))
    above = [None] * T
    for i in range(T - 1, -1, -1):
        if windows[i] is not None:
            above[i] = trans[windows[i]].copy()
            trans[windows[i]] *= 1.0 - alphas[i]
    # bottom-up: the canvas beneath each triangle; the residual of the whole scene needs it first
    canvas = np.broadcast_to(np.asarray(background, dtype=np.float64), (H, W, 3)).copy()
    below = [None] * T
    for i in range(T):
        if windows[i] is not None:
            w, a = windows[i], alphas[i][..., None]
            below[i] = canvas[w].copy()
            canvas[w] = canvas[w] * (1.0 - a) + tris[i, 6:9] * a
    residual = canvas - target
    costs = np.zeros(T)
    for i in range(T):
        if windows[i] is not None:
            delta = (above[i] * alphas[i])[..., None] * (tris[i, 6:9] - below[i])
            if weights is not None:
                delta_w = delta * weights[windows[i]][..., None]
                costs[i] = np.sum(delta_w * delta) - 2.0 * np.sum(residual[windows[i]] * delta_w)
            else:
                costs[i] = np.sum(delta * delta) - 2.0 * np.sum(residual[windows[i]] * delta)
    return costs


def _signed_distance_boxes(verts: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Signed distance (positive inside) from pixel centres to each of n closed triangles, each
    over its own box: verts (n, 3, 2) in pixels, xs (n, 1, w), ys (n, h, 1) -> (n, h, w). The exact
    nearest edge, from the reference's edge terms; reference.signed_distance keeps the lower edge
    on near-ties (for its gradient), so its value can be up to its tie tolerance (~1e-4 px) larger."""
    from . import reference

    best, crosses = None, []
    for k in range(3):
        a, b = verts[:, k, :, None, None], verts[:, (k + 1) % 3, :, None, None]
        *_, dist, cross = reference.edge_terms(a[:, 0], a[:, 1], b[:, 0], b[:, 1], xs, ys)
        best = dist if best is None else np.minimum(best, dist)
        crosses.append(cross)
    return np.where(reference.inside_closed(verts, crosses), best, -best)
