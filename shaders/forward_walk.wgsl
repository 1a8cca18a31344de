// The forward's walk of one tile (forward.wgsl, forward_listed.wgsl): one thread per pixel, one
// workgroup per 16x16 tile. Each pixel walks the tile's list front to back (top triangle first),
// accumulating colour under the running transmittance, and the whole tile stops early once every
// pixel's transmittance is below frame.stop_t (counted as the early-stop piece's round_all_done says).
// A rare memory operation stays out of the loop over entries where it can: llvmpipe runs one under
// a branch as a loop over its lanes whether or not any lane takes it (docs/PERFORMANCE.md).
// Triangles are staged in workgroup memory STAGE at a time, set up (common.wgsl
// TriSetup) once per tile on GPUs and once per thread on CPU adapters (the staging piece).
// With frame.with_loss set, the same kernel also evaluates the loss against the target: it writes
// dL/dC per pixel (the backward's seed) and one partial loss sum per tile (fixed-order tree, so
// reproducible) -- one pass over the pixels instead of two. A focus map, where there is one,
// weighs each pixel's loss term and dL/dC (the focus piece's weigh_loss).
// With the loss, it also records per pixel the transmittance and accumulated colour where each
// backward segment begins (every seg_len list entries from the top), so the segments' backward
// workgroups can start there in parallel.
// Pixels per thread: PPT, as in the backward (THREADS = WG / PPT threads; thread li has pixels
// li, li + THREADS, ...): on CPU adapters one read of a staged triangle then serves PPT pixels.
// The including kernel declares the lists (bindings 2 and 3: tile_count, tile_list), read-only
// where it walks lists made before it, writable where it bins its tile itself.

@group(0) @binding(0) var<uniform> frame: Frame;
// (binding 1, the scene records: the scene piece, scene_storage.wgsl / scene_uniform.wgsl)
@group(0) @binding(4) var<storage, read_write> image: array<f32>;
@group(0) @binding(5) var<storage, read> target_img: array<f32>;
@group(0) @binding(6) var<storage, read_write> dldc: array<f32>;
@group(0) @binding(7) var<storage, read_write> loss_partial: array<f32>;
@group(0) @binding(8) var<storage, read_write> ckpt: array<vec4f>;  // [slot, segment, pixel]: (T, acc)
const WEIGHTS_BINDING: u32 = 9u;  // the focus map, in the weighted variant (focus_map.wgsl)

var<workgroup> loss_red: array<f32, THREADS>;

var<workgroup> staged: array<Staged, STAGE * STAGED_SLOTS>;  // (the staging piece's records)
var<workgroup> n_walk: atomic<u32>;  // the early stop's count (walk_stop_*.wgsl round_all_done)
var<workgroup> all_done: u32;

// One pixel's front-to-back walk.
struct Pixel {
    pix: vec2u,
    p: vec2f,
    acc: vec3f,       // colour accumulated so far
    trans: f32,       // transmittance above the next entry
    done: bool,
    next_seg: u32,    // the next backward-segment boundary to record
    ckpt_base: u32,
}

fn start_pixel(tile: vec2u, pi: u32, slot: u32) -> Pixel {
    var s: Pixel;
    s.pix = walk_pixel(tile, pi, THREADS, PPT);
    s.p = vec2f(s.pix) + vec2f(0.5);
    s.acc = vec3f(0.0);
    s.trans = 1.0;
    s.done = !(s.pix.x < frame.width && s.pix.y < frame.height);
    s.next_seg = 1u;
    s.ckpt_base = (slot * frame.n_seg) * WG + pi;
    if (s.done) { walk_ended(); }
    return s;
}

// Composites a list entry (triangle t) under pixel s; its checkpoint, if it begins a segment, the
// caller has recorded (record_pixel).
fn composite_entry(s: ptr<function, Pixel>, t: TriSetup, inv_sig: f32, reach: f32) {
    if ((*s).done) { return; }
    apply_alpha(s, culled_alpha((*s).p, t, inv_sig, reach), t.rgba.rgb);
}

// Entry `pos` with coverage `alpha` already evaluated, under a pixel not yet done.
fn apply_entry(s: ptr<function, Pixel>, alpha: f32, rgb: vec3f, pos: u32, count: u32, record: bool) {
    record_entry(s, pos, count, record);
    apply_alpha(s, alpha, rgb);
}

// The backward's checkpoint where entry `pos` begins a segment (before the entry is composited).
fn record_entry(s: ptr<function, Pixel>, pos: u32, count: u32, record: bool) {
    if (record) {
        // entering segment next_seg: list position pos == count - next_seg * seg_len - 1
        let ns = (*s).next_seg;
        if (ns < frame.n_seg && count - 1u - pos == ns * frame.seg_len) {
            ckpt[(*s).ckpt_base + ns * WG] = vec4f((*s).trans, (*s).acc);
            (*s).next_seg = ns + 1u;
        }
    }
}

// record_entry for a pixel still walking: the checkpoint where entry `pos` begins a segment.
fn record_pixel(s: ptr<function, Pixel>, pos: u32, count: u32) {
    if (!(*s).done) { record_entry(s, pos, count, true); }
}

// Where a run of entries that starts at entry start + k - 1 ends, as the k left after it: above
// the next entry that begins a backward segment (its checkpoint is recorded before it), or 0 where
// none does in this round or nothing is recorded.
fn run_end(start: u32, k: u32, count: u32, record: bool) -> u32 {
    if (!record) { return 0u; }
    let next = ((count - start - k) / frame.seg_len + 1u) * frame.seg_len;  // from the top, past this entry
    if (next >= frame.n_seg * frame.seg_len || next > count - 1u - start) { return 0u; }
    return count - next - start;
}

// Are all of this thread's pixels done (PPT of them; the others are ignored)?
fn thread_done(s0: Pixel, s1: Pixel, s2: Pixel, s3: Pixel, s4: Pixel, s5: Pixel, s6: Pixel, s7: Pixel) -> bool {
    var done = s0.done;
    if (PPT > 1u) { done = done && s1.done; }
    if (PPT > 2u) { done = done && s2.done && s3.done; }
    if (PPT > 4u) { done = done && s4.done && s5.done && s6.done && s7.done; }
    return done;
}

fn apply_alpha(s: ptr<function, Pixel>, alpha: f32, rgb: vec3f) {
    if (alpha == 0.0) { return; }  // culled (or fully transparent): nothing changes
    (*s).acc += (*s).trans * alpha * rgb;
    (*s).trans *= 1.0 - alpha;
    if ((*s).trans < frame.stop_t) {
        (*s).done = true;
        walk_ended();
    }
}

// composite_entry of entries `pos` (t1) then `pos - 1` (t2), each after its checkpoint (record_entry),
// with both coverages evaluated first:
// one pixel a thread leaves a GPU's scheduler few warps to hide the walk's latency with, and the
// two evaluations are independent chains it can interleave. The composite is the same arithmetic
// in the same order, so the bits are composite_entry's; a pixel done after t1 skips t2 as there.
fn composite_pair(s: ptr<function, Pixel>, t1: TriSetup, t2: TriSetup, pos: u32, count: u32, record: bool,
                  inv_sig: f32, reach: f32) {
    if ((*s).done) { return; }
    let a1 = culled_alpha((*s).p, t1, inv_sig, reach);
    let a2 = culled_alpha((*s).p, t2, inv_sig, reach);
    apply_entry(s, a1, t1.rgba.rgb, pos, count, record);
    if ((*s).done) { return; }
    apply_entry(s, a2, t2.rgba.rgb, pos - 1u, count, record);
}

// Writes pixel s (and with the loss, dL/dC and its checkpoints); returns its loss contribution.
// `segments`: how many backward segments the tile's list has (the backward runs no others, so
// their checkpoints would never be read). `k`: the pixel's place among the thread's; where the
// backward follows in this thread (HANDED_OFF) its colour and dL/dC stay there instead of dL/dC
// going to memory.
fn finish_pixel(s: Pixel, b: u32, record: bool, segments: u32, k: u32) -> f32 {
    if (record) {  // segments below an early stop start fully hidden
        for (var q = s.next_seg; q < segments; q++) { ckpt[s.ckpt_base + q * WG] = vec4f(s.trans, s.acc); }
    }
    if (!(s.pix.x < frame.width && s.pix.y < frame.height)) { return 0.0; }
    let c = s.acc + s.trans * background(b, frame);
    let o = ((b * frame.height + s.pix.y) * frame.width + s.pix.x) * 3u;
    image[o] = c.r;
    image[o + 1u] = c.g;
    image[o + 2u] = c.b;
    if (frame.with_loss == 0u) { return 0.0; }
    let diff = c - vec3f(target_img[o], target_img[o + 1u], target_img[o + 2u]);
    var g: vec3f;
    var contrib: f32;
    if (frame.loss_kind == 0u) {
        contrib = dot(diff, diff);
        g = 2.0 * diff * frame.inv_values;
    } else {
        contrib = abs(diff.r) + abs(diff.g) + abs(diff.b);
        g = sign(diff) * frame.inv_values;
    }
    weigh_loss(o, &contrib, &g);  // (focus_none.wgsl / focus_map.wgsl)
    if (HANDED_OFF) {
        handed_c[k] = c;
        handed_g[k] = g;
        return contrib;
    }
    dldc[o] = g.r;
    dldc[o + 1u] = g.g;
    dldc[o + 2u] = g.b;
    return contrib;
}

// Walks the tile's `count`-entry list (binned by this workgroup) for its pixels.
fn walk_tile(wid: vec3u, li: u32, count: u32) {
    let b = wid.z;
    let slot = b * frame.n_tiles + wid.y * frame.tiles_x + wid.x;
    let sbase = record_tri(b, 0u, frame);
    let sig = sigma_px(b, frame);
    let reach = frame.cull_k * sig;  // coverage below sigmoid(-cull_k) is skipped (< 1e-9)
    let inv_sig = 1.0 / sig;
    let list_base = slot * frame.n_tris;
    let record = frame.with_loss != 0u && frame.n_seg > 1u;
    if (li == 0u) { atomicStore(&n_walk, 0u); all_done = 0u; }
    workgroupBarrier();  // zeroed before anything counts itself
    stage_begin();

    var s0 = start_pixel(wid.xy, li, slot);
    let blk = walk_block(wid.xy, li, PPT);
    var s1: Pixel;
    var s2: Pixel;
    var s3: Pixel;
    var s4: Pixel;
    var s5: Pixel;
    var s6: Pixel;
    var s7: Pixel;
    if (PPT > 1u) { s1 = start_pixel(wid.xy, li + THREADS, slot); }
    if (PPT > 2u) {
        s2 = start_pixel(wid.xy, li + 2u * THREADS, slot);
        s3 = start_pixel(wid.xy, li + 3u * THREADS, slot);
    }
    if (PPT > 4u) {
        s4 = start_pixel(wid.xy, li + 4u * THREADS, slot);
        s5 = start_pixel(wid.xy, li + 5u * THREADS, slot);
        s6 = start_pixel(wid.xy, li + 6u * THREADS, slot);
        s7 = start_pixel(wid.xy, li + 7u * THREADS, slot);
    }
    var end = count;  // walk batches from the top of the list down
    loop {
        if (end == 0u) { break; }
        let start = select(0u, end - STAGE, end > STAGE);
        let n = end - start;
        workgroupBarrier();
        for (var q = li; q < n; q += THREADS) {
            stage_put(q, load_tri(sbase + tile_list[list_base + start + q] * TRI_FLOATS, frame), reach);
        }
        workgroupBarrier();
        var k = n;
        if (PPT == 1u) {  // two entries at a time: their coverages are independent (see composite_pair)
            while (k >= 2u) {
                composite_pair(&s0, stage_get(k - 1u, reach), stage_get(k - 2u, reach),
                               start + k - 1u, count, record, inv_sig, reach);
                k -= 2u;
                if (s0.done) { break; }
            }
            if (s0.done) { k = 0u; }
        }
        // One entry at a time, in runs that end above each entry where a backward segment begins,
        // whose checkpoint is recorded between the runs: outside the loop over entries, so that
        // llvmpipe does not run the checkpoint's store (as a loop over its lanes) for every entry.
        var hidden = false;
        loop {
            if (k == 0u || hidden) { break; }
            if (record) {
                let pos = start + k - 1u;
                record_pixel(&s0, pos, count);
                if (PPT > 1u) { record_pixel(&s1, pos, count); }
                if (PPT > 2u) { record_pixel(&s2, pos, count); record_pixel(&s3, pos, count); }
                if (PPT > 4u) {
                    record_pixel(&s4, pos, count);
                    record_pixel(&s5, pos, count);
                    record_pixel(&s6, pos, count);
                    record_pixel(&s7, pos, count);
                }
            }
            let stop = run_end(start, k, count, record);
            for (; k > stop; k--) {
                var t = stage_get(k - 1u, reach);
                if (VECTOR_SKIP && VECTOR_VOTES) {  // entries none of this vector's pixels reaches, in a loop of their own
                    loop {
                        if (vector_any(block_touches(t, blk[0], blk[1], reach))) { break; }
                        k -= 1u;
                        if (k <= stop) { break; }
                        t = stage_get(k - 1u, reach);
                    }
                    if (k <= stop) { break; }
                }
                composite_entry(&s0, t, inv_sig, reach);
                var all_hidden = s0.done;
                if (PPT > 1u) {
                    composite_entry(&s1, t, inv_sig, reach);
                    all_hidden = all_hidden && s1.done;
                }
                if (PPT > 2u) {
                    composite_entry(&s2, t, inv_sig, reach);
                    composite_entry(&s3, t, inv_sig, reach);
                    all_hidden = all_hidden && s2.done && s3.done;
                }
                if (PPT > 4u) {
                    composite_entry(&s4, t, inv_sig, reach);
                    composite_entry(&s5, t, inv_sig, reach);
                    composite_entry(&s6, t, inv_sig, reach);
                    composite_entry(&s7, t, inv_sig, reach);
                    all_hidden = all_hidden && s4.done && s5.done && s6.done && s7.done;
                }
                if (stage_break(all_hidden)) { hidden = true; break; }  // this thread's pixels are all done
            }
        }
        if (round_all_done(li, !thread_done(s0, s1, s2, s3, s4, s5, s6, s7))) { break; }
        end = start;
    }
    let segments = tile_segments(count, frame);
    var contrib = finish_pixel(s0, b, record, segments, 0u);
    if (PPT > 1u) { contrib += finish_pixel(s1, b, record, segments, 1u); }
    if (PPT > 2u) { contrib += finish_pixel(s2, b, record, segments, 2u) + finish_pixel(s3, b, record, segments, 3u); }
    if (PPT > 4u) {
        contrib += finish_pixel(s4, b, record, segments, 4u) + finish_pixel(s5, b, record, segments, 5u);
        contrib += finish_pixel(s6, b, record, segments, 6u) + finish_pixel(s7, b, record, segments, 7u);
    }
    if (frame.with_loss != 0u) {  // uniform
        // This tile's share of image b's scene record, checked for numbers that are not finite: a
        // NaN in the partial makes the loss NaN (binning silently drops a triangle with a NaN vertex,
        // so the walk alone would never show it, and the fitter's rollback keys on a non-finite
        // loss). Here, and not where the loss is summed: the fit's Adam dispatch sums it while its
        // other workgroups write the next record, and nothing writes the record during a forward,
        // so a bad number is always reported at the first iteration whose forward reads it.
        let share = (frame.scene_stride + frame.n_tiles - 1u) / frame.n_tiles;
        let tile = wid.y * frame.tiles_x + wid.x;
        let last = min((tile + 1u) * share, frame.scene_stride);
        for (var i = tile * share + li; i < last; i += THREADS) {
            if (!(abs(scene_at(b * frame.scene_stride + i)) <= 3.0e38)) { contrib = bitcast<f32>(0x7fc00000u); }  // false for NaN and inf
        }
        loss_red[li] = contrib;
        workgroupBarrier();
        for (var off = THREADS / 2u; off > 0u; off = off / 2u) {
            if (li < off) { loss_red[li] += loss_red[li + off]; }
            workgroupBarrier();
        }
        if (li == 0u) { loss_partial[slot] = loss_red[0]; }
    }
}
