// Workgroup sums of ten values per thread, batched: stash10() adds each value over the subgroup
// (subgroup adds, for adapters with the `subgroup` feature) and parks the subgroup totals in
// workgroup memory under slot j; after a barrier, gather() lets thread li < 10 * slots add one
// (slot, value) pair over the subgroups in a fixed order. One barrier pair serves KB triangles.

struct SgIn {
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_id) id: u32,
    @builtin(num_subgroups) count: u32,
}

// MAX_SUBGROUPS (256 / the probed subgroup size) is prepended by render/gpu/shaders.py.
var<workgroup> red: array<f32, KB * 10u * MAX_SUBGROUPS>;

fn stash10(g: array<f32, 10>, li: u32, sg: SgIn, j: u32) {
    for (var c = 0u; c < 10u; c++) {
        let s = subgroupAdd(g[c]);
        if (sg.lane == 0u) { red[(j * 10u + c) * MAX_SUBGROUPS + sg.id] = s; }
    }
}

// Call after a barrier, from threads li < 10 * slots: the total of value li % 10 of slot li / 10.
fn gather(li: u32, sg: SgIn) -> f32 {
    var total = 0.0;
    for (var s = 0u; s < sg.count; s++) { total += red[li * MAX_SUBGROUPS + s]; }
    return total;
}
