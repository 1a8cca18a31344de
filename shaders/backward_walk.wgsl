// The backward's walk of one tile segment (backward_tile), O(T) per pixel. Each pixel walks its
// tile's list top-down like the forward, carrying the transmittance above the current triangle
// exactly and un-compositing the canvas beneath it by division,
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
// Workgroup wid: segment wid.z % n_seg of tile wid.xy of image wid.z / n_seg. Partial layout:
// [(b * n_tiles + tile), slot, 10], where slot n_tris holds the background gradient.
// With frame.removal_costs set (and the forward run with the mse loss), the same walk sums each
// triangle's exact removal cost into its slot's first value instead (render/placement.py has the
// float64 version): the fitter's pruning ranks triangles with one pass instead of host work. Where
// COSTS_BY_VARIANT (CPU adapters: render/gpu/shaders.py costs_by_variant) the pipeline decides it
// instead, COSTS_VARIANT, so that a fit's iterations carry none of the costs' arithmetic.
// Shared by backward.wgsl (a dispatch of its own) and forward_backward.wgsl (after the same
// workgroup's forward, one segment a tile). The including kernel declares the bindings it reads
// (frame, scene, tile_count, tile_list, image, dldc, partial, ckpt) and the workgroup memory
// (staged, at least BSTAGE records; staged_id; n_walk; all_done).

// The backward stops where the forward with the loss stopped (frame.stop_t): 1e-30 for the engine's
// loss and gradient and, by default, a fit's iterations, so the gradients of deeply hidden triangles
// and of the background stay exact (and the division cannot overflow before that).


// One pixel's walk: its centre, the canvas beneath the entries walked so far, dL/dC there and
// the transmittance above the current entry.
struct BackPixel {
    p: vec2f,
    cur: vec3f,
    G: vec3f,
    trans: f32,
    live: bool,
}

// The ten gradient values of one triangle: d/d(x0, y0, x1, y1), d/d(x2, y2, r, g), d/d(b, a).
struct Grad10 {
    a: vec4f,
    b: vec4f,
    c: vec2f,
}

fn add_grad(x: Grad10, y: Grad10) -> Grad10 {
    return Grad10(x.a + y.a, x.b + y.b, x.c + y.c);
}

// Per-dispatch constants of one workgroup's walk.
struct Walk {
    b: u32,
    list_base: u32,
    inv_sig: f32,
    reach: f32,  // <= 0: entries farther outside than this are culled, as in the forward
    wh: vec2f,
}

// The canvas beneath list entry `m` at up to eight pixels (PPT of them): list entries 0..m-1
// composited over the background. One shared loop, once per thread and entry, not once per pixel:
// on CPU adapters a loop costs a pass even where no pixel needs it (round 8), and there the walk
// calls this outside its loop over entries (DEFER_RECOMPOSE, backward_tile).
// With ROUND_BASE (the staging piece's; GPUs), the canvas beneath the staged round's first entry
// `start` is kept from the round's first re-composite, and later ones loop only over the staged
// entries above it: a subgroup re-composites wherever any of its lanes needs to, and fitted scenes
// have many nearly opaque triangles (docs/PERFORMANCE.md). The operations and their order are
// those of one loop from the background. CPU adapters loop from the background each time: there a
// workgroup-memory read is a gather per lane, and the kept canvas measured slower.
struct BelowPixels {
    c0: vec3f,
    c1: vec3f,
    c2: vec3f,
    c3: vec3f,
    c4: vec3f,
    c5: vec3f,
    c6: vec3f,
    c7: vec3f,
}

// The pixels of a thread, for composite_below (unused ones are ignored: PPT).
struct Points {
    p0: vec2f,
    p1: vec2f,
    p2: vec2f,
    p3: vec2f,
    p4: vec2f,
    p5: vec2f,
    p6: vec2f,
    p7: vec2f,
}

fn over(c: vec3f, p: vec2f, t: TriSetup, inv_sig: f32) -> vec3f {
    let alpha = t.rgba.a * coverage(setup_distance(p, t), inv_sig);
    return c * (1.0 - alpha) + t.rgba.rgb * alpha;
}

fn over_pixels(r: ptr<function, BelowPixels>, t: TriSetup, inv_sig: f32, p: Points) {
    (*r).c0 = over((*r).c0, p.p0, t, inv_sig);
    if (PPT > 1u) { (*r).c1 = over((*r).c1, p.p1, t, inv_sig); }
    if (PPT > 2u) {
        (*r).c2 = over((*r).c2, p.p2, t, inv_sig);
        (*r).c3 = over((*r).c3, p.p3, t, inv_sig);
    }
    if (PPT > 4u) {
        (*r).c4 = over((*r).c4, p.p4, t, inv_sig);
        (*r).c5 = over((*r).c5, p.p5, t, inv_sig);
        (*r).c6 = over((*r).c6, p.p6, t, inv_sig);
        (*r).c7 = over((*r).c7, p.p7, t, inv_sig);
    }
}

// List entries 0..m-1 over the background, read from the scene (every lane of the subgroup here:
// the reduction piece's load_tri_shared).
fn composite_scene(w: Walk, m: u32, p: Points, sg: SgIn) -> BelowPixels {
    let bg = background(w.b, frame);
    var r = BelowPixels(bg, bg, bg, bg, bg, bg, bg, bg);
    for (var q = 0u; q < m; q++) {
        let t = setup_tri(load_tri_shared(record_tri(w.b, tile_list[w.list_base + q], frame), sg), -w.reach);
        over_pixels(&r, t, w.inv_sig, p);
    }
    return r;
}

var<private> round_base: BelowPixels;  // (ROUND_BASE) the canvas beneath the staged round's first entry
var<private> round_based: bool;   // round_base holds this round's

fn composite_below(w: Walk, m: u32, start: u32, p: Points, sg: SgIn) -> BelowPixels {
    if (!ROUND_BASE) { return composite_scene(w, m, p, sg); }
    if (!round_based) {
        round_base = composite_scene(w, start, p, sg);
        round_based = true;
    }
    var r = round_base;
    for (var q = start; q < m; q++) {
        over_pixels(&r, stage_get(q - start, -w.reach), w.inv_sig, p);
    }
    return r;
}

// Pixel `pi` (0..255) of this workgroup's tile, positioned at the top of segment `seg`; `k`: its
// place among the thread's pixels, whose colour and dL/dC the forward left in this thread where
// HANDED_OFF (common.wgsl handed_c, handed_g).
fn start_back_pixel(tile: vec2u, pi: u32, b: u32, slot: u32, seg: u32, k: u32) -> BackPixel {
    let pix = walk_pixel(tile, pi, THREADS, PPT);
    var s: BackPixel;
    s.p = vec2f(pix) + vec2f(0.5);
    s.cur = vec3f(0.0);
    s.G = vec3f(0.0);
    s.trans = 1.0;
    let in_frame = pix.x < frame.width && pix.y < frame.height;
    if (in_frame) {
        if (HANDED_OFF) {
            s.cur = handed_c[k];
            s.G = handed_g[k];
        } else {
            let o = ((b * frame.height + pix.y) * frame.width + pix.x) * 3u;
            s.cur = vec3f(image[o], image[o + 1u], image[o + 2u]);
            s.G = vec3f(dldc[o], dldc[o + 1u], dldc[o + 2u]);
        }
        if (seg > 0u) {
            let c = ckpt[((slot * frame.n_seg) + seg) * WG + pi];
            s.trans = c.x;
            s.cur = (s.cur - c.yzw) / max(s.trans, 1e-37);
        }
    }
    s.live = in_frame && s.trans >= frame.stop_t;
    if (!s.live) { walk_ended(); }
    return s;
}

// One list entry (triangle t) at one pixel, first half: its coverage and the canvas beneath it
// by division, or `recompose` set where 1 - alpha is too small for the division to be accurate
// (the caller then fills `below` from composite_below).
struct Hit {
    dg: DistGrad,
    cov: f32,
    alpha: f32,
    below: vec3f,
    hit: bool,        // within reach of a live pixel: the entry changes the walk
    recompose: bool,
}

fn entry_hit(s: BackPixel, t: TriSetup, w: Walk) -> Hit {
    var h: Hit;
    h.hit = false;
    h.recompose = false;
    if (!s.live || !setup_near(s.p, t)) { return h; }
    h.dg = setup_distance_grad(s.p, t);
    if (h.dg.d < w.reach) { return h; }
    h.hit = true;
    h.cov = coverage(h.dg.d, w.inv_sig);
    h.alpha = t.rgba.a * h.cov;
    let om = 1.0 - h.alpha;
    h.recompose = om < frame.recompute_below;
    h.below = (s.cur - h.alpha * t.rgba.rgb) * (1.0 / max(om, 1e-30));
    return h;
}

// Whether this walk sums removal costs rather than gradients.
fn sums_costs() -> bool {
    if (COSTS_BY_VARIANT) { return COSTS_VARIANT; }
    return frame.removal_costs != 0u;
}

// Second half: t's gradient at the pixel (or, with sums_costs(), its removal cost in slot 0), and
// the walk stepped down past t.
fn entry_grad(s: ptr<function, BackPixel>, t: TriSetup, h: Hit, w: Walk) -> Grad10 {
    var g = Grad10(vec4f(0.0), vec4f(0.0), vec2f(0.0));
    if (!h.hit) { return g; }
    let trans = (*s).trans;
    if (sums_costs()) {
        // Removing t takes delta = T alpha (rgb - below) off this pixel, which changes its squared
        // error by |delta|^2 - 2 residual . delta (times its focus weight: the focus piece's
        // removal_cost); the forward ran with the mse loss, so residual = dL/dC / (2 inv_values).
        let delta = trans * h.alpha * (t.rgba.rgb - h.below);
        let residual = (*s).G * (0.5 / frame.inv_values);
        g.a.x = removal_cost((*s).p, w.b, delta, residual);
    } else {
        let g_alpha = trans * dot((*s).G, t.rgba.rgb - h.below);
        let g_rgb = trans * h.alpha * (*s).G;
        let g_d = g_alpha * t.rgba.a * h.cov * (1.0 - h.cov) * w.inv_sig;
        g.a = g_d * vec4f(h.dg.g0 * w.wh, h.dg.g1 * w.wh);
        g.b = vec4f(g_d * h.dg.g2 * w.wh, g_rgb.rg);
        g.c = vec2f(g_rgb.b, g_alpha * h.cov);
    }
    (*s).trans = trans * (1.0 - h.alpha);
    (*s).cur = h.below;
    if ((*s).trans < frame.stop_t) {
        (*s).live = false;
        walk_ended();
    }
    return g;
}

// The re-composited canvas `c` for the pixels whose entry asked for it (Hit.recompose).
fn take_below(h0: ptr<function, Hit>, h1: ptr<function, Hit>, h2: ptr<function, Hit>, h3: ptr<function, Hit>,
              h4: ptr<function, Hit>, h5: ptr<function, Hit>, h6: ptr<function, Hit>, h7: ptr<function, Hit>,
              c: BelowPixels) {
    if ((*h0).recompose) { (*h0).below = c.c0; }
    if ((*h1).recompose) { (*h1).below = c.c1; }
    if ((*h2).recompose) { (*h2).below = c.c2; }
    if ((*h3).recompose) { (*h3).below = c.c3; }
    if ((*h4).recompose) { (*h4).below = c.c4; }
    if ((*h5).recompose) { (*h5).below = c.c5; }
    if ((*h6).recompose) { (*h6).below = c.c6; }
    if ((*h7).recompose) { (*h7).below = c.c7; }
}

// One workgroup's backward: segment wid.z % frame.n_seg of tile wid.xy of image wid.z / frame.n_seg.
fn backward_tile(wid: vec3u, li: u32, sg: SgIn) {
    let b = wid.z / frame.n_seg;
    let seg = wid.z % frame.n_seg;
    let slot = b * frame.n_tiles + wid.y * frame.tiles_x + wid.x;
    let count = tile_count[slot];
    // this workgroup's entries: list positions [seg_lo, seg_hi), the top segment first
    let bottom_seg = tile_segments(count, frame) - 1u;
    let seg_len = select(count, frame.seg_len, frame.n_seg > 1u);
    if (seg > bottom_seg && frame.n_seg > 1u) { return; }  // uniform: the tile's list is shorter
    let seg_hi = count - min(count, seg * seg_len);
    let seg_lo = select(seg_hi - min(seg_hi, seg_len), 0u, seg == bottom_seg);  // (the bottom: all the rest)
    let sbase = record_tri(b, 0u, frame);
    let sig = sigma_px(b, frame);
    let w = Walk(b, slot * frame.n_tris, 1.0 / sig, -frame.cull_k * sig,
                 vec2f(f32(frame.width), f32(frame.height)));
    let part_base = slot * (frame.n_tris + 1u) * 10u;

    // zero the count before anything counts itself (workgroup memory is not reliably
    // zero-initialised on every driver: lavapipe reuses it across workgroups)
    if (li == 0u) { atomicStore(&n_walk, 0u); }
    workgroupBarrier();
    let place = park_place(sg);  // (lane-constant: once, not once an entry)
    stage_begin();
    var s0 = start_back_pixel(wid.xy, li, b, slot, seg, 0u);
    let blk = walk_block(wid.xy, li, PPT);
    var s1: BackPixel;
    var s2: BackPixel;
    var s3: BackPixel;
    var s4: BackPixel;
    var s5: BackPixel;
    var s6: BackPixel;
    var s7: BackPixel;
    if (PPT > 1u) { s1 = start_back_pixel(wid.xy, li + THREADS, b, slot, seg, 1u); }
    if (PPT > 2u) {
        s2 = start_back_pixel(wid.xy, li + 2u * THREADS, b, slot, seg, 2u);
        s3 = start_back_pixel(wid.xy, li + 3u * THREADS, b, slot, seg, 3u);
    }
    if (PPT > 4u) {
        s4 = start_back_pixel(wid.xy, li + 4u * THREADS, b, slot, seg, 4u);
        s5 = start_back_pixel(wid.xy, li + 5u * THREADS, b, slot, seg, 5u);
        s6 = start_back_pixel(wid.xy, li + 6u * THREADS, b, slot, seg, 6u);
        s7 = start_back_pixel(wid.xy, li + 7u * THREADS, b, slot, seg, 7u);
    }
    let pts = Points(s0.p, s1.p, s2.p, s3.p, s4.p, s5.p, s6.p, s7.p);  // (for composite_below)
    var end = seg_hi;
    loop {
        if (end <= seg_lo) { break; }
        let start = select(seg_lo, end - BSTAGE, end - seg_lo > BSTAGE);
        let n = end - start;
        workgroupBarrier();
        for (var q = li; q < n; q += THREADS) {
            let id = tile_list[w.list_base + start + q];
            stage_put(q, load_tri(sbase + id * TRI_FLOATS, frame), -w.reach);
            staged_id[q] = id;
        }
        workgroupBarrier();
        round_based = false;
        var k = n;  // entries 0..k-1 of the round are still to walk
        var j = 0u;  // slots stashed since the last flush
        var held = false;  // (DEFER_RECOMPOSE) `below` holds the canvas beneath entry k - 1
        var below: BelowPixels;
        loop {  // batches of KB entries from the top, each flushed once walked
            if (k == 0u) { break; }
            let lo = k - min(k, KB);
            j = 0u;
            loop {  // until the batch is walked; with DEFER_RECOMPOSE once more a re-composite
                loop {  // the batch's entries, top-down
                    if (k == lo) { break; }
                    var t = stage_get(k - 1u, -w.reach);
                    if (VECTOR_SKIP && VECTOR_VOTES && !held) {  // entries none of this vector's pixels reaches: zero sums
                        loop {
                            if (vector_any(block_touches(t, blk[0], blk[1], -w.reach))) { break; }
                            stash10(Grad10(vec4f(0.0), vec4f(0.0), vec2f(0.0)), li, sg, j, false, place);
                            j += 1u;
                            k -= 1u;
                            if (k == lo) { break; }
                            t = stage_get(k - 1u, -w.reach);
                        }
                        if (k == lo) { break; }
                    }
                    var h0 = entry_hit(s0, t, w);
                    var h1 = Hit();  // explicit: naga does not re-zero a loop-body var each iteration
                    var h2 = Hit();
                    var h3 = Hit();
                    var h4 = Hit();
                    var h5 = Hit();
                    var h6 = Hit();
                    var h7 = Hit();
                    var recompose = h0.recompose;
                    if (PPT > 1u) { h1 = entry_hit(s1, t, w); recompose = recompose || h1.recompose; }
                    if (PPT > 2u) {
                        h2 = entry_hit(s2, t, w);
                        h3 = entry_hit(s3, t, w);
                        recompose = recompose || h2.recompose || h3.recompose;
                    }
                    if (PPT > 4u) {
                        h4 = entry_hit(s4, t, w);
                        h5 = entry_hit(s5, t, w);
                        h6 = entry_hit(s6, t, w);
                        h7 = entry_hit(s7, t, w);
                        recompose = recompose || h4.recompose || h5.recompose || h6.recompose || h7.recompose;
                    }
                    recompose = shared_any(recompose);  // (a lane that does not need it takes none of it)
                    if (DEFER_RECOMPOSE) {
                        if (recompose && !held) { break; }  // (re-composited below, then this entry again)
                        if (held) { take_below(&h0, &h1, &h2, &h3, &h4, &h5, &h6, &h7, below); }
                        held = false;
                    } else if (recompose) {
                        let c = composite_below(w, start + k - 1u, start, pts, sg);
                        take_below(&h0, &h1, &h2, &h3, &h4, &h5, &h6, &h7, c);
                    }
                    var g = entry_grad(&s0, t, h0, w);
                    if (PPT > 1u) { g = add_grad(g, entry_grad(&s1, t, h1, w)); }
                    if (PPT > 2u) { g = add_grad(g, add_grad(entry_grad(&s2, t, h2, w), entry_grad(&s3, t, h3, w))); }
                    if (PPT > 4u) {
                        g = add_grad(g, add_grad(add_grad(entry_grad(&s4, t, h4, w), entry_grad(&s5, t, h5, w)),
                                                 add_grad(entry_grad(&s6, t, h6, w), entry_grad(&s7, t, h7, w))));
                    }
                    let any_hit = h0.hit || h1.hit || h2.hit || h3.hit || h4.hit || h5.hit || h6.hit || h7.hit;
                    stash10(g, li, sg, j, any_hit, place);
                    j += 1u;
                    k -= 1u;
                }
                if (k == lo) { break; }
                // (DEFER_RECOMPOSE: this subgroup paused at entry k - 1) out of the loop over entries,
                // where llvmpipe would run it at every entry whether or not a lane takes it
                below = composite_below(w, start + k - 1u, start, pts, sg);
                held = true;
            }
            workgroupBarrier();  // (uniform: every thread walks the batch) flush the stashed slots
            // slot q holds staged entry lo + (j - 1 - q): entries are stashed top-down
            for (var q = li; q < 10u * j; q += THREADS) {
                partial[part_base + staged_id[lo + j - 1u - q / 10u] * 10u + q % 10u] = gather(q, sg);
            }
            workgroupBarrier();
        }
        end = start;
        var live = s0.live;
        if (PPT > 1u) { live = live || s1.live; }
        if (PPT > 2u) { live = live || s2.live || s3.live; }
        if (PPT > 4u) { live = live || s4.live || s5.live || s6.live || s7.live; }
        if (round_all_done(li, live)) { break; }
    }
    // Entries below an early stop are hidden: their gradients are zero (the reduce reads every
    // listed entry, so write them).
    for (var q = seg_lo + li; q < end; q += THREADS) {
        let id = tile_list[w.list_base + q];
        for (var c = 0u; c < 10u; c++) { partial[part_base + id * 10u + c] = 0.0; }
    }
    // Background: dL/dbg = T_0 G, with T_0 the transmittance of the whole list (bottom segment).
    if (seg != bottom_seg) { return; }
    var v = s0.trans * s0.G;
    if (PPT > 1u) { v += s1.trans * s1.G; }
    if (PPT > 2u) { v += s2.trans * s2.G + s3.trans * s3.G; }
    if (PPT > 4u) { v += (s4.trans * s4.G + s5.trans * s5.G) + (s6.trans * s6.G + s7.trans * s7.G); }
    v *= f32(!sums_costs());  // (no cost for the background, at any of the thread's pixels)
    stash10(Grad10(vec4f(v, 0.0), vec4f(0.0), vec2f(0.0)), li, sg, 0u, true, place);
    workgroupBarrier();
    if (li < 10u) { partial[part_base + frame.n_tris * 10u + li] = gather(li, sg); }
}
