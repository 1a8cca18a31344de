// Binning in passes of its own, for problems where binning inside the forward (forward.wgsl,
// render/gpu/workspace.py Shape.bins_in_forward) was measured slower; the forward then walks the
// lists these passes made (forward_listed.wgsl). The same lists, counts and masks to the bit.
// main (fit_main also starts the fit loop's iteration: tile_bin.wgsl start_iteration): each tile's
// workgroup tests every triangle (tile_bin.wgsl bin_tile), dispatch (tiles_x, tiles_y, batch).
// Big problems (Shape.coarse_bin) bin in two passes, from fewer tests: coarse_main (or
// coarse_fit_main) -- one workgroup per super-tile of SUPER x SUPER tiles lists, in order, the
// triangles whose cull-grown bounding box meets the super-tile's pixel centres (a superset of each
// of its tiles' tests; its first workgroup writes the tile ranges), dispatch (supers_x, supers_y,
// batch) -- then fine_main: each tile's workgroup tests only its super-tile's list with the exact
// test, building its mask in workgroup memory (at most FINE_WORDS words, which Shape.coarse_bin
// checks), dispatch (tiles_x, tiles_y, batch).

@group(0) @binding(0) var<uniform> frame: Frame;
@group(0) @binding(1) var<storage, read> scene: array<f32>;  // scene records (scene_access.wgsl)
@group(0) @binding(2) var<storage, read_write> tile_count: array<u32>;
@group(0) @binding(3) var<storage, read_write> tile_list: array<u32>;
@group(0) @binding(4) var<storage, read_write> tile_mask: array<u32>;
@group(0) @binding(5) var<storage, read_write> tri_tiles: array<vec2u>;  // [b, triangle]: (x0 | y0 << 16, x1 | y1 << 16)
@group(0) @binding(6) var<storage, read_write> state: State;
@group(0) @binding(7) var<uniform> sched: Schedule;
// Each super-tile's list, [b, super-tile, n_tris], and count.
@group(0) @binding(8) var<storage, read_write> super_count: array<u32>;
@group(0) @binding(9) var<storage, read_write> super_list: array<u32>;

const SCAN_THREADS: u32 = THREADS;  // (scan.wgsl)
var<workgroup> fine_mask: array<atomic<u32>, FINE_WORDS>;

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
    bin_tile(wid, li);
}

@compute @workgroup_size(THREADS)
fn fit_main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
    bin_tile(wid, li);
    start_iteration(wid, li);
}

@compute @workgroup_size(THREADS)
fn coarse_main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
    bin_super(wid, li);
}

@compute @workgroup_size(THREADS)
fn coarse_fit_main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
    bin_super(wid, li);
    start_iteration(wid, li);
}

@compute @workgroup_size(THREADS)
fn fine_main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
    let b = wid.z;
    let slot = b * frame.n_tiles + wid.y * frame.tiles_x + wid.x;
    let list_base = slot * frame.n_tris;
    let mask_base = slot * frame.mask_words;
    let sup = (b * supers_y() + wid.y / SUPER) * supers_x() + wid.x / SUPER;
    let count = super_count[sup];
    let sbase = record_tri(b, 0u, frame);
    let reach = frame.cull_k * sigma_px(b, frame);
    let ext = tile_extent(wid.xy, frame);
    for (var w = li; w < frame.mask_words; w += THREADS) { atomicStore(&fine_mask[w], 0u); }
    if (li == 0u) { running = 0u; }
    workgroupBarrier();
    let rounds = (count + THREADS - 1u) / THREADS;
    for (var r = 0u; r < rounds; r++) {
        let k = r * THREADS + li;
        var hit = 0u;
        var id = 0u;
        if (k < count) {
            id = super_list[sup * frame.n_tris + k];
            hit = select(0u, 1u, touches_tile(load_tri(sbase + id * TRI_FLOATS, frame), ext[0], ext[1], reach));
        }
        let at = append_at(li, hit);
        if (hit == 1u) {
            tile_list[list_base + at] = id;
            atomicOr(&fine_mask[id / 32u], 1u << (id % 32u));
        }
    }
    workgroupBarrier();  // every bit set
    for (var w = li; w < frame.mask_words; w += THREADS) { tile_mask[mask_base + w] = atomicLoad(&fine_mask[w]); }
    if (li == 0u) { tile_count[slot] = running; }
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
    if (li == 0u) { running = 0u; }
    let rounds = (frame.n_tris + THREADS - 1u) / THREADS;
    for (var r = 0u; r < rounds; r++) {
        let i = r * THREADS + li;
        var hit = 0u;
        if (i < frame.n_tris) {
            let t = load_tri(sbase + i * TRI_FLOATS, frame);
            hit = select(0u, 1u, bbox_meets(t, lo, hi, reach));
            if (first_super) { tri_tiles[b * frame.n_tris + i] = tile_range(t, reach); }
        }
        let at = append_at(li, hit);
        if (hit == 1u) { super_list[list_base + at] = i; }
    }
    if (li == 0u) { super_count[slot] = running; }
}

// Order-preserving append to the workgroup's running list (the two-pass entries): this thread's
// first position for its `count` entries; `running` moves past the round's. Call from uniform
// control flow (the scan's first barrier orders an earlier write of `running`).
fn append_at(li: u32, count: u32) -> u32 {
    let prefix = exclusive_scan(li, count);
    let at = running + prefix.x;
    workgroupBarrier();  // every thread has read `running`
    if (li == 0u) { running = running + prefix.y; }
    workgroupBarrier();
    return at;
}


// Super-tiles (SUPER x SUPER tiles) across and down the frame.
fn supers_x() -> u32 {
    return (frame.tiles_x + SUPER - 1u) / SUPER;
}

fn supers_y() -> u32 {
    return (frame.tiles_y + SUPER - 1u) / SUPER;
}
