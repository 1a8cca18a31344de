// Backward: one workgroup per tile, O(T) per pixel. Each pixel walks its tile's list top-down
// like the forward, carrying the transmittance above the current triangle exactly and
// un-compositing the canvas beneath it by division,
//     C_{i-1} = (C_i - alpha_i rgb_i) / (1 - alpha_i),
// falling back to re-compositing from the background when 1 - alpha_i is too small for the
// division to be accurate. Per-triangle gradients are summed over the tile in a fixed order
// (stash10/gather, KB triangles per barrier pair) and written to the tile's own slot: no float
// atomics, so results are reproducible.
// Pixels per thread: PPT (prepended by render/gpu/shaders.py, with THREADS = WG / PPT). Thread li
// walks pixels li, li + THREADS, ... of the tile and adds their gradients before the workgroup
// sum, so one sum serves PPT pixels. GPUs use 1; CPU adapters use more, where a workgroup sum
// and a barrier cost far more than the arithmetic (docs/PERFORMANCE.md, round 7). The pixels are
// separate named variables, not an array: an array of per-pixel state is indexed dynamically and
// spills to memory (round 5).
// Segments: a tile's list is cut into segments of seg_len entries counted from the top, and each
// segment is its own workgroup (more parallelism for small frames). A segment starts from the
// transmittance T and accumulated colour A the forward recorded at its top boundary:
// the canvas beneath is C = (C_T - A) / T there. The bottom segment writes the background's slot.
// There are at most n_seg segments (their checkpoints' memory is capped: render/gpu/workspace.py
// Shape.n_seg), so where a list is longer than n_seg * seg_len the last segment takes everything
// below its top.
// Dispatch: (tiles_x, tiles_y, batch * n_seg). Partial layout: [(b * n_tiles + tile), slot, 10],
// where slot n_tris holds the background gradient.
// With frame.removal_costs set (and the forward run with the mse loss), the same walk sums each
// triangle's exact removal cost into its slot's first value instead (render/placement.py has the
// float64 version): the fitter's pruning ranks triangles with one pass instead of host work.

@group(0) @binding(0) var<uniform> frame: Frame;
@group(0) @binding(1) var<storage, read> scene: array<f32>;  // scene records (scene_access.wgsl)
@group(0) @binding(2) var<storage, read> tile_count: array<u32>;
@group(0) @binding(3) var<storage, read> tile_list: array<u32>;
@group(0) @binding(4) var<storage, read> image: array<f32>;
@group(0) @binding(5) var<storage, read> dldc: array<f32>;
@group(0) @binding(6) var<storage, read_write> partial: array<f32>;
@group(0) @binding(7) var<storage, read> ckpt: array<vec4f>;
const WEIGHTS_BINDING: u32 = 8u;  // the focus map, in the weighted variant (focus_map.wgsl)

var<workgroup> staged: array<Staged, BSTAGE>;  // (the staging piece)
var<workgroup> staged_id: array<u32, BSTAGE>;
var<workgroup> n_done: atomic<u32>;  // pixels whose walk has ended
var<workgroup> all_done: u32;

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32, sg: SgIn) {
    backward_tile(wid, li, sg);
}
