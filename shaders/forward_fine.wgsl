// Forward after coarse binning (bin.wgsl coarse_main; big problems whose tile workgroups run at
// once: render/gpu/workspace.py Shape.fine_in_forward): each workgroup first bins its 16x16 tile
// from its super-tile's list (fine_bin.wgsl: the list, count and mask the backward and the
// gradient reduction read), then walks it (forward_walk.wgsl).
// Dispatch: (tiles_x, tiles_y, batch).

// Bindings 0-1 and 4-9: forward_walk.wgsl.
@group(0) @binding(2) var<storage, read_write> tile_count: array<u32>;
@group(0) @binding(3) var<storage, read_write> tile_list: array<u32>;
@group(0) @binding(10) var<storage, read_write> tile_mask: array<u32>;
// Each super-tile's list, [b, super-tile, n_tris], and count (bin.wgsl coarse_main).
@group(0) @binding(11) var<storage, read> super_count: array<u32>;
@group(0) @binding(12) var<storage, read> super_list: array<u32>;

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) group: vec3u, @builtin(local_invocation_index) li: u32) {
    let wid = spread_cell(group, frame.tiles_x, frame.n_tiles, frame.tile_spread);  // (common.wgsl)
    bin_tile_fine(wid, li);
    walk_tile(wid, li, listed());
}
