// Fixed-order reduction of per-tile partial gradients. A workgroup covers 32 parameters x 8 tile
// lanes: lane r sums tiles r, r + 8, r + 16, ... in order (skipping tiles whose list does not
// hold the triangle), then the 8 lane totals are added in lane order. Same order every call, so
// gradients are bit-reproducible; 8 lanes give the GPU 8x the parallelism of one thread per
// parameter walking every tile. Shared by reduce.wgsl (its own dispatch) and adam.wgsl (fused
// with the Adam step); the including kernel declares frame, partial and tile_mask.

const PARAMS_PER_GROUP: u32 = 32u;
const TILE_LANES: u32 = 8u;
var<workgroup> lane_sum: array<f32, 256>;

// Gradient of image b's parameter j (slot j / 10, value j % 10; slot n_tris is the background),
// returned to threads with lane 0; call from uniform control flow.
fn reduce_param(b: u32, j: u32, lane: u32, col: u32, valid: bool) -> f32 {
    let per_image = (frame.n_tris + 1u) * 10u;
    let tri = j / 10u;
    var total = 0.0;
    if (valid) {
        for (var tile = lane; tile < frame.n_tiles; tile += TILE_LANES) {
            let slot = b * frame.n_tiles + tile;
            var listed = true;
            if (tri < frame.n_tris) {
                listed = (tile_mask[slot * frame.mask_words + tri / 32u] & (1u << (tri % 32u))) != 0u;
            }
            if (listed) { total += partial[slot * per_image + j]; }
        }
    }
    lane_sum[lane * PARAMS_PER_GROUP + col] = total;
    workgroupBarrier();
    var sum = 0.0;
    if (lane == 0u) {
        for (var r = 0u; r < TILE_LANES; r++) { sum += lane_sum[r * PARAMS_PER_GROUP + col]; }
    }
    return sum;
}
