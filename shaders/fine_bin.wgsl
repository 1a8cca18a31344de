// The second step of two-pass binning (render/gpu/workspace.py Shape.coarse_bin): tile wid.xy of
// image wid.z tests only its super-tile's list (bin.wgsl coarse_main made it, in compositing
// order) with the exact test, and writes its list, count and mask -- the same as every tile
// testing every triangle (tile_bin.wgsl bin_tile) makes, to the bit. The mask is built in
// workgroup memory (at most FINE_WORDS words, which Shape.coarse_bin checks). Where the forward's
// workgroups run at once (Shape.fine_in_forward) each runs it before it walks its tile
// (forward_fine.wgsl): a pass of its own (bin.wgsl fine_main) costs the host one more dispatch to
// encode each iteration. Where they run in several waves that pass is faster: its small
// workgroups hide the list's latency better than the forward's.
// The including kernel declares frame, scene, tile_count, tile_list, tile_mask, super_count and
// super_list, SUPER and FINE_WORDS (scan.wgsl: the compaction, and `running`, which it sets to the
// list's length).

var<workgroup> fine_mask: array<atomic<u32>, FINE_WORDS>;
var<workgroup> fine_count: u32;  // the super-tile's list length, read once for the workgroup

fn bin_tile_fine(wid: vec3u, li: u32) {
    let b = wid.z;
    let slot = b * frame.n_tiles + wid.y * frame.tiles_x + wid.x;
    let list_base = slot * frame.n_tris;
    let mask_base = slot * frame.mask_words;
    let sup = (b * supers_y() + wid.y / SUPER) * supers_x() + wid.x / SUPER;
    let sbase = record_tri(b, 0u, frame);
    let reach = frame.cull_k * sigma_px(b, frame);
    let ext = tile_extent(wid.xy, frame);
    if (li == 0u) { fine_count = super_count[sup]; }
    for (var w = li; w < frame.mask_words; w += THREADS) { atomicStore(&fine_mask[w], 0u); }
    clear_rounds(li);
    // The rounds' loop holds barriers, so its bound must be uniform: a load from a binding the
    // kernel may write (bin.wgsl's super_count) is not, by WGSL's rules, and this load's barrier
    // also orders the clears before round 0.
    let count = workgroupUniformLoad(&fine_count);
    var run = 0u;  // the list's length so far (the same in every thread)
    let rounds = (count + THREADS - 1u) / THREADS;
    for (var r = 0u; r < rounds; r++) {
        let k = r * THREADS + li;
        var hit = 0u;
        var id = 0u;
        if (k < count) {
            id = super_list[sup * frame.n_tris + k];
            hit = select(0u, 1u, touches_tile(load_tri(sbase + id * TRI_FLOATS, frame), ext[0], ext[1], reach));
        }
        let prefix = round_prefix(li, r, li, hit);
        if (hit == 1u) {
            tile_list[list_base + run + prefix.x] = id;
            atomicOr(&fine_mask[id / 32u], 1u << (id % 32u));
        }
        run += prefix.y;
    }
    workgroupBarrier();  // every bit set
    for (var w = li; w < frame.mask_words; w += THREADS) { tile_mask[mask_base + w] = atomicLoad(&fine_mask[w]); }
    if (li == 0u) {
        tile_count[slot] = run;
        running = run;
    }
}

// Super-tiles (SUPER x SUPER tiles) across and down the frame.
fn supers_x() -> u32 {
    return (frame.tiles_x + SUPER - 1u) / SUPER;
}

fn supers_y() -> u32 {
    return (frame.tiles_y + SUPER - 1u) / SUPER;
}
