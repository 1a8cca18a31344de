// The forward and the backward of a tile in one workgroup, where the forward bins its own tiles and a
// tile's list is one backward segment (render/gpu/workspace.py Shape.fuses_loss_pass): binning
// (tile_bin.wgsl), the walk with the loss (forward_walk.wgsl), then the backward's walk of the same
// list (backward_walk.wgsl). The backward needs only its own tile's pixels, which this workgroup has
// just written (on CPU adapters each thread keeps its own: HANDED_OFF, common.wgsl), so no dispatch
// boundary separates the two: a fit's iteration (fit_main, which also starts it) is two dispatches
// (this, then the reduction and Adam step), not three, and so is a loss pass outside a fit (main).
// The same arithmetic as the forward's and the backward's dispatches with one segment: the same bits.
// Dispatch: (tiles_x, tiles_y, batch).

// Bindings 0-1 and 4-9: forward_walk.wgsl; 2-3 and 10-13 as forward.wgsl's.
@group(0) @binding(2) var<storage, read_write> tile_count: array<u32>;
@group(0) @binding(3) var<storage, read_write> tile_list: array<u32>;
@group(0) @binding(10) var<storage, read_write> tile_mask: array<u32>;
@group(0) @binding(11) var<storage, read_write> tri_tiles: array<vec2u>;
@group(0) @binding(12) var<storage, read_write> state: State;
@group(0) @binding(13) var<uniform> sched: Schedule;
@group(0) @binding(14) var<storage, read_write> partial: array<f32>;

var<workgroup> staged_id: array<u32, BSTAGE>;  // (the forward's `staged` holds the backward's rounds too)

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) group: vec3u, @builtin(local_invocation_index) li: u32, sg: SgIn) {
    let wid = spread_cell(group, frame.tiles_x, frame.n_tiles, frame.tile_spread);  // (common.wgsl)
    bin_tile(wid, li);
    walk_tile(wid, li, listed());
    storageBarrier();
    backward_tile(vec3u(wid.xy, wid.z * frame.n_seg), li, sg);
}

@compute @workgroup_size(THREADS)
fn fit_main(@builtin(workgroup_id) group: vec3u, @builtin(local_invocation_index) li: u32, sg: SgIn) {
    let wid = spread_cell(group, frame.tiles_x, frame.n_tiles, frame.tile_spread);  // (common.wgsl)
    bin_tile(wid, li);
    start_iteration(wid, li);
    walk_tile(wid, li, listed());
    storageBarrier();  // (the pixels' image and dL/dC, written above, read back below unless HANDED_OFF)
    backward_tile(vec3u(wid.xy, wid.z * frame.n_seg), li, sg);
}
