// Backward: one workgroup per tile (PPT pixels per thread: 1 on GPUs, 4 on CPU adapters, where
// it makes one subgroup reduction and one barrier serve four times the pixels), O(T) per pixel. Each pixel walks its
// tile's list top-down like the forward, carrying the transmittance above the current triangle
// exactly and un-compositing the canvas beneath it by division,
//     C_{i-1} = (C_i - alpha_i rgb_i) / (1 - alpha_i),
// falling back to re-compositing from the background when 1 - alpha_i is too small for the
// division to be accurate. Per-triangle gradients are summed over the tile in a fixed order
// (stash10/gather, KB triangles per barrier pair) and written to the tile's own slot: no float
// atomics, so results are reproducible.
// Segments: a tile's list is cut into segments of seg_len entries counted from the top, and each
// segment is its own workgroup (more parallelism for small frames). A segment starts from the
// transmittance T and accumulated colour A the forward recorded at its top boundary:
// the canvas beneath is C = (C_T - A) / T there. The bottom segment writes the background's slot.
// Dispatch: (tiles_x, tiles_y, batch * n_seg). Partial layout: [(b * n_tiles + tile), slot, 10],
// where slot n_tris holds the background gradient.

@group(0) @binding(0) var<uniform> frame: Frame;
@group(0) @binding(2) var<storage, read> tile_count: array<u32>;
@group(0) @binding(3) var<storage, read> tile_list: array<u32>;
@group(0) @binding(4) var<storage, read> image: array<f32>;
@group(0) @binding(5) var<storage, read> dldc: array<f32>;
@group(0) @binding(6) var<storage, read_write> partial: array<f32>;
@group(0) @binding(7) var<storage, read> ckpt: array<vec4f>;

// The backward walks on far below the forward's stop: gradients of deeply hidden triangles and of
// the background stay exact, and the division cannot overflow before this.
const BACKWARD_STOP: f32 = 1e-30;

const STAGE: u32 = 128u;  // triangles staged in workgroup memory per round
var<workgroup> staged: array<TriPx, STAGE>;
var<workgroup> staged_id: array<u32, STAGE>;
var<workgroup> pending_id: array<u32, KB>;  // triangle of each stashed slot
var<workgroup> n_done: atomic<u32>;
var<workgroup> all_done: u32;

// PPT (pixels per thread) and WGT = 256 / PPT (threads per workgroup) are prepended by
// render/gpu/shaders.py.

// What one pixel carries down the list.
struct Pixel {
    p: vec2f,       // centre, pixel units
    cur: vec3f,     // canvas after the current triangle (un-composited as the walk goes down)
    G: vec3f,       // dL/dC_T
    trans: f32,     // transmittance above the current triangle
    live: bool,
}

// The canvas beneath list entry `m`: composite list entries 0..m-1 over the background.
fn composite_below(b: u32, list_base: u32, m: u32, p: vec2f, sig: f32) -> vec3f {
    var c = background(b, frame);
    for (var q = 0u; q < m; q++) {
        let t = load_tri(b * frame.scene_stride + tile_list[list_base + q] * 10u, frame);
        let alpha = t.rgba.a * sigmoid(signed_distance(p, t) / sig);
        c = c * (1.0 - alpha) + t.rgba.rgb * alpha;
    }
    return c;
}

// One triangle at one pixel: add the pixel's gradient contributions to g, step the pixel below it.
fn pixel_step(px: ptr<function, Pixel>, t: TriPx, g: ptr<function, array<f32, 10>>, b: u32,
              list_base: u32, pos: u32, sig: f32, reach: f32, wh: vec2f) -> bool {
    let dg = signed_distance_grad((*px).p, t);
    var stopped = false;
    if ((*px).live && dg.d >= reach) {
        let cov = sigmoid(dg.d / sig);
        let alpha = t.rgba.a * cov;
        let om = 1.0 - alpha;
        var below: vec3f;
        if (om >= frame.recompute_below) {
            below = ((*px).cur - alpha * t.rgba.rgb) / om;
        } else {
            below = composite_below(b, list_base, pos, (*px).p, sig);
        }
        let trans = (*px).trans;
        let g_alpha = trans * dot((*px).G, t.rgba.rgb - below);
        let g_rgb = trans * alpha * (*px).G;
        let g_d = g_alpha * t.rgba.a * cov * (1.0 - cov) / sig;
        let v0 = g_d * dg.g0 * wh;
        let v1 = g_d * dg.g1 * wh;
        let v2 = g_d * dg.g2 * wh;
        let add = array<f32, 10>(v0.x, v0.y, v1.x, v1.y, v2.x, v2.y, g_rgb.r, g_rgb.g, g_rgb.b, g_alpha * cov);
        var acc = *g;
        for (var c = 0u; c < 10u; c++) { acc[c] = acc[c] + add[c]; }
        *g = acc;
        let nt = trans * om;
        (*px).trans = nt;
        (*px).cur = below;
        if (nt < BACKWARD_STOP) {
            (*px).live = false;
            stopped = true;  // this pixel just stopped
        }
    }
    return stopped;
}

@compute @workgroup_size(WGT)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32, sg: SgIn) {
    let b = wid.z / frame.n_seg;
    let seg = wid.z % frame.n_seg;
    let slot = b * frame.n_tiles + wid.y * frame.tiles_x + wid.x;
    let count = tile_count[slot];
    // this workgroup's entries: list positions [seg_lo, seg_hi), the top segment first
    let bottom_seg = max((count + frame.seg_len - 1u) / frame.seg_len, 1u) - 1u;
    let seg_len = select(count, frame.seg_len, frame.n_seg > 1u);
    if (seg > bottom_seg && frame.n_seg > 1u) { return; }  // uniform: the tile's list is shorter
    let seg_hi = count - min(count, seg * seg_len);
    let seg_lo = seg_hi - min(seg_hi, seg_len);
    let sbase = b * frame.scene_stride;
    let sig = sigma_px(b, frame);
    let reach = -frame.cull_k * sig;  // as the forward: negligible coverage is skipped
    let list_base = slot * frame.n_tris;
    let part_base = slot * (frame.n_tris + 1u) * 10u;
    let wh = vec2f(f32(frame.width), f32(frame.height));

    if (li == 0u) { atomicStore(&n_done, 0u); all_done = 0u; }
    workgroupBarrier();
    var pxs: array<Pixel, PPT>;
    for (var q = 0u; q < PPT; q++) {
        let k = li + q * WGT;  // pixel index in the tile: thread li owns rows li / 16 + 16 / PPT * q
        let pix = tile_pixel(wid.xy, k);
        var px: Pixel;
        px.p = vec2f(pix) + vec2f(0.5);
        px.trans = 1.0;
        px.cur = vec3f(0.0);
        px.G = vec3f(0.0);
        px.live = false;
        if (pix.x < frame.width && pix.y < frame.height) {
            let o = ((b * frame.height + pix.y) * frame.width + pix.x) * 3u;
            px.cur = vec3f(image[o], image[o + 1u], image[o + 2u]);
            px.G = vec3f(dldc[o], dldc[o + 1u], dldc[o + 2u]);
            if (seg > 0u) {
                let c = ckpt[((slot * frame.n_seg) + seg) * WG + k];
                px.trans = c.x;
                px.cur = (px.cur - c.yzw) / max(px.trans, 1e-37);
            }
            px.live = px.trans >= BACKWARD_STOP;
        }
        if (!px.live) { atomicAdd(&n_done, 1u); }
        pxs[q] = px;
    }
    var end = seg_hi;
    loop {
        if (end <= seg_lo) { break; }
        let start = select(seg_lo, end - STAGE, end - seg_lo > STAGE);
        let n = end - start;
        workgroupBarrier();
        for (var x = li; x < n; x += WGT) {
            let id = tile_list[list_base + start + x];
            staged[x] = load_tri(sbase + id * 10u, frame);
            staged_id[x] = id;
        }
        workgroupBarrier();
        var j = 0u;  // slots stashed since the last flush
        for (var k = n; k > 0u; k--) {
            let t = staged[k - 1u];
            var g = array<f32, 10>();  // explicit: naga does not re-zero a loop-body var each iteration
            for (var q = 0u; q < PPT; q++) {
                var pq = pxs[q];  // (naga 29's SPIR-V writer panics on &pxs[q] passed to a function)
                let stopped = pixel_step(&pq, t, &g, b, list_base, start + k - 1u, sig, reach, wh);
                pxs[q] = pq;
                if (stopped) {
                    atomicAdd(&n_done, 1u);
                }
            }
            stash10(g, li, sg, j);
            if (li == 0u) { pending_id[j] = staged_id[k - 1u]; }
            j += 1u;
            if (j == KB || k == 1u) {  // uniform: flush the stashed slots
                workgroupBarrier();
                for (var x = li; x < 10u * j; x += WGT) {
                    partial[part_base + pending_id[x / 10u] * 10u + x % 10u] = gather(x, sg);
                }
                workgroupBarrier();
                j = 0u;
            }
        }
        end = start;
        workgroupBarrier();
        if (li == 0u) { all_done = select(0u, 1u, atomicLoad(&n_done) == WG); }
        if (workgroupUniformLoad(&all_done) == 1u) { break; }
    }
    // Entries below an early stop are hidden: their gradients are zero (the reduce reads every
    // listed entry, so write them).
    for (var x = seg_lo + li; x < end; x += WGT) {
        let id = tile_list[list_base + x];
        for (var c = 0u; c < 10u; c++) { partial[part_base + id * 10u + c] = 0.0; }
    }
    // Background: dL/dbg = T_0 G, with T_0 the transmittance of the whole list (bottom segment).
    if (seg != bottom_seg) { return; }
    var gb: array<f32, 10>;
    for (var q = 0u; q < PPT; q++) {
        let v = pxs[q].trans * pxs[q].G;
        gb[0] += v.r;
        gb[1] += v.g;
        gb[2] += v.b;
    }
    stash10(gb, li, sg, 0u);
    workgroupBarrier();
    if (li < 10u) { partial[part_base + frame.n_tris * 10u + li] = gather(li, sg); }
}
