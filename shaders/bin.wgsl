// Binning in a pass of its own, for problems where every tile of the forward testing every
// triangle (forward.wgsl, render/gpu/workspace.py Shape.bins_in_forward) was measured slower. The
// same lists, counts and masks to the bit on every path.
// main (fit_main also starts the fit loop's iteration: tile_bin.wgsl start_iteration): each tile's
// workgroup tests every triangle (tile_bin.wgsl bin_tile), dispatch (tiles_x, tiles_y, batch); the
// forward then walks the lists (forward_listed.wgsl).
// Big problems (Shape.coarse_bin) bin in two steps, from fewer tests: coarse_main (or
// coarse_fit_main) -- one workgroup per super-tile of SUPER x SUPER tiles lists, in order, the
// triangles whose cull-grown bounding box meets the super-tile's pixel centres (a superset of each
// of its tiles' tests; its first workgroup writes the tile ranges), dispatch (supers_x, supers_y,
// batch) -- then each tile's workgroup tests only its super-tile's list with the exact test
// (fine_bin.wgsl): the forward's, before it walks (forward_fine.wgsl), where its workgroups run
// at once (Shape.fine_in_forward), else fine_main's, dispatch (tiles_x, tiles_y, batch), before
// the forward walks the lists (forward_listed.wgsl).

@group(0) @binding(0) var<uniform> frame: Frame;
// (binding 1, the scene records: the scene piece, scene_storage.wgsl / scene_uniform.wgsl)
@group(0) @binding(2) var<storage, read_write> tile_count: array<u32>;
@group(0) @binding(3) var<storage, read_write> tile_list: array<u32>;
@group(0) @binding(4) var<storage, read_write> tile_mask: array<u32>;
@group(0) @binding(5) var<storage, read_write> tri_tiles: array<vec2u>;  // [b, triangle]: (x0 | y0 << 16, x1 | y1 << 16)
@group(0) @binding(6) var<storage, read_write> state: State;
@group(0) @binding(7) var<uniform> sched: Schedule;
// Each super-tile's list, [b, super-tile, n_tris], and count (fine_bin.wgsl reads them).
@group(0) @binding(8) var<storage, read_write> super_count: array<u32>;
@group(0) @binding(9) var<storage, read_write> super_list: array<u32>;

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) group: vec3u, @builtin(local_invocation_index) li: u32) {
    let wid = spread_cell(group, frame.tiles_x, frame.n_tiles, frame.tile_spread);  // (common.wgsl)
    bin_tile(wid, li);
}

@compute @workgroup_size(THREADS)
fn fit_main(@builtin(workgroup_id) group: vec3u, @builtin(local_invocation_index) li: u32) {
    let wid = spread_cell(group, frame.tiles_x, frame.n_tiles, frame.tile_spread);  // (common.wgsl)
    bin_tile(wid, li);
    start_iteration(wid, li);
}

@compute @workgroup_size(THREADS)
fn coarse_main(@builtin(workgroup_id) group: vec3u, @builtin(local_invocation_index) li: u32) {
    let wid = spread_cell(group, supers_x(), supers_x() * supers_y(), frame.super_spread);  // (common.wgsl)
    bin_super(wid, li);
}

@compute @workgroup_size(THREADS)
fn coarse_fit_main(@builtin(workgroup_id) group: vec3u, @builtin(local_invocation_index) li: u32) {
    let wid = spread_cell(group, supers_x(), supers_x() * supers_y(), frame.super_spread);  // (common.wgsl)
    bin_super(wid, li);
    start_iteration(wid, li);
}

@compute @workgroup_size(THREADS)
fn fine_main(@builtin(workgroup_id) group: vec3u, @builtin(local_invocation_index) li: u32) {
    let wid = spread_cell(group, frame.tiles_x, frame.n_tiles, frame.tile_spread);  // (common.wgsl)
    bin_tile_fine(wid, li);
}

// Super-tile wid.xy of image wid.z: its candidates, in order, and their count.
fn bin_super(wid: vec3u, li: u32) {
    let b = wid.z;
    let slot = (b * supers_y() + wid.y) * supers_x() + wid.x;
    let list_base = slot * frame.n_tris;
    let sbase = record_tri(b, 0u, frame);
    let reach = frame.cull_k * sigma_px(b, frame);
    let last = vec2u(frame.tiles_x - 1u, frame.tiles_y - 1u);
    let lo = tile_extent(wid.xy * SUPER, frame)[0];
    let hi = tile_extent(min(wid.xy * SUPER + vec2u(SUPER - 1u), last), frame)[1];
    let first_super = wid.x == 0u && wid.y == 0u;
    clear_rounds(li);
    workgroupBarrier();
    var run = 0u;  // the list's length so far (the same in every thread)
    let rounds = (frame.n_tris + THREADS - 1u) / THREADS;
    for (var r = 0u; r < rounds; r++) {
        let i = r * THREADS + li;
        var hit = 0u;
        if (i < frame.n_tris) {
            let t = load_tri(sbase + i * TRI_FLOATS, frame);
            hit = select(0u, 1u, bbox_meets(t, lo, hi, reach));
            if (first_super) { tri_tiles[b * frame.n_tris + i] = tile_range(t, reach); }
        }
        let prefix = round_prefix(li, r, li, hit);
        if (hit == 1u) { super_list[list_base + run + prefix.x] = i; }
        run += prefix.y;
    }
    if (li == 0u) { super_count[slot] = run; }
}
