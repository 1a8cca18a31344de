// Workgroup sum of ten values per thread, with subgroup adds (adapters with the `subgroup`
// feature). Subgroup totals go to workgroup memory, double-buffered by `parity` so that one
// barrier per call suffices; thread li < 10 then sums the subgroups in a fixed order.

struct SgIn {
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_id) id: u32,
    @builtin(num_subgroups) count: u32,
}

const MAX_SUBGROUPS: u32 = 64u;  // 256 threads / smallest subgroup size (4)
var<workgroup> red: array<f32, 1280>;  // 2 parities x MAX_SUBGROUPS x 10

fn reduce10(g: array<f32, 10>, li: u32, sg: SgIn, parity: u32) -> f32 {
    var s: array<f32, 10>;
    for (var k = 0u; k < 10u; k++) { s[k] = subgroupAdd(g[k]); }
    let base = (parity * MAX_SUBGROUPS + sg.id) * 10u;
    if (sg.lane == 0u) {
        for (var k = 0u; k < 10u; k++) { red[base + k] = s[k]; }
    }
    workgroupBarrier();
    var total = 0.0;
    if (li < 10u) {
        for (var j = 0u; j < sg.count; j++) { total += red[(parity * MAX_SUBGROUPS + j) * 10u + li]; }
    }
    return total;
}
