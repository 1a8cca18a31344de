// Shared declarations for every trifit kernel: triangle records in pixel units and the exact
// signed distance with its vertex gradient (docs/MODEL.md). The structs Python writes
// (Frame, State, Schedule, Optim) and the scene record's index functions come before this file,
// generated from render/gpu/layouts.py (render/gpu/shaders.py composes the kernels).
//
// Units: everything is in *pixel units* of the render. A vertex (x, y) sits at (x W, y H) and
// pixel (i, j) has centre (i + 0.5, j + 0.5): the spec's aspect space scaled by S' = min(W, H),
// so d / sigma is unchanged with sigma_px = sigma S'.

const TILE: u32 = 16u;             // tiles are TILE x TILE pixels, one workgroup of 256 threads
const WG: u32 = 256u;

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

// Distance from a point to segment a -> a + e, given w = point - a: returns (distance, t, r.x, r.y)
// with r = w - t e (t in [0, 1] the nearest point's parameter).
fn seg_dist(w: vec2f, e: vec2f) -> vec4f {
    let ee = dot(e, e);
    var t = 0.0;
    if (ee > 0.0) {
        t = clamp(dot(w, e) / ee, 0.0, 1.0);
    }
    let r = w - t * e;
    return vec4f(length(r), t, r.x, r.y);
}

// Squared distance from a point to segment a -> a + e, given w = point - a (as seg_dist).
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

// Signed distance and its gradient with respect to the six vertex coordinates (pixel units).
struct DistGrad {
    d: f32,
    g0: vec2f,
    g1: vec2f,
    g2: vec2f,
}

fn signed_distance_grad(p: vec2f, t: TriPx) -> DistGrad {
    let g = edges(p, t);
    let s0 = seg_dist(g.w0, g.e0);
    let s1 = seg_dist(g.w1, g.e1);
    let s2 = seg_dist(g.w2, g.e2);
    // nearest edge; near-ties (within rounding) go to the lowest index, as in the reference, so
    // both engines hand a degenerate triangle's gradient to the same vertices
    var best = s0;
    var k = 0u;
    if (s1.x < best.x - tie_margin(best.x)) { best = s1; k = 1u; }
    if (s2.x < best.x - tie_margin(best.x)) { best = s2; k = 2u; }
    let sgn = select(-1.0, 1.0, inside_edges(t, g));
    var n = vec2f(0.0);
    if (best.x > 0.0) {
        n = best.zw / best.x * sgn;
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

// Cheap pre-test: can p be within `reach` (>= 0) of the triangle? (bounding box grown by reach)
fn near_bbox(p: vec2f, t: TriPx, reach: f32) -> bool {
    let lo = min(t.p0, min(t.p1, t.p2)) - vec2f(reach);
    let hi = max(t.p0, max(t.p1, t.p2)) + vec2f(reach);
    return all(p >= lo) && all(p <= hi);
}

// Opacity of triangle t at pixel p, a * sigmoid(d / sigma), or exactly 0 where its coverage is
// culled: more than `reach` (>= 0) outside, found by the bounding box before the exact distance.
fn culled_alpha(p: vec2f, t: TriPx, sig: f32, reach: f32) -> f32 {
    if (!near_bbox(p, t, reach)) { return 0.0; }
    let d = signed_distance(p, t);
    if (d < -reach) { return 0.0; }
    return t.rgba.a * sigmoid(d / sig);
}

// Pixel-centre extent [lo, hi] of tile `tile`, clipped to the frame.
fn tile_extent(tile: vec2u, frame: Frame) -> array<vec2f, 2> {
    let lo = vec2f(f32(tile.x * TILE) + 0.5, f32(tile.y * TILE) + 0.5);
    let hi = vec2f(f32(min(tile.x * TILE + TILE, frame.width) - 1u) + 0.5,
                   f32(min(tile.y * TILE + TILE, frame.height) - 1u) + 0.5);
    return array<vec2f, 2>(lo, hi);
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

// Pixel handled by thread `li` of the tile `tile` (tiles row-major, tiles_x across).
fn tile_pixel(tile: vec2u, li: u32) -> vec2u {
    return vec2u(tile.x * TILE + li % TILE, tile.y * TILE + li / TILE);
}
