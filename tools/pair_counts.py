"""How many (pixel, triangle) pairs each kernel evaluates, for the bench's scene family or a
scene file: the naive kernel walks every triangle at every pixel; the tiled kernels walk their
tile's list (binning rule of shaders/bin.wgsl: bounding box grown by the cull reach, then the
signed distance at the tile centre within reach + half the tile diagonal); "within reach" counts
the pairs whose coverage is not culled. Pure numpy (the reference's distance), no GPU.

``--subgroups`` also counts (subgroup of 32 pixels, list entry) pairs where some pixel of the
subgroup is within reach -- the pairs a GPU subgroup cannot skip -- for the subgroup covering two
rows of its tile and for an 8 x 4 block (common.wgsl tile_pixel), as a share of the listed pairs;
and of the 8 x 4 blocks' pairs, those whose pixels are all deep enough inside for coverage to be
1.0 in f32 (the backward's vertex gradients exactly zero there).

``--tiles 16,8`` counts the lists' pairs for other tile sizes too (a model: the kernels' tiles are
TILE x TILE). Set beside ``--subgroups``: a GPU subgroup already skips the entries none of its
pixels reaches, so smaller tiles save only those visits there; CPU adapters walk every listed pair.

``--sublists 8,4`` counts the pairs if each block of that size within a tile walked only the
entries of its tile's list whose grown bounding box meets the block (the walks' own exact-zero
test, setup_near): what sub-lists inside today's tiles would keep (docs/PERFORMANCE.md, "Tiles of
8 x 8 and sub-lists").

``--vectors`` counts, for CPU adapters (llvmpipe runs eight threads in the lanes of one vector; eight
pixels a thread), the (vector, listed entry) pairs whose vector's pixels an entry touches -- by its
bounding box grown by the reach, by its three edge lines (the vector's pixel box wholly beyond one by
more than the reach), and exactly (a pixel within reach) -- for the GPUs' layout (common.wgsl
tile_pixel: a vector's pixels four of the tile's rows, every fourth) and for the CPU adapters' 8 x 8
blocks (common.wgsl walk_pixel): what a walk that skips the entries its vector does not touch leaves
(llvmpipe walks every listed pair for every lane: docs/PERFORMANCE.md, "What llvmpipe runs under a
branch", "A subgroup's skip of the entries its pixels cannot reach").
``--scale 0.5`` frames the scene at half its size first (the half-size stage).

``--lists`` prints only the tiles' list lengths against the segmented backward's segments
(render/gpu/workspace.py Shape.n_seg of seg_len entries; the last takes any more), without the
per-pixel pairs (cheap at 1024 px); ``--tolerance`` sets the cull budget (1e-5: renders and the
bench; a fit's iterations use 1e-3).

    python tools/pair_counts.py [--side 128] [--tris 64] [--batch 1] [--scene FILE] [--subgroups]
                                [--lists] [--tolerance 1e-5] [--tiles 16,8]
                                [--sublists 8,4] [--vectors] [--scale 0.5]
"""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trifit import (
    Scene,  # noqa: E402
    reference as R,  # noqa: E402
)
from trifit.gpu.workspace import TILE, Shape, cull_sigmas  # noqa: E402


def _distance(verts: np.ndarray, px: np.ndarray, py: np.ndarray) -> np.ndarray:
    """(T, pixels) signed distances of the pixel centres (px, py) to the triangles ``verts``."""
    d = R.signed_distance(verts, px, py, False)
    return d[0] if isinstance(d, tuple) else d


def _reach(scene: Scene, tolerance: float) -> tuple[np.ndarray, float]:
    """The scene's vertices in pixels and its cull reach (px) at the cull budget ``tolerance``."""
    verts = R.vertices_px(np.asarray(scene.triangles, dtype=np.float64), scene.width, scene.height)
    return verts, cull_sigmas(len(verts), tolerance) * scene.sigma * min(scene.width, scene.height)


def tile_lists(verts: np.ndarray, reach: float, W: int, H: int, tile: int = TILE):
    """For each tile, row-major: (i, j, lo, hi, the indices of the triangles it lists) -- the
    binning rule of shaders/bin.wgsl, lo and hi the tile's pixel-centre extent."""
    bmin, bmax = verts.min(axis=1) - reach, verts.max(axis=1) + reach
    for j in range((H + tile - 1) // tile):
        for i in range((W + tile - 1) // tile):
            lo = np.array([i * tile + 0.5, j * tile + 0.5])
            hi = np.array([min(i * tile + tile, W) - 0.5, min(j * tile + tile, H) - 0.5])
            box = np.all(bmax >= lo, axis=1) & np.all(bmin <= hi, axis=1)
            c = 0.5 * (lo + hi)
            d = _distance(verts, np.array([c[0]]), np.array([c[1]]))[:, 0]
            yield i, j, lo, hi, np.nonzero(box & (d >= -(reach + np.linalg.norm(0.5 * (hi - lo)))))[0]


def counts(scene: Scene, tolerance: float = 1e-5, reach_pairs: bool = True, tile_px: int = TILE) -> dict:
    W, H = scene.width, scene.height
    verts, reach = _reach(scene, tolerance)
    listed = 0
    lengths = []
    for _, _, lo, hi, tile in tile_lists(verts, reach, W, H, tile_px):
        lengths.append(len(tile))
        listed += len(tile) * int((hi[0] - lo[0] + 1) * (hi[1] - lo[1] + 1))
    px, py = R.pixel_centres(W, H)
    within = 0
    for rows in range(0, len(px) if reach_pairs else 0, 16 * W):  # a band of pixels at a time: (triangles x pixels) floats
        within += int(np.sum(_distance(verts, px[rows:rows + 16 * W], py[rows:rows + 16 * W]) >= -reach))
    return {"naive": W * H * len(verts), "tiled": listed, "within_reach": within, "reach_px": reach,
            "lengths": lengths}


SUBGROUP_LAYOUTS = {  # (x, y, width, height) of subgroup k's pixels in its 16 x 16 tile
    "two rows": lambda k: (0, 2 * k, 16, 2),
    "8x4 block": lambda k: (8 * (k % 2), 4 * (k // 2), 8, 4),
}


def sublist_pairs(scene: Scene, block: int, tolerance: float = 1e-5) -> int:
    """Pairs walked if each block x block part of a tile walked only its tile's entries whose
    bounding box, grown by the reach, meets the part's pixel centres."""
    verts, reach = _reach(scene, tolerance)
    bmin, bmax = verts.min(axis=1) - reach, verts.max(axis=1) + reach
    pairs = 0
    for _, _, lo, hi, listed in tile_lists(verts, reach, scene.width, scene.height):
        for oy in range(0, TILE, block):
            for ox in range(0, TILE, block):
                plo = lo + [ox, oy]
                if np.any(plo > hi):
                    continue
                phi = np.minimum(plo + block - 1, hi)
                meets = np.all(bmax[listed] >= plo, axis=1) & np.all(bmin[listed] <= phi, axis=1)
                pairs += int(meets.sum()) * int((phi[0] - plo[0] + 1) * (phi[1] - plo[1] + 1))
    return pairs


#: d / sigma from which an f32 sigmoid is 1.0 exactly (e^-x below half an ulp of 1): coverage's
#: derivative, and so an entry's vertex gradients, are exactly zero there
SATURATED = 24 * np.log(2)


def subgroup_pairs(scene: Scene, tolerance: float = 1e-5) -> dict:
    """(subgroup, listed entry) pairs with a pixel within reach, per layout, and the pairs listed;
    "saturated": those of the 8 x 4 blocks whose pixels in the frame are all so deep inside the
    triangle that its coverage is 1.0 in f32 (a walk could skip their vertex gradients' sums)."""
    W, H = scene.width, scene.height
    verts, reach = _reach(scene, tolerance)
    deep_px = SATURATED * scene.sigma * min(W, H)
    out = {"listed": 0, "saturated": 0, **{name: 0 for name in SUBGROUP_LAYOUTS}}
    for i, j, _, _, listed in tile_lists(verts, reach, W, H):
        xs, ys = np.meshgrid(np.arange(i * TILE, i * TILE + TILE) + 0.5, np.arange(j * TILE, j * TILE + TILE) + 0.5)
        d = _distance(verts[listed], xs.ravel(), ys.ravel()).reshape(len(listed), TILE, TILE)
        in_frame = (xs < W)[None] & (ys < H)[None]
        near = (d >= -reach) & in_frame  # pixels outside the frame reach nothing
        deep = (d >= deep_px) | ~in_frame
        out["listed"] += len(listed) * (TILE * TILE // 32)
        for name, rect in SUBGROUP_LAYOUTS.items():
            for k in range(TILE * TILE // 32):
                x, y, w, h = rect(k)
                hit = near[:, y:y + h, x:x + w].any(axis=(1, 2))
                out[name] += int(hit.sum())
                if name == "8x4 block":
                    out["saturated"] += int((hit & deep[:, y:y + h, x:x + w].all(axis=(1, 2))).sum())
    return out


VECTOR_LAYOUTS = {  # vector v (threads 8v..8v+7) of a 16 x 16 tile: its pixels' columns and rows
    # common.wgsl tile_pixel at pixel li + 32 k of thread li = 8 v + lane (x = 8 (k % 2) + lane,
    # y = 4 (k // 2) + v): the tile's 16 columns, every fourth row -- the GPUs' layout
    "tile_pixel (16 columns, every fourth row)": lambda v: (np.arange(TILE), np.arange(v, TILE, 4)),
    # a block of 8 x 8 for each eight threads (eight pixels a thread): common.wgsl walk_pixel, the
    # CPU adapters' layout, whose gradient kernels skip what a block does not touch (VECTOR_SKIP)
    "8 x 8 blocks": lambda v: (8 * (v % 2) + np.arange(8), 8 * (v // 2) + np.arange(8)),
}


def _beyond_an_edge(verts: np.ndarray, lo: np.ndarray, hi: np.ndarray, reach: float) -> np.ndarray:
    """(n,) whether the box lo-hi lies wholly outside one of each triangle's edge lines by more
    than ``reach`` (then none of its pixels is within reach)."""
    cx, cy = np.array([lo[0], hi[0], lo[0], hi[0]])[None], np.array([lo[1], lo[1], hi[1], hi[1]])[None]
    a0, a1, a2 = verts[:, 0], verts[:, 1], verts[:, 2]
    wind = np.sign((a1[:, 0] - a0[:, 0]) * (a2[:, 1] - a0[:, 1]) - (a1[:, 1] - a0[:, 1]) * (a2[:, 0] - a0[:, 0]))
    out = np.zeros(len(verts), bool)
    for k in range(3):
        a, b = verts[:, k, :, None], verts[:, (k + 1) % 3, :, None]
        cross = R.edge_terms(a[:, 0], a[:, 1], b[:, 0], b[:, 1], cx, cy)[4]  # (the reference's side of the edge)
        inside = cross * wind[:, None] / (np.hypot(b[:, 0] - a[:, 0], b[:, 1] - a[:, 1]) + 1e-12)
        out |= np.all(inside < -reach, axis=1)
    return out


def vector_pairs(scene: Scene, tolerance: float = 1e-5) -> dict:
    """(vector, listed entry) pairs, per layout: listed (the vectors with a pixel in the frame: the
    others stop at once) and touched by each test (VECTOR_LAYOUTS; "box", "edges", "exact")."""
    W, H = scene.width, scene.height
    verts, reach = _reach(scene, tolerance)
    bmin, bmax = verts.min(axis=1) - reach, verts.max(axis=1) + reach
    out = {(name, test): 0 for name in VECTOR_LAYOUTS for test in ("listed", "box", "edges", "exact")}
    for i, j, _, _, listed in tile_lists(verts, reach, W, H):
        if not len(listed):
            continue
        for v in range(TILE * TILE // 64):
            for name, pixels in VECTOR_LAYOUTS.items():
                cols, rows = pixels(v)
                xs, ys = np.meshgrid(i * TILE + cols + 0.5, j * TILE + rows + 0.5)
                keep = (xs < W) & (ys < H)
                xs, ys = xs[keep], ys[keep]
                if not len(xs):
                    continue
                out[(name, "listed")] += len(listed)
                lo, hi = np.array([xs.min(), ys.min()]), np.array([xs.max(), ys.max()])
                box = np.all(bmax[listed] >= lo, axis=1) & np.all(bmin[listed] <= hi, axis=1)
                edges = box & ~_beyond_an_edge(verts[listed], lo, hi, reach)
                exact = np.any(_distance(verts[listed], xs, ys) >= -reach, axis=1)
                out[(name, "box")] += int(box.sum())
                out[(name, "edges")] += int(edges.sum())
                out[(name, "exact")] += int(exact.sum())
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--side", type=int, default=128)
    p.add_argument("--tris", type=int, default=64)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--scene")
    p.add_argument("--subgroups", action="store_true", help="also (subgroup, entry) pairs for both layouts")
    p.add_argument("--lists", action="store_true", help="also the tiles' list lengths against the backward's segments")
    p.add_argument("--tolerance", type=float, default=1e-5, help="the cull budget (a fit's iterations: 1e-3)")
    p.add_argument("--tiles", default="", help="also the lists' pairs for these tile sizes (px), comma-separated")
    p.add_argument("--sublists", default="", help="also the pairs of bounding-box sub-lists for blocks of these sizes")
    p.add_argument("--vectors", action="store_true",
                   help="also the (llvmpipe vector, listed entry) pairs an entry touches, per layout and test")
    p.add_argument("--scale", type=float, default=1.0, help="frame the scene at this multiple of its size first")
    a = p.parse_args()
    if a.scene:
        scenes = [Scene.load(a.scene)]
    else:
        scenes = [Scene.random(a.tris, a.side, a.side, seed=b) for b in range(a.batch)]
    if a.scale != 1.0:
        scenes = [Scene(max(1, round(s.width * a.scale)), max(1, round(s.height * a.scale)), s.sigma, s.background,
                        s.triangles) for s in scenes]
    tot = {"naive": 0, "tiled": 0, "within_reach": 0}
    lengths = []
    for s in scenes:
        c = counts(s, a.tolerance, reach_pairs=not a.lists)
        lengths += c["lengths"]
        for k in tot:
            tot[k] += c[k]
    if a.lists:
        shape = Shape(len(scenes), scenes[0].width, scenes[0].height, scenes[0].n_triangles)
        held = shape.n_seg * shape.seg_len
        lengths = np.array(lengths)
        print(f"tile lists: median {np.median(lengths):.0f}, max {lengths.max()}; the backward's {shape.n_seg} "
              f"segment(s) of {shape.seg_len} entries hold {held}, the last takes any more: "
              f"{np.mean(lengths > held):.3f} of tiles list more")
        return
    n = tot["naive"]
    print(f"pairs: naive {n}, tiled lists {tot['tiled']} ({tot['tiled'] / n:.2f} of naive), within reach "
          f"{tot['within_reach']} ({tot['within_reach'] / n:.2f}); reach {c['reach_px']:.1f} px, tiles {TILE}x{TILE}")
    for size in [int(v) for v in a.tiles.split(",") if v]:
        listed = sum(counts(s, a.tolerance, reach_pairs=False, tile_px=size)["tiled"] for s in scenes)
        print(f"tiles {size}x{size}: lists {listed} pairs ({listed / n:.3f} of naive, {listed / tot['tiled']:.3f} "
              f"of {TILE}x{TILE}'s)")
    for size in [int(v) for v in a.sublists.split(",") if v]:
        walked = sum(sublist_pairs(s, size, a.tolerance) for s in scenes)
        print(f"sub-lists of {size}x{size} blocks: {walked} pairs ({walked / tot['tiled']:.3f} of the lists')")
    if a.subgroups:
        sub: dict = {}
        for s in scenes:
            for k, v in subgroup_pairs(s, a.tolerance).items():
                sub[k] = sub.get(k, 0) + v
        shares = ", ".join(f"{name} {sub[name] / sub['listed']:.3f}" for name in SUBGROUP_LAYOUTS)
        print(f"(subgroup of 32, listed entry) pairs with a pixel within reach, of {sub['listed']} listed: {shares}")
        print(f"  of the 8x4 blocks' {sub['8x4 block']}, every pixel's coverage 1.0 in f32 (vertex gradients exactly "
              f"zero): {sub['saturated']} ({sub['saturated'] / max(sub['8x4 block'], 1):.4f})")
    if a.vectors:
        vec: dict = {}
        for s in scenes:
            for k, v in vector_pairs(s, a.tolerance).items():
                vec[k] = vec.get(k, 0) + v
        for name in VECTOR_LAYOUTS:
            listed = vec[(name, "listed")]
            shares = ", ".join(f"{test} {vec[(name, test)] / listed:.3f}" for test in ("box", "edges", "exact"))
            print(f"(llvmpipe vector, listed entry) pairs an entry touches, {name}, of {listed} listed: {shares}")


if __name__ == "__main__":
    main()
