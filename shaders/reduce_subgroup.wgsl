// Workgroup sums of ten values per thread, batched: stash10() adds each value over the subgroup
// and parks the subgroup totals in workgroup memory under slot j; after a barrier, gather() lets
// thread li < 10 * slots add one (slot, value) pair over the subgroups in a fixed order. One
// barrier pair serves KB triangles.
// The subgroup sum is a transposing butterfly: at each of the first SG_SPLITS exchange steps
// (lane bit 0, 1, 2, 3) a lane keeps half of the values it holds and sends its partner the other
// half, 10 -> 5 -> 3 -> 2 -> 1 values (padded where odd), then plain exchange-adds of what it
// holds cover the subgroup's remaining lane bits (render/gpu/shaders.py picks as many splits as
// the probed size has lane bits, up to 4; tests compile fewer). On a 32-lane subgroup that is 12 shuffles where ten
// subgroupAdd()s are 50, and the shuffles were most of the backward's reduction
// (docs/PERFORMANCE.md). Afterwards lane l holds the totals of the values held_value(l, k) names.
// SG_SPLITS = 0 (the subgroup size is not known) adds with subgroupAdd() instead.
// A subgroup none of whose threads has a value (`live` false on every lane: the entry's triangle
// is out of reach of all its pixels, whose values are then zeros) parks zeros without the adds --
// the same bits, since the adds of zeros give zero.

struct SgIn {
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_id) id: u32,
    @builtin(num_subgroups) count: u32,
}

// MAX_SUBGROUPS (THREADS / the probed subgroup size), SG_SIZE (that size) and SG_SPLITS are
// prepended by render/gpu/shaders.py. Layout: [slot, value, subgroup].
var<workgroup> red: array<f32, KB * 10u * MAX_SUBGROUPS>;

const PAD: u32 = 10u;  // held_value() of a slot that holds padding

// Which of the ten values the k-th total a lane holds after the splits is (PAD for padding):
// the splits' keep rules read backwards from the last.
fn held_value(lane: u32, k: u32) -> u32 {
    var p = k;
    if (SG_SPLITS >= 4u) { p = (lane >> 3u) & 1u; }               // position in the 2-list
    if (SG_SPLITS >= 3u) {                                          // ... in the 3-list
        let hi = ((lane >> 2u) & 1u) == 1u;
        if (hi && p == 1u) { return PAD; }
        p = select(p, 2u, hi);
    }
    if (SG_SPLITS >= 2u) {                                          // ... in the 5-list
        let hi = ((lane >> 1u) & 1u) == 1u;
        if (hi && p == 2u) { return PAD; }
        p = select(select(p, 4u, p == 2u), p + 2u, hi);
    }
    if (SG_SPLITS >= 1u) {                                          // ... in the ten values
        let hi = (lane & 1u) == 1u;
        return select(p, 8u, p == 4u) + select(0u, select(4u, 1u, p == 4u), hi);
    }
    return p;
}

fn park(j: u32, sg: SgIn, k: u32, total: f32) {
    let v = held_value(sg.lane, k);
    if (v != PAD) { red[(j * 10u + v) * MAX_SUBGROUPS + sg.id] = total; }
}

const NO_PLACE: u32 = 0xffffffffu;

// Where a lane parks its total after the fourth split, computed once a kernel (the caller passes
// it to every stash10): its place in a slot of `red`, or NO_PLACE for a lane that parks nothing.
fn park_place(sg: SgIn) -> u32 {
    let v = held_value(sg.lane, 0u);
    if (SG_SPLITS < 4u || (sg.lane >> 4u) != 0u || v == PAD) { return NO_PLACE; }
    return v * MAX_SUBGROUPS + sg.id;
}

fn stash10(g: Grad10, li: u32, sg: SgIn, j: u32, live: bool, place: u32) {
    let any_live = subgroupAny(live);
    if (SG_SPLITS == 0u) {
        var a = vec4f(0.0);
        var b = vec4f(0.0);
        var c = vec2f(0.0);
        if (any_live) {
            a = subgroupAdd(g.a);
            b = subgroupAdd(g.b);
            c = subgroupAdd(g.c);
        }
        if (sg.lane == 0u) {
            let o = j * 10u * MAX_SUBGROUPS + sg.id;
            for (var v = 0u; v < 4u; v++) {
                red[o + v * MAX_SUBGROUPS] = a[v];
                red[o + (4u + v) * MAX_SUBGROUPS] = b[v];
            }
            red[o + 8u * MAX_SUBGROUPS] = c.x;
            red[o + 9u * MAX_SUBGROUPS] = c.y;
        }
        return;
    }
    // split 1 (lane bit 0): the low lane keeps values 0-3 and 8, the high lane 4-7 and 9
    // (without a live lane every value is zero, and so is every sum: the exchanges are skipped)
    var h = (sg.lane & 1u) == 1u;
    var k4 = select(g.a, g.b, h);
    var k1 = select(g.c.x, g.c.y, h);
    if (any_live) {
        k4 += subgroupShuffleXor(select(g.b, g.a, h), 1u);
        k1 += subgroupShuffleXor(select(g.c.y, g.c.x, h), 1u);
    }
    if (SG_SPLITS == 1u) {
        if (any_live) {
            for (var off = 2u; off < SG_SIZE; off = off * 2u) {
                k4 += subgroupShuffleXor(k4, off);
                k1 += subgroupShuffleXor(k1, off);
            }
        }
        if ((sg.lane >> 1u) == 0u) {
            for (var v = 0u; v < 4u; v++) { park(j, sg, v, k4[v]); }
            park(j, sg, 4u, k1);
        }
        return;
    }
    // split 2 (bit 1): low keeps (0, 1, 4) of the 5-list, high (2, 3, padding)
    h = ((sg.lane >> 1u) & 1u) == 1u;
    let lo3 = vec3f(k4.xy, k1);
    let hi3 = vec3f(k4.zw, 0.0);
    var k3 = select(lo3, hi3, h);
    if (any_live) { k3 += subgroupShuffleXor(select(hi3, lo3, h), 2u); }
    if (SG_SPLITS == 2u) {
        if (any_live) { for (var off = 4u; off < SG_SIZE; off = off * 2u) { k3 += subgroupShuffleXor(k3, off); } }
        if ((sg.lane >> 2u) == 0u) { for (var v = 0u; v < 3u; v++) { park(j, sg, v, k3[v]); } }
        return;
    }
    // split 3 (bit 2): low keeps (0, 1) of the 3-list, high (2, padding)
    h = ((sg.lane >> 2u) & 1u) == 1u;
    let lo2 = k3.xy;
    let hi2 = vec2f(k3.z, 0.0);
    var k2 = select(lo2, hi2, h);
    if (any_live) { k2 += subgroupShuffleXor(select(hi2, lo2, h), 4u); }
    if (SG_SPLITS == 3u) {
        if (any_live) { for (var off = 8u; off < SG_SIZE; off = off * 2u) { k2 += subgroupShuffleXor(k2, off); } }
        if ((sg.lane >> 3u) == 0u) { park(j, sg, 0u, k2.x); park(j, sg, 1u, k2.y); }
        return;
    }
    // split 4 (bit 3): low keeps the first of the 2-list, high the second
    h = ((sg.lane >> 3u) & 1u) == 1u;
    var t = select(k2.x, k2.y, h);
    if (any_live) {
        t += subgroupShuffleXor(select(k2.y, k2.x, h), 8u);
        // the remaining lane bits: every lane of a bit pattern holds the same value
        for (var off = 16u; off < SG_SIZE; off = off * 2u) { t += subgroupShuffleXor(t, off); }
    }
    if (place != NO_PLACE) { red[j * 10u * MAX_SUBGROUPS + place] = t; }
}

// The backward's reads that every lane of a subgroup makes alike, where llvmpipe would run a loop
// over its lanes for each float read (docs/PERFORMANCE.md, "What llvmpipe runs under a branch"):
// on CPU adapters (PPT > 1, subgroups of at least 8) lane l reads float l of the record (and lanes
// 0-1 floats 8-9) and the subgroup shares them. The caller keeps every lane of the subgroup active
// (shared_any). GPUs read the record as it is.
fn load_tri_shared(base: u32, sg: SgIn) -> TriPx {
    if (PPT == 1u || SG_SIZE < 8u) { return load_tri(base, frame); }
    let lo = scene_at(base + min(sg.lane, 7u));
    let hi = scene_at(base + 8u + (sg.lane & 1u));
    return tri_record(vec4f(subgroupBroadcast(lo, 0u), subgroupBroadcast(lo, 1u), subgroupBroadcast(lo, 2u),
                            subgroupBroadcast(lo, 3u)),
                      vec4f(subgroupBroadcast(lo, 4u), subgroupBroadcast(lo, 5u), subgroupBroadcast(lo, 6u),
                            subgroupBroadcast(lo, 7u)),
                      vec2f(subgroupBroadcast(hi, 0u), subgroupBroadcast(hi, 1u)), frame);
}

// Whether any lane of the subgroup needs a load_tri_shared path, where it reads that way.
fn shared_any(x: bool) -> bool {
    if (PPT == 1u || SG_SIZE < 8u) { return x; }
    return subgroupAny(x);
}

// Call after a barrier, for q < 10 * slots: the total of value q % 10 of slot q / 10.
fn gather(q: u32, sg: SgIn) -> f32 {
    let base = q * MAX_SUBGROUPS;  // (slot * 10 + value) * MAX_SUBGROUPS
    var total = 0.0;
    for (var s = 0u; s < sg.count; s++) { total += red[base + s]; }
    return total;
}
