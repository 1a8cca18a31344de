// Backward: one thread per pixel, one workgroup per tile, O(T) per pixel. Each pixel walks its
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

@compute @workgroup_size(256)
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
    let pix = tile_pixel(wid.xy, li);
    let in_frame = pix.x < frame.width && pix.y < frame.height;
    let p = vec2f(pix) + vec2f(0.5);
    let sbase = b * frame.scene_stride;
    let sig = sigma_px(b, frame);
    let reach = -frame.cull_k * sig;  // as the forward: negligible coverage is skipped
    let list_base = slot * frame.n_tris;
    let part_base = slot * (frame.n_tris + 1u) * 10u;
    let wh = vec2f(f32(frame.width), f32(frame.height));

    var cur = vec3f(0.0);
    var G = vec3f(0.0);
    var trans = 1.0;
    if (in_frame) {
        let o = ((b * frame.height + pix.y) * frame.width + pix.x) * 3u;
        cur = vec3f(image[o], image[o + 1u], image[o + 2u]);
        G = vec3f(dldc[o], dldc[o + 1u], dldc[o + 2u]);
        if (seg > 0u) {
            let c = ckpt[((slot * frame.n_seg) + seg) * WG + li];
            trans = c.x;
            cur = (cur - c.yzw) / max(trans, 1e-37);
        }
    }
    if (li == 0u) { atomicStore(&n_done, 0u); all_done = 0u; }
    var live = in_frame && trans >= BACKWARD_STOP;
    if (!live) { atomicAdd(&n_done, 1u); }
    var end = seg_hi;
    loop {
        if (end <= seg_lo) { break; }
        let start = select(seg_lo, end - STAGE, end - seg_lo > STAGE);
        let n = end - start;
        workgroupBarrier();
        if (li < n) {
            let id = tile_list[list_base + start + li];
            staged[li] = load_tri(sbase + id * 10u, frame);
            staged_id[li] = id;
        }
        workgroupBarrier();
        var j = 0u;  // slots stashed since the last flush
        for (var k = n; k > 0u; k--) {
            let t = staged[k - 1u];
            var g = array<f32, 10>();  // explicit: naga does not re-zero a loop-body var each iteration
            if (live && near_bbox(p, t, -reach)) {
                let dg = signed_distance_grad(p, t);
                if (dg.d >= reach) {
                    let cov = sigmoid(dg.d / sig);
                    let alpha = t.rgba.a * cov;
                    let om = 1.0 - alpha;
                    var below: vec3f;
                    if (om >= frame.recompute_below) {
                        below = (cur - alpha * t.rgba.rgb) / om;
                    } else {
                        below = composite_below(b, list_base, start + k - 1u, p, sig);
                    }
                    let g_alpha = trans * dot(G, t.rgba.rgb - below);
                    let g_rgb = trans * alpha * G;
                    let g_d = g_alpha * t.rgba.a * cov * (1.0 - cov) / sig;
                    let v0 = g_d * dg.g0 * wh;
                    let v1 = g_d * dg.g1 * wh;
                    let v2 = g_d * dg.g2 * wh;
                    g = array<f32, 10>(v0.x, v0.y, v1.x, v1.y, v2.x, v2.y,
                                       g_rgb.r, g_rgb.g, g_rgb.b, g_alpha * cov);
                    trans *= om;
                    cur = below;
                    if (trans < BACKWARD_STOP) {
                        live = false;
                        atomicAdd(&n_done, 1u);
                    }
                }
            }
            stash10(g, li, sg, j);
            if (li == 0u) { pending_id[j] = staged_id[k - 1u]; }
            j += 1u;
            if (j == KB || k == 1u) {  // uniform: flush the stashed slots
                workgroupBarrier();
                if (li < 10u * j) {
                    partial[part_base + pending_id[li / 10u] * 10u + li % 10u] = gather(li, sg);
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
    for (var q = seg_lo + li; q < end; q += WG) {
        let id = tile_list[list_base + q];
        for (var c = 0u; c < 10u; c++) { partial[part_base + id * 10u + c] = 0.0; }
    }
    // Background: dL/dbg = T_0 G, with T_0 the transmittance of the whole list (bottom segment).
    if (seg != bottom_seg) { return; }
    var gb: array<f32, 10>;
    let v = trans * G;
    gb[0] = v.r;
    gb[1] = v.g;
    gb[2] = v.b;
    stash10(gb, li, sg, 0u);
    workgroupBarrier();
    if (li < 10u) { partial[part_base + frame.n_tris * 10u + li] = gather(li, sg); }
}
