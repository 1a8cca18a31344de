// Fixed-order reductions of per-tile partials: gradients (one thread per image parameter, tiles
// summed in order, skipping tiles whose list does not hold the triangle) and losses (one
// workgroup per image, strided sums then a fixed tree).

@group(0) @binding(0) var<uniform> frame: Frame;
@group(0) @binding(1) var<storage, read> partial: array<f32>;
@group(0) @binding(2) var<storage, read> tile_mask: array<u32>;
@group(0) @binding(3) var<storage, read_write> grad: array<f32>;

// Dispatch: (ceil((n_tris + 1) * 10 / 256), batch).
@compute @workgroup_size(256)
fn reduce_grad(@builtin(global_invocation_id) gid: vec3u) {
    let b = gid.y;
    let per_image = (frame.n_tris + 1u) * 10u;
    let j = gid.x;
    if (j >= per_image) { return; }
    let tri = j / 10u;
    var total = 0.0;
    for (var tile = 0u; tile < frame.n_tiles; tile++) {
        let slot = b * frame.n_tiles + tile;
        var listed = true;
        if (tri < frame.n_tris) {
            listed = (tile_mask[slot * frame.mask_words + tri / 32u] & (1u << (tri % 32u))) != 0u;
        }
        if (listed) { total += partial[slot * per_image + j]; }
    }
    grad[b * per_image + j] = total;
}
