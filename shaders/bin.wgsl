// Binning: for each (tile, image) one workgroup lists, in compositing order, the triangles whose
// cull-expanded bounding box touches the tile, and sets their bits in the tile's membership mask.
// Order-preserving compaction (flag, workgroup prefix sum, scatter), 256 triangles per round.
// Dispatch: (tiles_x, tiles_y, batch).

@group(0) @binding(0) var<uniform> frame: Frame;
@group(0) @binding(2) var<storage, read_write> tile_count: array<u32>;
@group(0) @binding(3) var<storage, read_write> tile_list: array<u32>;
@group(0) @binding(4) var<storage, read_write> tile_mask: array<u32>;

var<workgroup> scan: array<u32, 256>;
var<workgroup> words: array<atomic<u32>, 8>;
var<workgroup> running: u32;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
    let b = wid.z;
    let tile_index = wid.y * frame.tiles_x + wid.x;
    let slot = b * frame.n_tiles + tile_index;
    let list_base = slot * frame.n_tris;
    let mask_base = slot * frame.mask_words;
    let sbase = b * frame.scene_stride;
    let reach = frame.cull_k * sigma_px(b, frame);
    let ext = tile_extent(wid.xy, frame);
    if (li == 0u) { running = 0u; }
    let rounds = (frame.n_tris + WG - 1u) / WG;
    for (var r = 0u; r < rounds; r++) {
        let i = r * WG + li;
        if (li < 8u) { atomicStore(&words[li], 0u); }
        var hit = 0u;
        if (i < frame.n_tris && touches_tile(load_tri(sbase + i * 10u, frame), ext[0], ext[1], reach)) {
            hit = 1u;
        }
        scan[li] = hit;
        workgroupBarrier();
        // Hillis-Steele inclusive scan over 256 flags
        for (var off = 1u; off < WG; off = off * 2u) {
            var add = 0u;
            if (li >= off) { add = scan[li - off]; }
            workgroupBarrier();
            scan[li] = scan[li] + add;
            workgroupBarrier();
        }
        let base = running;
        if (hit == 1u) {
            tile_list[list_base + base + scan[li] - 1u] = i;
            atomicOr(&words[li / 32u], 1u << (li % 32u));
        }
        workgroupBarrier();
        let w = r * 8u + li;
        if (li < 8u && w < frame.mask_words) {
            tile_mask[mask_base + w] = atomicLoad(&words[li]);
        }
        if (li == 0u) { running = base + scan[WG - 1u]; }
        workgroupBarrier();
    }
    if (li == 0u) { tile_count[slot] = running; }
}
