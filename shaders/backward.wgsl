// Backward, a dispatch of its own: one workgroup per (tile, segment), each walking its segment of
// the tile's list (backward_walk.wgsl, which says how) from the forward's image, dL/dC and
// segment checkpoints. A fit whose forward bins its tiles and walks one segment a tile walks the
// backward in the forward's workgroups instead (forward_backward.wgsl).
// Dispatch: (tiles_x, tiles_y, batch * n_seg).

@group(0) @binding(0) var<uniform> frame: Frame;
// (binding 1, the scene records: the scene piece, scene_storage.wgsl / scene_uniform.wgsl)
@group(0) @binding(2) var<storage, read> tile_count: array<u32>;
@group(0) @binding(3) var<storage, read> tile_list: array<u32>;
@group(0) @binding(4) var<storage, read> image: array<f32>;
@group(0) @binding(5) var<storage, read> dldc: array<f32>;
@group(0) @binding(6) var<storage, read_write> partial: array<f32>;
@group(0) @binding(7) var<storage, read> ckpt: array<vec4f>;
const WEIGHTS_BINDING: u32 = 8u;  // the focus map, in the weighted variant (focus_map.wgsl)

var<workgroup> staged: array<Staged, BSTAGE * STAGED_SLOTS>;  // (the staging piece's records)
var<workgroup> staged_id: array<u32, BSTAGE>;
var<workgroup> n_walk: atomic<u32>;  // the early stop's count (walk_stop_*.wgsl round_all_done)
var<workgroup> all_done: u32;

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) group: vec3u, @builtin(local_invocation_index) li: u32, sg: SgIn) {
    let wid = spread_cell(group, frame.tiles_x, frame.n_tiles, frame.tile_spread);  // (common.wgsl)
    backward_tile(wid, li, sg);
}
