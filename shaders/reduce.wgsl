// The gradient reduction as its own dispatch (the engine's loss-and-gradient calls); the fit loop's
// adam.wgsl calls the same reduce_param (reduce_param.wgsl) instead.

@group(0) @binding(0) var<uniform> frame: Frame;
@group(0) @binding(1) var<storage, read> partial: array<f32>;
@group(0) @binding(2) var<storage, read> tile_mask: array<u32>;
@group(0) @binding(3) var<storage, read_write> grad: array<f32>;
@group(0) @binding(4) var<storage, read> tri_tiles: array<vec2u>;  // binning's tile ranges

// Dispatch: (reduce_groups(n_tris) in render/gpu/workspace.py, batch); reduce_param.wgsl's slots.
@compute @workgroup_size(256)
fn reduce_grad(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
    let b = wid.y;
    let per_image = (frame.n_tris + 1u) * 10u;
    let s = param_slot(wid.x, li);
    let total = reduce_param(b, s, li);
    if (s.lane == 0u && s.valid) { grad[b * per_image + s.j] = total; }
    // the background slot's other seven values: the backward parks zeros there
    if (s.background && li >= 3u && li < 10u) { grad[b * per_image + frame.n_tris * 10u + li] = 0.0; }
}
