// Render-only forward with binning fused in: each workgroup bins its own tile in workgroup memory
// instead of reading a list from the bin pass -- one dispatch per render, no list round trip. It
// walks the triangles in rounds of 256 from the top: test the round against the tile
// (touches_tile), compact the hits in order (scan.wgsl) straight into the staging area, then
// composite them front to back with the forward's early stop. Used by render calls on GPUs (CPU
// adapters render through the forward's binning path, which walks several pixels a thread:
// render/gpu/workspace.py Shape.renders_in_forward); the loss path's forward keeps its lists for
// the backward (forward.wgsl and forward_fine.wgsl write them as they bin, forward_listed.wgsl
// reads bin.wgsl's).
// Dispatch: (tiles_x, tiles_y, batch).

@group(0) @binding(0) var<uniform> frame: Frame;
// (binding 1, the scene records: the scene piece, scene_storage.wgsl / scene_uniform.wgsl)
@group(0) @binding(2) var<storage, read_write> image: array<f32>;

var<workgroup> staged: array<TriPx, 256>;
var<workgroup> n_done: atomic<u32>;
var<workgroup> all_done: u32;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
    let b = wid.z;
    let pix = tile_pixel(wid.xy, li);
    let in_frame = pix.x < frame.width && pix.y < frame.height;
    let p = vec2f(pix) + vec2f(0.5);
    let sbase = record_tri(b, 0u, frame);
    let sig = sigma_px(b, frame);
    let reach = frame.cull_k * sig;
    let inv_sig = 1.0 / sig;
    let ext = tile_extent(wid.xy, frame);
    if (li == 0u) { atomicStore(&n_done, 0u); all_done = 0u; }
    clear_rounds(li);
    workgroupBarrier();  // zeroed before any pixel counts itself (and before round 0 sets a mask)

    var acc = vec3f(0.0);
    var trans = 1.0;
    var done = !in_frame;
    if (done) { atomicAdd(&n_done, 1u); }
    let rounds = (frame.n_tris + WG - 1u) / WG;
    for (var r = 0u; r < rounds; r++) {
        let i = (rounds - 1u - r) * WG + li;  // (from the top)
        var hit = 0u;
        var tri: TriPx;
        if (i < frame.n_tris) {
            tri = load_tri(sbase + i * TRI_FLOATS, frame);
            if (touches_tile(tri, ext[0], ext[1], reach)) { hit = 1u; }
        }
        let prefix = round_prefix(li, r, li, hit);  // (its barrier: the previous round's walk is done with `staged`)
        if (hit == 1u) { staged[prefix.x] = tri; }
        workgroupBarrier();  // staged before any pixel walks it
        let n = prefix.y;
        if (!done) {
            for (var k = n; k > 0u; k--) {
                let t = staged[k - 1u];
                // set up per pixel, after the cheap test (staging set-up triangles would take
                // 20 KiB here): the same arithmetic as the forward's, so the same alpha
                if (!near_bbox(p, t, reach)) { continue; }
                let alpha = near_alpha(p, setup_tri(t, reach), inv_sig, reach);
                if (alpha == 0.0) { continue; }  // culled (or fully transparent): nothing changes
                acc += trans * alpha * t.rgba.rgb;
                trans *= 1.0 - alpha;
                if (trans < frame.stop_t) {
                    done = true;
                    atomicAdd(&n_done, 1u);
                    break;
                }
            }
        }
        workgroupBarrier();
        if (li == 0u) { all_done = select(0u, 1u, atomicLoad(&n_done) == WG); }
        if (workgroupUniformLoad(&all_done) == 1u) { break; }
    }
    if (in_frame) {
        let c = acc + trans * background(b, frame);
        let o = ((b * frame.height + pix.y) * frame.width + pix.x) * 3u;
        image[o] = c.r;
        image[o + 1u] = c.g;
        image[o + 2u] = c.b;
    }
}
