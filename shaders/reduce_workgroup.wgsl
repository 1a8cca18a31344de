// The portable fallback of reduce_subgroup.wgsl (adapters without subgroup operations):
// stash10() sums the ten values over the workgroup at once with a fixed tree in workgroup memory
// (eight halving steps) and parks the totals under slot j; gather() reads them back.

struct SgIn {
    @builtin(local_invocation_id) unused: vec3u,
}

var<workgroup> red: array<f32, 2560>;  // 10 x 256
var<workgroup> res: array<f32, KB * 10u>;

fn stash10(g: array<f32, 10>, li: u32, sg: SgIn, j: u32) {
    workgroupBarrier();  // the previous call's readers are done with `red`
    for (var c = 0u; c < 10u; c++) { red[c * WG + li] = g[c]; }
    workgroupBarrier();
    for (var off = WG / 2u; off > 0u; off = off / 2u) {
        if (li < off) {
            for (var c = 0u; c < 10u; c++) { red[c * WG + li] += red[c * WG + li + off]; }
        }
        workgroupBarrier();
    }
    if (li < 10u) { res[j * 10u + li] = red[li * WG]; }
}

fn gather(li: u32, sg: SgIn) -> f32 {
    return res[li];
}
