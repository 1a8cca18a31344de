// The gradient reduction as its own dispatch (the engine's loss-and-gradient calls); the fit loop's
// adam.wgsl calls the same reduce_param (reduce_param.wgsl) instead. One more workgroup, the first
// of the dispatch, writes image b's loss into the loss ring (loss_record.wgsl), as adam.wgsl's
// does: beside the reductions rather than a dispatch of its own (a launch and a barrier more), and
// first, so that it starts with the first wave (docs/PERFORMANCE.md, "The loss's sum in the
// reduction's first workgroup").

@group(0) @binding(0) var<uniform> frame: Frame;
@group(0) @binding(1) var<storage, read> partial: array<f32>;
@group(0) @binding(2) var<storage, read> tile_mask: array<u32>;
@group(0) @binding(3) var<storage, read_write> grad: array<f32>;
@group(0) @binding(4) var<storage, read> tri_tiles: array<vec2u>;  // binning's tile ranges
@group(0) @binding(5) var<storage, read> loss_partial: array<f32>;
@group(0) @binding(6) var<storage, read> state: State;
@group(0) @binding(7) var<storage, read_write> ring: array<f32>;

// Dispatch: (1 + reduce_groups(n_tris, ppt) in render/gpu/workspace.py, batch); workgroup x + 1 takes
// reduce_param.wgsl's slots of x.
@compute @workgroup_size(256)
fn reduce_grad(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
    let b = wid.y;
    if (wid.x == 0u) {  // the loss (wid is uniform in a workgroup: barriers allowed)
        record_loss(b, li);
        return;
    }
    let per_image = (frame.n_tris + 1u) * 10u;
    let s = param_slot(wid.x - 1u, li);
    let total = reduce_param(b, s, li);
    if (s.lane == 0u && s.valid) { grad[b * per_image + s.j] = total; }
    // the background slot's other seven values: the backward parks zeros there
    if (s.background && li >= 3u && li < 10u) { grad[b * per_image + frame.n_tris * 10u + li] = 0.0; }
}
