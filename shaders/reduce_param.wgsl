// Fixed-order reduction of per-tile partial gradients. The triangles' workgroups cover 30
// parameters (three triangles) x 8 tile lanes: a triangle's parameter sums the tiles of its range (tri_tiles,
// written by binning: the tiles its bounding box can touch, row-major), lane r taking the range's
// tiles r, r + 8, r + 16, ... in order (skipping tiles whose list does not hold the triangle). The
// background's three values sum every tile of the frame, so they get a workgroup of their own,
// the reduction's last: 64 tile lanes each (with 8, their serial sums of 128 tiles at 512 px
// and 512 at 1024 px were most of the reduction). Then the lane totals are added in lane order.
// Same order every call, so gradients are bit-reproducible. Shared by reduce.wgsl (its own
// dispatch) and adam.wgsl (fused with the Adam step); the including kernel declares frame,
// partial, tile_mask and tri_tiles. Dispatch: (reduce_groups(n_tris) in render/gpu/workspace.py,
// batch).

// PARAMS_PER_GROUP (triangle parameters a workgroup, whole triangles: adam.wgsl reads a
// triangle's vertices in the workgroup that writes them) is prepended by render/gpu/shaders.py,
// which the dispatch's size comes from too (render/gpu/workspace.py reduce_groups). Threads past
// TILE_LANES x PARAMS_PER_GROUP have no slot.
const TILE_LANES: u32 = 256u / PARAMS_PER_GROUP;
const BG_LANES: u32 = 64u;          // the background's workgroup: 4 columns (3 used) x 64 lanes
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

// Gradient of image b's parameter s.j, returned to threads with lane 0; call from uniform
// control flow with the slot of this thread (local index li).
fn reduce_param(b: u32, s: ParamSlot, li: u32) -> f32 {
    let per_image = (frame.n_tris + 1u) * 10u;
    let tri = s.j / 10u;
    var total = 0.0;
    if (s.valid && !s.background) {
        let r = tri_tiles[b * frame.n_tris + tri];
        let x0 = r.x & 0xffffu;
        let y0 = r.x >> 16u;
        let nx = select(0u, (r.y & 0xffffu) + 1u - x0, (r.y & 0xffffu) >= x0);
        let ny = select(0u, (r.y >> 16u) + 1u - y0, (r.y >> 16u) >= y0);
        for (var k = s.lane; k < nx * ny; k += TILE_LANES) {
            let slot = b * frame.n_tiles + (y0 + k / nx) * frame.tiles_x + x0 + k % nx;
            if ((tile_mask[slot * frame.mask_words + tri / 32u] & (1u << (tri % 32u))) != 0u) {
                total += partial[slot * per_image + s.j];
            }
        }
    } else if (s.valid) {  // the background: every tile
        for (var tile = s.lane; tile < frame.n_tiles; tile += BG_LANES) {
            total += partial[(b * frame.n_tiles + tile) * per_image + s.j];
        }
    }
    lane_sum[li] = total;  // li = lane * (columns) + col
    workgroupBarrier();
    var sum = 0.0;
    if (s.lane == 0u) {
        let width = select(PARAMS_PER_GROUP, 4u, s.background);
        let lanes = select(TILE_LANES, BG_LANES, s.background);
        for (var r = 0u; r < lanes; r++) { sum += lane_sum[r * width + s.col]; }
    }
    return sum;
}
