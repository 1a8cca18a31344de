// Forward: one thread per pixel, one workgroup per 16x16 tile. Each pixel walks its tile's list
// front to back (top triangle first), accumulating colour under the running transmittance, and
// the whole tile stops early once every pixel's transmittance is below frame.stop_t.
// Triangle records are staged in workgroup memory 256 at a time.
// With frame.with_loss set, the same kernel also evaluates the loss against the target: it writes
// dL/dC per pixel (the backward's seed) and one partial loss sum per tile (fixed-order tree, so
// reproducible) -- one pass over the pixels instead of two.
// With the loss, it also records per pixel the transmittance and accumulated colour where each
// backward segment begins (every seg_len list entries from the top), so the segments' backward
// workgroups can start there in parallel.
// Dispatch: (tiles_x, tiles_y, batch).

@group(0) @binding(0) var<uniform> frame: Frame;
@group(0) @binding(2) var<storage, read> tile_count: array<u32>;
@group(0) @binding(3) var<storage, read> tile_list: array<u32>;
@group(0) @binding(4) var<storage, read_write> image: array<f32>;
@group(0) @binding(5) var<storage, read> target_img: array<f32>;
@group(0) @binding(6) var<storage, read_write> dldc: array<f32>;
@group(0) @binding(7) var<storage, read_write> loss_partial: array<f32>;
@group(0) @binding(8) var<storage, read_write> ckpt: array<vec4f>;  // [slot, segment, pixel]: (T, acc)

var<workgroup> loss_red: array<f32, 256>;

var<workgroup> staged: array<TriPx, 256>;
var<workgroup> n_done: atomic<u32>;
var<workgroup> all_done: u32;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
    let b = wid.z;
    let slot = b * frame.n_tiles + wid.y * frame.tiles_x + wid.x;
    let pix = tile_pixel(wid.xy, li);
    let in_frame = pix.x < frame.width && pix.y < frame.height;
    let p = vec2f(pix) + vec2f(0.5);
    let sbase = b * frame.scene_stride;
    let sig = sigma_px(b, frame);
    let reach = -frame.cull_k * sig;  // coverage below sigmoid(-cull_k) is skipped (< 1e-9)
    let count = tile_count[slot];
    let list_base = slot * frame.n_tris;
    if (li == 0u) { atomicStore(&n_done, 0u); all_done = 0u; }
    workgroupBarrier();  // zeroed before any pixel counts itself

    var acc = vec3f(0.0);
    var trans = 1.0;
    var done = !in_frame;
    let record = frame.with_loss != 0u && frame.n_seg > 1u;
    let ckpt_base = (slot * frame.n_seg) * WG + li;
    var next_seg = 1u;  // the next segment boundary to record
    if (done) { atomicAdd(&n_done, 1u); }
    var end = count;  // walk batches from the top of the list down
    loop {
        if (end == 0u) { break; }
        let start = select(0u, end - WG, end > WG);
        let n = end - start;
        workgroupBarrier();
        if (li < n) {
            staged[li] = load_tri(sbase + tile_list[list_base + start + li] * 10u, frame);
        }
        workgroupBarrier();
        if (!done) {
            for (var k = n; k > 0u; k--) {
                if (record) {
                    // entering segment next_seg: list position start + k - 1 == count - next_seg * seg_len - 1
                    let pos = start + k - 1u;
                    if (next_seg < frame.n_seg && count - 1u - pos == next_seg * frame.seg_len) {
                        ckpt[ckpt_base + next_seg * WG] = vec4f(trans, acc);
                        next_seg += 1u;
                    }
                }
                let t = staged[k - 1u];
                let alpha = culled_alpha(p, t, sig, -reach);
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
        end = start;
    }
    if (record) {  // segments below an early stop start fully hidden (or never exist)
        for (var q = next_seg; q < frame.n_seg; q++) { ckpt[ckpt_base + q * WG] = vec4f(trans, acc); }
    }
    var contrib = 0.0;
    if (in_frame) {
        let c = acc + trans * background(b, frame);
        let o = ((b * frame.height + pix.y) * frame.width + pix.x) * 3u;
        image[o] = c.r;
        image[o + 1u] = c.g;
        image[o + 2u] = c.b;
        if (frame.with_loss != 0u) {
            let diff = c - vec3f(target_img[o], target_img[o + 1u], target_img[o + 2u]);
            var g: vec3f;
            if (frame.loss_kind == 0u) {
                contrib = dot(diff, diff);
                g = 2.0 * diff * frame.inv_values;
            } else {
                contrib = abs(diff.r) + abs(diff.g) + abs(diff.b);
                g = sign(diff) * frame.inv_values;
            }
            dldc[o] = g.r;
            dldc[o + 1u] = g.g;
            dldc[o + 2u] = g.b;
        }
    }
    if (frame.with_loss != 0u) {  // uniform
        loss_red[li] = contrib;
        workgroupBarrier();
        for (var off = WG / 2u; off > 0u; off = off / 2u) {
            if (li < off) { loss_red[li] += loss_red[li + off]; }
            workgroupBarrier();
        }
        if (li == 0u) { loss_partial[slot] = loss_red[0]; }
    }
}
