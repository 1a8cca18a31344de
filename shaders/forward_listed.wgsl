// Forward over the lists binning's own passes made (bin.wgsl; where the forward does not bin:
// render/gpu/workspace.py Shape.bins_in_forward): each workgroup walks its 16x16 tile's list
// (forward_walk.wgsl). The lists are bound read-only here: a kernel that binds them writable (as
// forward.wgsl must) walked them slower (docs/PERFORMANCE.md).
// Dispatch: (tiles_x, tiles_y, batch).

// Bindings 0-1 and 4-9: forward_walk.wgsl.
@group(0) @binding(2) var<storage, read> tile_count: array<u32>;
@group(0) @binding(3) var<storage, read> tile_list: array<u32>;

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) group: vec3u, @builtin(local_invocation_index) li: u32) {
    let wid = spread_cell(group, frame.tiles_x, frame.n_tiles, frame.tile_spread);  // (common.wgsl)
    walk_tile(wid, li, tile_count[wid.z * frame.n_tiles + wid.y * frame.tiles_x + wid.x]);
}
