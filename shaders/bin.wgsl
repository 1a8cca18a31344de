// Binning: for each (tile, image) one workgroup lists, in compositing order, the triangles whose
// cull-expanded bounding box touches the tile, and sets their bits in the tile's membership mask.
// Order-preserving compaction (flag, workgroup prefix sum, scatter), WG = 256 triangles per round.
// Each of the THREADS = WG / PPT threads tests PPT consecutive triangles of a round, so the prefix
// sum runs over THREADS counts: on CPU adapters (PPT 4) a barrier then wakes a quarter of the SIMD
// batches (docs/PERFORMANCE.md, round 10).
// The first tile's workgroup of each image also writes every triangle's tile range: the tiles
// its cull-expanded bounding box can touch, one tile wider on each side than the exact test (a
// superset of the tiles that list it), so the gradient reduction (reduce_param.wgsl) walks those
// tiles and not the whole frame.
// Dispatch: (tiles_x, tiles_y, batch). The fit loop dispatches fit_main, which also starts the
// iteration (schedule.wgsl).
// Big problems (render/gpu/workspace.py Shape.coarse_bin) bin in two passes instead, with the same
// lists, counts and masks to the bit: coarse_main (or coarse_fit_main) -- one workgroup per
// super-tile of SUPER x SUPER tiles lists, in order, the triangles whose cull-grown bounding box
// meets the super-tile's pixel centres (a superset of each of its tiles' tests; its first
// workgroup writes the tile ranges), dispatch (supers_x, supers_y, batch) -- then fine_main: each
// tile's workgroup tests only its super-tile's list with the exact test, building its mask in
// workgroup memory (at most FINE_WORDS words, which Shape.coarse_bin checks), dispatch as above.

@group(0) @binding(0) var<uniform> frame: Frame;
@group(0) @binding(1) var<storage, read> scene: array<f32>;  // scene records (scene_access.wgsl)
@group(0) @binding(2) var<storage, read_write> tile_count: array<u32>;
@group(0) @binding(3) var<storage, read_write> tile_list: array<u32>;
@group(0) @binding(4) var<storage, read_write> tile_mask: array<u32>;
@group(0) @binding(5) var<storage, read_write> tri_tiles: array<vec2u>;  // [b, triangle]: (x0 | y0 << 16, x1 | y1 << 16)

const SCAN_THREADS: u32 = THREADS;  // (scan.wgsl)
var<workgroup> words: array<atomic<u32>, 8>;
var<workgroup> running: u32;

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
    bin_tile(wid, li);
}

// Only fit_main uses these (layout "auto" leaves them out of main's).
@group(0) @binding(6) var<storage, read_write> state: State;
@group(0) @binding(7) var<uniform> sched: Schedule;

// The fit loop's binning, which also starts the iteration: the counter and its learning-rate
// scale, written by one thread. No other workgroup of this dispatch reads the state (binning
// takes sigma from the scene record, where the previous iteration's Adam dispatch -- or the
// host, at a reset or a new schedule -- put this iteration's value), so the write races nothing.
@compute @workgroup_size(THREADS)
fn fit_main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
    bin_tile(wid, li);
    start_iteration(wid, li);
}

fn start_iteration(wid: vec3u, li: u32) {
    if (li == 0u && wid.x == 0u && wid.y == 0u && wid.z == 0u) {
        let it = state.iter + 1u;
        state.iter = it;
        state.lr_scale = schedule_lr(it);
    }
}

// Only the two-pass entries use these: each super-tile's list, [b, super-tile, n_tris], and count.
@group(0) @binding(8) var<storage, read_write> super_count: array<u32>;
@group(0) @binding(9) var<storage, read_write> super_list: array<u32>;
var<workgroup> fine_mask: array<atomic<u32>, FINE_WORDS>;

@compute @workgroup_size(THREADS)
fn coarse_main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
    bin_super(wid, li);
}

@compute @workgroup_size(THREADS)
fn coarse_fit_main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
    bin_super(wid, li);
    start_iteration(wid, li);
}

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
    for (var w = li; w < frame.mask_words; w += THREADS) { tile_mask[mask_base + w] = atomicLoad(&fine_mask[w]); }
    if (li == 0u) { tile_count[slot] = running; }
}

// The tiles (x0, y0)-(x1, y1), packed, that triangle t's bounding box expanded by `reach` may
// touch, widened by a tile each side (float rounding at a tile edge cannot leave one out); a
// triangle with a non-finite vertex gets some range inside the frame (its loss is not finite:
// the fit rolls back).
fn tile_range(t: TriPx, reach: f32) -> vec2u {
    let lo = min(t.p0, min(t.p1, t.p2)) - vec2f(reach);
    let hi = max(t.p0, max(t.p1, t.p2)) + vec2f(reach);
    let last = vec2f(f32(frame.tiles_x - 1u), f32(frame.tiles_y - 1u));
    let top = vec2u(frame.tiles_x - 1u, frame.tiles_y - 1u);
    let a = min(vec2u(clamp(floor(lo / f32(TILE)) - 1.0, vec2f(0.0), last)), top);
    let z = min(vec2u(clamp(floor(hi / f32(TILE)) + 1.0, vec2f(0.0), last)), top);
    return vec2u(a.x | (a.y << 16u), z.x | (z.y << 16u));
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

fn bin_tile(wid: vec3u, li: u32) {
    let b = wid.z;
    let tile_index = wid.y * frame.tiles_x + wid.x;
    let slot = b * frame.n_tiles + tile_index;
    let list_base = slot * frame.n_tris;
    let mask_base = slot * frame.mask_words;
    let sbase = record_tri(b, 0u, frame);
    let reach = frame.cull_k * sigma_px(b, frame);
    let ext = tile_extent(wid.xy, frame);
    if (li == 0u) { running = 0u; }
    let rounds = (frame.n_tris + WG - 1u) / WG;
    for (var r = 0u; r < rounds; r++) {
        let first = r * WG + li * PPT;  // this thread's triangles: first .. first + PPT - 1
        if (li < 8u) { atomicStore(&words[li], 0u); }
        var hits = 0u;  // bit q: triangle first + q touches the tile
        for (var q = 0u; q < PPT; q++) {
            let i = first + q;
            if (i >= frame.n_tris) { continue; }
            let t = load_tri(sbase + i * TRI_FLOATS, frame);
            if (touches_tile(t, ext[0], ext[1], reach)) {
                hits |= 1u << q;
            }
            if (tile_index == 0u) { tri_tiles[b * frame.n_tris + i] = tile_range(t, reach); }
        }
        let mine = countOneBits(hits);
        let prefix = exclusive_scan(li, mine);  // (its barriers order `running` and `words` too)
        var at = running + prefix.x;  // this thread's first list position
        for (var q = 0u; q < PPT; q++) {
            if ((hits & (1u << q)) != 0u) {
                tile_list[list_base + at] = first + q;
                at += 1u;
                let k = li * PPT + q;  // index within the round
                atomicOr(&words[k / 32u], 1u << (k % 32u));
            }
        }
        workgroupBarrier();
        let w = r * 8u + li;
        if (li < 8u && w < frame.mask_words) {
            tile_mask[mask_base + w] = atomicLoad(&words[li]);
        }
        if (li == 0u) { running = running + prefix.y; }
        workgroupBarrier();
    }
    if (li == 0u) { tile_count[slot] = running; }
}
