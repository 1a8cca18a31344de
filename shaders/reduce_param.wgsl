// Fixed-order reduction of per-tile partial gradients. A workgroup covers 32 parameters x 8 tile
// lanes: a triangle's parameter sums the tiles of its range (tri_tiles, written by binning: the
// tiles its bounding box can touch, row-major), lane r taking the range's tiles r, r + 8, r + 16,
// ... in order (skipping tiles whose list does not hold the triangle); the background's sums every
// tile of the frame the same way. Then the 8 lane totals are added in lane order. Same order every
// call, so gradients are bit-reproducible; 8 lanes give the GPU 8x the parallelism of one thread
// per parameter, and the range spares it the tiles a small triangle never reaches. Shared by
// reduce.wgsl (its own dispatch) and adam.wgsl (fused with the Adam step); the including kernel
// declares frame, partial, tile_mask and tri_tiles.

const PARAMS_PER_GROUP: u32 = 32u;
const TILE_LANES: u32 = 8u;
var<workgroup> lane_sum: array<f32, 256>;

// Gradient of image b's parameter j (slot j / 10, value j % 10; slot n_tris is the background),
// returned to threads with lane 0; call from uniform control flow.
fn reduce_param(b: u32, j: u32, lane: u32, col: u32, valid: bool) -> f32 {
    let per_image = (frame.n_tris + 1u) * 10u;
    let tri = j / 10u;
    var total = 0.0;
    if (valid && tri < frame.n_tris) {
        let r = tri_tiles[b * frame.n_tris + tri];
        let x0 = r.x & 0xffffu;
        let y0 = r.x >> 16u;
        let nx = select(0u, (r.y & 0xffffu) + 1u - x0, (r.y & 0xffffu) >= x0);
        let ny = select(0u, (r.y >> 16u) + 1u - y0, (r.y >> 16u) >= y0);
        for (var k = lane; k < nx * ny; k += TILE_LANES) {
            let slot = b * frame.n_tiles + (y0 + k / nx) * frame.tiles_x + x0 + k % nx;
            if ((tile_mask[slot * frame.mask_words + tri / 32u] & (1u << (tri % 32u))) != 0u) {
                total += partial[slot * per_image + j];
            }
        }
    } else if (valid) {  // the background: every tile
        for (var tile = lane; tile < frame.n_tiles; tile += TILE_LANES) {
            total += partial[(b * frame.n_tiles + tile) * per_image + j];
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
