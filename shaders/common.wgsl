// Shared declarations for every trifit kernel: triangle records in pixel units, set up for the
// walks, and the exact signed distance with its vertex gradient (docs/MODEL.md). The structs Python writes
// (Frame, State, Schedule, Optim) and the scene record's index functions come before this file,
// generated from render/gpu/layouts.py (render/gpu/shaders.py composes the kernels).
//
// Units: everything is in *pixel units* of the render. A vertex (x, y) sits at (x W, y H) and
// pixel (i, j) has centre (i + 0.5, j + 0.5): the spec's aspect space scaled by S' = min(W, H),
// so d / sigma is unchanged with sigma_px = sigma S'.

const TILE: u32 = 16u;             // tiles are TILE x TILE pixels, one workgroup of 256 threads
const WG: u32 = 256u;

// A thread's pixels' colour and dL/dC as the forward finished them, for a backward walked by the
// same thread in the same workgroup (HANDED_OFF, render/gpu/shaders.py: the fit's fused kernel on CPU
// adapters), which starts from them rather than reading them back -- on llvmpipe each of those reads
// is a loop over the vector's lanes. Indexed by the pixel's place among the thread's PPT.
var<private> handed_c: array<vec3f, 8>;
var<private> handed_g: array<vec3f, 8>;

// A triangle in pixel units, ready to shade.
struct TriPx {
    p0: vec2f,
    p1: vec2f,
    p2: vec2f,
    orient: f32,           // sign of twice the signed area; 0 for a zero-area triangle
    _pad: f32,
    rgba: vec4f,
}

fn sigmoid(x: f32) -> f32 {
    return 1.0 / (1.0 + exp(-x));
}

// Squared distance from a point to segment a -> a + e, given w = point - a.
fn seg_dist2(w: vec2f, e: vec2f) -> f32 {
    let ee = dot(e, e);
    let t = select(0.0, clamp(dot(w, e) / ee, 0.0, 1.0), ee > 0.0);
    let r = w - t * e;
    return dot(r, r);
}

// Two edge distances closer than this are a tie (rounding-level differences, pixel units).
fn tie_margin(d: f32) -> f32 {
    return 1e-4 + 1e-5 * d;
}

// e x w: which side of edge a -> a + e the point a + w lies on.
fn cross2(e: vec2f, w: vec2f) -> f32 {
    return e.x * w.y - e.y * w.x;
}

// The three edges of t seen from p: e_k = next vertex - vertex k, w_k = p - vertex k.
struct Edges {
    e0: vec2f,
    e1: vec2f,
    e2: vec2f,
    w0: vec2f,
    w1: vec2f,
    w2: vec2f,
}

fn edges(p: vec2f, t: TriPx) -> Edges {
    return Edges(t.p1 - t.p0, t.p2 - t.p1, t.p0 - t.p2, p - t.p0, p - t.p1, p - t.p2);
}

// Inside test from the three edges (strictly inside; a zero-area triangle has no inside).
fn inside_edges(t: TriPx, g: Edges) -> bool {
    return t.orient != 0.0
        && cross2(g.e0, g.w0) * t.orient > 0.0
        && cross2(g.e1, g.w1) * t.orient > 0.0
        && cross2(g.e2, g.w2) * t.orient > 0.0;
}

// Exact signed distance (positive inside). Inside, the nearest edge line and the nearest edge
// segment are at the same distance, so the nearest segment serves both sides. The edge vectors
// are formed once and the square root taken once, of the smallest squared distance (sqrt is
// monotonic, so this is the same number as the smallest of three distances).
fn signed_distance(p: vec2f, t: TriPx) -> f32 {
    let g = edges(p, t);
    let d = sqrt(min(seg_dist2(g.w0, g.e0), min(seg_dist2(g.w1, g.e1), seg_dist2(g.w2, g.e2))));
    return select(-d, d, inside_edges(t, g));
}

// A triangle set up for the per-pixel walks: what every pixel of a tile would otherwise derive
// again for each list entry -- the edge vectors and their inverse squared lengths (a multiply in
// place of a division per edge), the winding, and the bounding box grown by the walk's reach.
// The walks set each triangle up once per tile as they stage it (once per thread where a thread
// has several pixels: the staging pieces), so a pixel-entry pair costs only its own arithmetic.
// The forward and render-only calls compute a coverage through the same functions, so the same
// alpha; the backward's distance comes with its gradient (setup_distance_grad), whose tie rule
// may take an edge up to tie_margin farther than the nearest.
struct TriSetup {
    p0: vec2f,
    e0: vec2f,             // p1 - p0
    e1: vec2f,             // p2 - p1
    e2: vec2f,             // p0 - p2
    inv_ee: vec3f,         // 1 / |e_k|^2, 0 for a zero-length edge (its nearest point is its start)
    orient: f32,           // as TriPx
    lo: vec2f,             // bounding box, grown by the reach it was set up with
    hi: vec2f,
    rgba: vec4f,
}

fn inv_len2(e: vec2f) -> f32 {
    let ee = dot(e, e);
    return select(0.0, 1.0 / ee, ee > 0.0);
}

// `reach` >= 0: how far outside the triangle a pixel still counts as near (setup_near).
fn setup_tri(t: TriPx, reach: f32) -> TriSetup {
    var s: TriSetup;
    s.p0 = t.p0;
    s.e0 = t.p1 - t.p0;
    s.e1 = t.p2 - t.p1;
    s.e2 = t.p0 - t.p2;
    s.inv_ee = vec3f(inv_len2(s.e0), inv_len2(s.e1), inv_len2(s.e2));
    s.orient = t.orient;
    s.lo = min(t.p0, min(t.p1, t.p2)) - vec2f(reach);
    s.hi = max(t.p0, max(t.p1, t.p2)) + vec2f(reach);
    s.rgba = t.rgba;
    return s;
}

// Is p inside the set-up triangle's grown bounding box?
fn setup_near(p: vec2f, s: TriSetup) -> bool {
    return all(p >= s.lo) && all(p <= s.hi);
}

// p minus each vertex: w_k = p - vertex k (w1 and w2 stepped along the edges).
fn setup_w(p: vec2f, s: TriSetup) -> array<vec2f, 3> {
    let w0 = p - s.p0;
    let w1 = w0 - s.e0;
    return array<vec2f, 3>(w0, w1, w1 - s.e1);
}

// Strictly inside (a zero-area triangle has no inside), from the edges and w.
fn setup_inside(s: TriSetup, w: array<vec2f, 3>) -> bool {
    return s.orient != 0.0
        && cross2(s.e0, w[0]) * s.orient > 0.0
        && cross2(s.e1, w[1]) * s.orient > 0.0
        && cross2(s.e2, w[2]) * s.orient > 0.0;
}

// Nearest point of segment a -> a + e to a + w (inv_ee = 1 / |e|^2, 0 for a point): (squared
// distance, t, r.x, r.y), r = w - t e, t in [0, 1] the nearest point's parameter.
fn seg_near(w: vec2f, e: vec2f, inv_ee: f32) -> vec4f {
    let t = clamp(dot(w, e) * inv_ee, 0.0, 1.0);
    let r = w - t * e;
    return vec4f(dot(r, r), t, r.x, r.y);
}

// Exact signed distance (positive inside), as signed_distance: the square root taken once, of
// the smallest squared distance.
fn setup_distance(p: vec2f, s: TriSetup) -> f32 {
    let w = setup_w(p, s);
    let q = min(seg_near(w[0], s.e0, s.inv_ee.x).x,
                min(seg_near(w[1], s.e1, s.inv_ee.y).x, seg_near(w[2], s.e2, s.inv_ee.z).x));
    let d = sqrt(q);
    return select(-d, d, setup_inside(s, w));
}

// Signed distance and its gradient with respect to the six vertex coordinates (pixel units).
struct DistGrad {
    d: f32,
    g0: vec2f,
    g1: vec2f,
    g2: vec2f,
}

fn setup_distance_grad(p: vec2f, s: TriSetup) -> DistGrad {
    let w = setup_w(p, s);
    let n0 = seg_near(w[0], s.e0, s.inv_ee.x);  // (distances, not squares: the tie rule's margin is in pixels)
    let n1 = seg_near(w[1], s.e1, s.inv_ee.y);
    let n2 = seg_near(w[2], s.e2, s.inv_ee.z);
    let s0 = vec4f(sqrt(n0.x), n0.yzw);
    let s1 = vec4f(sqrt(n1.x), n1.yzw);
    let s2 = vec4f(sqrt(n2.x), n2.yzw);
    // nearest edge; near-ties (within rounding) go to the lowest index, as in the reference, so
    // both engines hand a degenerate triangle's gradient to the same vertices
    var best = s0;
    var k = 0u;
    if (s1.x < best.x - tie_margin(best.x)) { best = s1; k = 1u; }
    if (s2.x < best.x - tie_margin(best.x)) { best = s2; k = 2u; }
    let sgn = select(-1.0, 1.0, setup_inside(s, w));
    var n = vec2f(0.0);
    if (best.x > 0.0) {
        n = best.zw * (sgn / best.x);
    }
    // d|p - q| / dA = -(1 - t) n and d|p - q| / dB = -t n, q the nearest point of segment AB
    let ga = -(1.0 - best.y) * n;
    let gb = -best.y * n;
    var out: DistGrad;
    out.d = sgn * best.x;
    out.g0 = vec2f(0.0);
    out.g1 = vec2f(0.0);
    out.g2 = vec2f(0.0);
    if (k == 0u) { out.g0 = ga; out.g1 = gb; }
    if (k == 1u) { out.g1 = ga; out.g2 = gb; }
    if (k == 2u) { out.g2 = ga; out.g0 = gb; }
    return out;
}

// Coverage at signed distance d: sigmoid(d / sigma), with 1 / sigma taken once per walk.
fn coverage(d: f32, inv_sig: f32) -> f32 {
    return sigmoid(d * inv_sig);
}

// Cheap pre-test: can p be within `reach` (>= 0) of the triangle? (bounding box grown by reach)
fn near_bbox(p: vec2f, t: TriPx, reach: f32) -> bool {
    return bbox_meets(t, p, p, reach);
}

// Opacity of the set-up triangle at pixel p, a * sigmoid(d / sigma), or exactly 0 where its
// coverage is culled: more than `reach` (the reach it was set up with) outside, found by the
// grown bounding box before the exact distance.
fn culled_alpha(p: vec2f, s: TriSetup, inv_sig: f32, reach: f32) -> f32 {
    if (!setup_near(p, s)) { return 0.0; }
    return near_alpha(p, s, inv_sig, reach);
}

// culled_alpha for a pixel already known to be near (its bounding-box test passed).
fn near_alpha(p: vec2f, s: TriSetup, inv_sig: f32, reach: f32) -> f32 {
    let d = setup_distance(p, s);
    if (d < -reach) { return 0.0; }
    return s.rgba.a * coverage(d, inv_sig);
}

// The backward segments a tile's list of `count` entries has: seg_len entries each from the top,
// at most n_seg, the last taking the rest (backward.wgsl runs these; forward.wgsl records their
// starting points).
fn tile_segments(count: u32, frame: Frame) -> u32 {
    return min(max((count + frame.seg_len - 1u) / frame.seg_len, 1u), frame.n_seg);
}

// Pixel-centre extent [lo, hi] of tile `tile`, clipped to the frame.
fn tile_extent(tile: vec2u, frame: Frame) -> array<vec2f, 2> {
    let lo = vec2f(f32(tile.x * TILE) + 0.5, f32(tile.y * TILE) + 0.5);
    let hi = vec2f(f32(min(tile.x * TILE + TILE, frame.width) - 1u) + 0.5,
                   f32(min(tile.y * TILE + TILE, frame.height) - 1u) + 0.5);
    return array<vec2f, 2>(lo, hi);
}

// The cell of an nx-wide grid of n cells (tiles, super-tiles) that workgroup `wid` takes: itself,
// except where SPREAD_CELLS (render/gpu/shaders.py spreads_cells: CPU adapters). llvmpipe hands each
// of its threads one contiguous run of a dispatch's workgroups, not the next one free, so in row order
// one thread would walk the frame's top and another its bottom, and the busier part would set the
// pass's time. There workgroup w takes cell w x stride mod n, the frame's stride coprime with n and
// near n / golden ratio (shaders.spread_stride): a permutation whose every run of workgroups takes
// cells spread over the whole frame. Each cell's work and where it is written are the same either
// way: the same bits.
fn spread_cell(wid: vec3u, nx: u32, n: u32, stride: u32) -> vec3u {
    if (!SPREAD_CELLS || stride <= 1u) { return wid; }
    let cell = (wid.y * nx + wid.x) * stride % n;
    return vec3u(cell % nx, cell / nx, wid.z);
}

// Does the triangle's bounding box, grown by `reach`, meet the box [lo, hi]?
fn bbox_meets(t: TriPx, lo: vec2f, hi: vec2f, reach: f32) -> bool {
    let bmin = min(t.p0, min(t.p1, t.p2)) - vec2f(reach);
    let bmax = max(t.p0, max(t.p1, t.p2)) + vec2f(reach);
    return all(bmax >= lo) && all(bmin <= hi);
}

// Can any pixel centre of the tile [lo, hi] come within `reach` (>= 0) of the triangle?
// Bounding box first, then the signed distance at the tile centre: the signed distance is
// 1-Lipschitz, so no pixel comes within reach when the centre is farther than reach + half diagonal.
fn touches_tile(t: TriPx, lo: vec2f, hi: vec2f, reach: f32) -> bool {
    if (!bbox_meets(t, lo, hi, reach)) { return false; }
    let c = 0.5 * (lo + hi);
    return signed_distance(c, t) >= -(reach + length(0.5 * (hi - lo)));
}

// Pixel `pi` of a walk's tile: tile_pixel's where a thread walks one pixel (GPUs); where it walks
// `ppt` (CPU adapters: pixel pi of thread pi % threads), each eight threads in turn take a block of
// 8 x ppt pixels, a column each, so that a vector of eight lanes (llvmpipe's) covers a compact
// block and can skip the entries none of its pixels reaches (block_touches).
fn walk_pixel(tile: vec2u, pi: u32, threads: u32, ppt: u32) -> vec2u {
    if (ppt == 1u) { return tile_pixel(tile, pi); }
    let li = pi % threads;
    return block_origin(tile, li, ppt) + vec2u(li % 8u, pi / threads);
}

// The first pixel of thread li's block of 8 x ppt (walk_pixel, ppt > 1): the eight threads of
// vector li / 8 take the block, two blocks across the tile.
fn block_origin(tile: vec2u, li: u32, ppt: u32) -> vec2u {
    let v = li / 8u;
    return vec2u(tile.x * TILE + (v % 2u) * 8u, tile.y * TILE + (v / 2u) * ppt);
}

// The pixel centres' box (lo, hi) of thread li's block (walk_pixel, ppt > 1).
fn walk_block(tile: vec2u, li: u32, ppt: u32) -> array<vec2f, 2> {
    let lo = vec2f(block_origin(tile, li, ppt)) + vec2f(0.5);
    return array<vec2f, 2>(lo, lo + vec2f(7.0, f32(ppt - 1u)));
}

// Can any pixel centre in the box lo-hi be within `reach` of the set-up triangle (set up with
// that reach)? False only where none can: the box is wholly outside the grown bounding box, or
// wholly beyond one edge line by more than the reach (with a margin over the walks' rounding), so
// every pixel of it is culled and an entry it skips changes nothing, to the bit.
fn block_touches(s: TriSetup, lo: vec2f, hi: vec2f, reach: f32) -> bool {
    if (any(hi < s.lo) || any(lo > s.hi)) { return false; }
    let c = 0.5 * (lo + hi);
    let h = 0.5 * (hi - lo);
    let r = reach * 1.001 + 0.01;
    let r2 = r * r;
    let a1 = s.p0 + s.e0;
    let a2 = a1 + s.e1;
    let v0 = s.orient * cross2(s.e0, c - s.p0) + abs(s.e0.y) * h.x + abs(s.e0.x) * h.y;
    let v1 = s.orient * cross2(s.e1, c - a1) + abs(s.e1.y) * h.x + abs(s.e1.x) * h.y;
    let v2 = s.orient * cross2(s.e2, c - a2) + abs(s.e2.y) * h.x + abs(s.e2.x) * h.y;
    if (v0 < 0.0 && v0 * v0 * s.inv_ee.x > r2) { return false; }
    if (v1 < 0.0 && v1 * v1 * s.inv_ee.y > r2) { return false; }
    if (v2 < 0.0 && v2 * v2 * s.inv_ee.z > r2) { return false; }
    return true;
}

// Pixel handled by thread `li` of the tile `tile`: the tile in 8 x 4 blocks of 32 consecutive
// threads (two blocks across, row-major inside), so a subgroup of 32 covers a compact block rather
// than two full rows: a triangle's edge reaches fewer subgroups, and a subgroup none of whose
// pixels a list entry reaches skips it whole (docs/PERFORMANCE.md, "Subgroups in 8 x 4 blocks").
fn tile_pixel(tile: vec2u, li: u32) -> vec2u {
    let blk = li / 32u;
    let lane = li % 32u;
    return vec2u(tile.x * TILE + (blk % 2u) * 8u + lane % 8u, tile.y * TILE + (blk / 2u) * 4u + lane / 8u);
}
