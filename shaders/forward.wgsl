// Forward with binning: each workgroup bins its 16x16 tile against every triangle (tile_bin.wgsl:
// the list the backward and the gradient reduction read too), then walks it (forward_walk.wgsl).
// main, and fit_main, which also starts the fit loop's iteration (counter, learning-rate scale).
// One dispatch, where a bin pass of its own added a launch and a barrier an iteration, and one
// more set of commands for the host to encode. Where that was measured slower (big problems, and
// dispatches that fill the GPU: render/gpu/workspace.py Shape.bins_in_forward) binning has passes
// of its own (bin.wgsl) and the forward walks their lists (forward_listed.wgsl).
// Dispatch: (tiles_x, tiles_y, batch).

// Bindings 0-1 and 4-9: forward_walk.wgsl.
@group(0) @binding(2) var<storage, read_write> tile_count: array<u32>;
@group(0) @binding(3) var<storage, read_write> tile_list: array<u32>;
// What binning writes besides the lists (tile_bin.wgsl), and the fit loop's state and schedule (fit_main).
@group(0) @binding(10) var<storage, read_write> tile_mask: array<u32>;
@group(0) @binding(11) var<storage, read_write> tri_tiles: array<vec2u>;  // [b, triangle]: (x0 | y0 << 16, x1 | y1 << 16)
@group(0) @binding(12) var<storage, read_write> state: State;
@group(0) @binding(13) var<uniform> sched: Schedule;

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) group: vec3u, @builtin(local_invocation_index) li: u32) {
    let wid = spread_cell(group, frame.tiles_x, frame.n_tiles, frame.tile_spread);  // (common.wgsl)
    bin_tile(wid, li);
    walk_tile(wid, li, listed());
}

@compute @workgroup_size(THREADS)
fn fit_main(@builtin(workgroup_id) group: vec3u, @builtin(local_invocation_index) li: u32) {
    let wid = spread_cell(group, frame.tiles_x, frame.n_tiles, frame.tile_spread);  // (common.wgsl)
    bin_tile(wid, li);
    start_iteration(wid, li);
    walk_tile(wid, li, listed());
}
