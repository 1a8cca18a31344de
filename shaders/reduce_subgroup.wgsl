// Workgroup sums of ten values per thread, batched: stash10() adds each value over the subgroup
// (subgroup adds, for adapters with the `subgroup` feature) and parks the subgroup totals in
// workgroup memory under slot j; after a barrier, gather() lets thread li < 10 * slots add one
// (slot, value) pair over the subgroups in a fixed order. One barrier pair serves KB triangles.
// A subgroup none of whose threads has a value (`live` false on every lane: the entry's triangle
// is out of reach of all its pixels, whose values are then zeros) parks zeros without the adds --
// the same bits, since the adds of zeros give zero.

struct SgIn {
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_id) id: u32,
    @builtin(num_subgroups) count: u32,
}

// MAX_SUBGROUPS (THREADS / the probed subgroup size) is prepended by render/gpu/shaders.py.
// Layout: [slot, quarter (values 0-3, 4-7, 8-9), subgroup].
var<workgroup> red: array<vec4f, KB * 3u * MAX_SUBGROUPS>;

fn stash10(g: Grad10, li: u32, sg: SgIn, j: u32, live: bool) {
    var a = vec4f(0.0);
    var b = vec4f(0.0);
    var c = vec2f(0.0);
    if (subgroupAny(live)) {
        a = subgroupAdd(g.a);
        b = subgroupAdd(g.b);
        c = subgroupAdd(g.c);
    }
    if (sg.lane == 0u) {
        let o = j * 3u * MAX_SUBGROUPS + sg.id;
        red[o] = a;
        red[o + MAX_SUBGROUPS] = b;
        red[o + 2u * MAX_SUBGROUPS] = vec4f(c, 0.0, 0.0);
    }
}

// Call after a barrier, for q < 10 * slots: the total of value q % 10 of slot q / 10.
fn gather(q: u32, sg: SgIn) -> f32 {
    let c = q % 10u;
    let base = ((q / 10u) * 3u + c / 4u) * MAX_SUBGROUPS;
    var total = 0.0;
    for (var s = 0u; s < sg.count; s++) { total += red[base + s][c % 4u]; }
    return total;
}
