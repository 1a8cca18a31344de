// The gradient reduction as its own dispatch (the engine's loss-and-gradient calls); the fit loop's
// adam.wgsl calls the same reduce_param (reduce_param.wgsl) instead.

@group(0) @binding(0) var<uniform> frame: Frame;
@group(0) @binding(1) var<storage, read> partial: array<f32>;
@group(0) @binding(2) var<storage, read> tile_mask: array<u32>;
@group(0) @binding(3) var<storage, read_write> grad: array<f32>;
@group(0) @binding(4) var<storage, read> tri_tiles: array<vec2u>;  // binning's tile ranges

// Dispatch: (ceil((n_tris + 1) * 10 / 32), batch).
@compute @workgroup_size(256)
fn reduce_grad(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
    let b = wid.y;
    let col = li % PARAMS_PER_GROUP;
    let lane = li / PARAMS_PER_GROUP;
    let per_image = (frame.n_tris + 1u) * 10u;
    let j = wid.x * PARAMS_PER_GROUP + col;
    let total = reduce_param(b, j, lane, col, j < per_image);
    if (lane == 0u && j < per_image) { grad[b * per_image + j] = total; }
}
