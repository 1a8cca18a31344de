// Binning one tile: the list, in compositing order, of the triangles whose cull-expanded bounding
// box touches it, its membership mask, and (the first tile's workgroup of each image) every
// triangle's tile range. The forward (forward.wgsl main, fit_main) bins its own tile this way
// before walking it: one dispatch, where a bin pass of its own added a launch and a barrier an
// iteration and one more set of commands for the host to encode. Where that is slower (big
// problems, full GPUs) binning has passes of its own (bin.wgsl): the same lists, counts and masks
// to the bit.
// Order-preserving compaction (scan.wgsl: the round's hits as a bit mask), WG = 256 triangles per
// round. Each of the THREADS = WG / PPT threads tests PPT consecutive triangles of a round; the
// round's mask is also the tile's membership mask for those triangles.
// A triangle's tile range is the tiles its cull-expanded bounding box can touch, one tile wider on
// each side than the exact test (a superset of the tiles that list it), so the gradient reduction
// (reduce_param.wgsl) walks those tiles and not the whole frame.
// The including kernel declares frame, scene, tile_count, tile_list, tile_mask, tri_tiles, state
// and sched (scan.wgsl: the compaction, and `running`, which it sets to the list's length).

// The fit loop starts each iteration in its first dispatch: the counter and its learning-rate
// scale, written by one thread. No other workgroup of that dispatch reads the state (binning and
// the forward take sigma from the scene record, where the previous iteration's Adam dispatch -- or
// the host, at a reset or a new schedule -- put this iteration's value), so the write races nothing.
fn start_iteration(wid: vec3u, li: u32) {
    if (li == 0u && wid.x == 0u && wid.y == 0u && wid.z == 0u) {
        let it = state.iter + 1u;
        state.iter = it;
        state.lr_scale = schedule_lr(it);
    }
}

// Tile wid.xy of image wid.z tests every triangle: its list, count and mask.
fn bin_tile(wid: vec3u, li: u32) {
    let b = wid.z;
    let tile_index = wid.y * frame.tiles_x + wid.x;
    let slot = b * frame.n_tiles + tile_index;
    let list_base = slot * frame.n_tris;
    let mask_base = slot * frame.mask_words;
    let sbase = record_tri(b, 0u, frame);
    let reach = frame.cull_k * sigma_px(b, frame);
    let ext = tile_extent(wid.xy, frame);
    clear_rounds(li);
    workgroupBarrier();
    var run = 0u;  // the list's length so far (the same in every thread)
    let rounds = (frame.n_tris + WG - 1u) / WG;
    for (var r = 0u; r < rounds; r++) {
        let k0 = li * PPT;  // this thread's first triangle within the round
        let first = r * WG + k0;  // its triangles: first .. first + PPT - 1
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
        let prefix = round_prefix(li, r, k0, hits);
        var at = run + prefix.x;  // this thread's first list position
        for (var q = 0u; q < PPT; q++) {
            if ((hits & (1u << q)) != 0u) {
                tile_list[list_base + at] = first + q;
                at += 1u;
            }
        }
        let w = r * 8u + li;  // (the round's mask is the tile's mask words r * 8 ..)
        if (li < 8u && w < frame.mask_words) {
            tile_mask[mask_base + w] = round_word(r, li);
        }
        run += prefix.y;
    }
    if (li == 0u) {
        tile_count[slot] = run;
        running = run;
    }
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
