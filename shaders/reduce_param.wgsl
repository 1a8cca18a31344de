// Fixed-order reduction of per-tile partial gradients. A triangle's parameter sums the tiles of its
// range (tri_tiles, written by binning: the tiles its bounding box can touch, row-major) in
// SUM_LANES = 8 lanes, lane r taking the range's tiles r, r + 8, r + 16, ... in order (skipping tiles
// whose list does not hold the triangle), then the lane totals in lane order. The background's
// three values sum every tile of the frame in BG_LANES = 64 lanes (with 8, their serial sums of 128
// tiles at 512 px and 512 at 1024 px were most of the reduction), in a workgroup of their own, the
// reduction's last. Same order every call, so gradients are bit-reproducible.
// GPUs run the lanes as threads: 30 parameters (three triangles) x 8 lanes a workgroup, and the
// background's 4 columns (3 used) x 64 lanes, the totals added through workgroup memory. CPU adapters
// (several pixels a thread) run them in turn in one thread a parameter (SERIAL_LANES): 250
// parameters a workgroup, no workgroup memory and no barrier, the same additions in the same order,
// so the same bits -- on llvmpipe the threads' workgroup-memory round trip and the many workgroups
// cost more than the sums (docs/PERFORMANCE.md, "The gradient reduction's lanes in turn on CPU
// adapters"). Shared by reduce.wgsl (its own dispatch) and adam.wgsl (fused with the Adam step);
// the including kernel declares frame, partial, tile_mask and tri_tiles. Dispatch:
// (reduce_groups(n_tris, ppt) in render/gpu/workspace.py, batch).

// PARAMS_PER_GROUP (triangle parameters a workgroup, whole triangles: adam.wgsl reads a
// triangle's vertices in the workgroup that writes them) and SERIAL_LANES are prepended by
// render/gpu/shaders.py, which the dispatch's size comes from too (render/gpu/workspace.py
// reduce_groups), with SUM_LANES (a triangle's parameter: the sum's lanes) and TILE_LANES (threads a
// parameter: SUM_LANES, or 1 where SERIAL_LANES). Threads past TILE_LANES x PARAMS_PER_GROUP have no slot.
const BG_LANES: u32 = 64u;          // the background's
var<workgroup> lane_sum: array<f32, 256>;

// The parameter thread li of workgroup wx reduces: image-local index j (slot j / 10, value
// j % 10; slot n_tris is the background), its tile lane and column, and whether it has one.
struct ParamSlot {
    j: u32,
    lane: u32,
    col: u32,
    valid: bool,
    background: bool,
}

// The reduction's workgroups an image takes: the triangles' parameters, then the background's
// (render/gpu/workspace.py reduce_groups, the same count).
fn reduce_group_count() -> u32 {
    return (frame.n_tris * 10u + PARAMS_PER_GROUP - 1u) / PARAMS_PER_GROUP + 1u;
}

fn param_slot(wx: u32, li: u32) -> ParamSlot {
    var s: ParamSlot;
    let tri_params = frame.n_tris * 10u;
    s.background = wx >= reduce_group_count() - 1u;  // (the last of the reduction's workgroups)
    if (SERIAL_LANES) {  // one thread a parameter: every lane in it
        s.col = li;
        s.lane = 0u;
        s.j = select(wx * PARAMS_PER_GROUP + li, tri_params + li, s.background);
        s.valid = select(li < PARAMS_PER_GROUP && s.j < tri_params, li < 3u, s.background);
        return s;
    }
    if (s.background) {
        s.col = li % 4u;
        s.lane = li / 4u;
        s.j = tri_params + s.col;
        s.valid = s.col < 3u;
    } else {
        s.col = li % PARAMS_PER_GROUP;
        s.lane = li / PARAMS_PER_GROUP;
        s.j = wx * PARAMS_PER_GROUP + s.col;
        s.valid = s.j < tri_params && s.lane < TILE_LANES;
    }
    return s;
}

// Lane `lane`'s total of image b's parameter s.j, a triangle's: the tiles lane, lane + SUM_LANES, ...
// of its range that list it, in order.
fn tri_lane_total(b: u32, s: ParamSlot, lane: u32) -> f32 {
    let per_image = (frame.n_tris + 1u) * 10u;
    let tri = s.j / 10u;
    let r = tri_tiles[b * frame.n_tris + tri];
    let x0 = r.x & 0xffffu;
    let y0 = r.x >> 16u;
    let nx = select(0u, (r.y & 0xffffu) + 1u - x0, (r.y & 0xffffu) >= x0);
    let ny = select(0u, (r.y >> 16u) + 1u - y0, (r.y >> 16u) >= y0);
    var total = 0.0;
    for (var k = lane; k < nx * ny; k += SUM_LANES) {
        let slot = b * frame.n_tiles + (y0 + k / nx) * frame.tiles_x + x0 + k % nx;
        if ((tile_mask[slot * frame.mask_words + tri / 32u] & (1u << (tri % 32u))) != 0u) {
            total += partial[slot * per_image + s.j];
        }
    }
    return total;
}

// Lane `lane`'s total of image b's background value s.j: the tiles lane, lane + BG_LANES, ....
fn bg_lane_total(b: u32, s: ParamSlot, lane: u32) -> f32 {
    let per_image = (frame.n_tris + 1u) * 10u;
    var total = 0.0;
    for (var tile = lane; tile < frame.n_tiles; tile += BG_LANES) {
        total += partial[(b * frame.n_tiles + tile) * per_image + s.j];
    }
    return total;
}

// Gradient of image b's parameter s.j, returned to threads with lane 0; call from uniform
// control flow with the slot of this thread (local index li).
fn reduce_param(b: u32, s: ParamSlot, li: u32) -> f32 {
    var sum = 0.0;
    if (SERIAL_LANES) {  // every lane in this thread, in lane order: the same additions
        if (s.valid && !s.background) {
            for (var lane = 0u; lane < SUM_LANES; lane++) { sum += tri_lane_total(b, s, lane); }
        } else if (s.valid) {
            for (var lane = 0u; lane < BG_LANES; lane++) { sum += bg_lane_total(b, s, lane); }
        }
        return sum;
    }
    var total = 0.0;
    if (s.valid && !s.background) {
        total = tri_lane_total(b, s, s.lane);
    } else if (s.valid) {
        total = bg_lane_total(b, s, s.lane);
    }
    lane_sum[li] = total;  // li = lane * (columns) + col
    workgroupBarrier();
    if (s.lane == 0u) {
        let width = select(PARAMS_PER_GROUP, 4u, s.background);
        let lanes = select(TILE_LANES, BG_LANES, s.background);
        for (var r = 0u; r < lanes; r++) { sum += lane_sum[r * width + s.col]; }
    }
    return sum;
}
