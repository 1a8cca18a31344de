// Workgroup sum of ten values per thread without subgroup operations: a fixed tree in
// workgroup memory (eight halving steps). The portable fallback of reduce_subgroup.wgsl.

struct SgIn {
    @builtin(local_invocation_id) unused: vec3u,
}

var<workgroup> red: array<f32, 2560>;  // 10 x 256

fn reduce10(g: array<f32, 10>, li: u32, sg: SgIn, parity: u32) -> f32 {
    workgroupBarrier();  // the previous call's readers are done with `red`
    for (var k = 0u; k < 10u; k++) { red[k * WG + li] = g[k]; }
    workgroupBarrier();
    for (var off = WG / 2u; off > 0u; off = off / 2u) {
        if (li < off) {
            for (var k = 0u; k < 10u; k++) { red[k * WG + li] += red[k * WG + li + off]; }
        }
        workgroupBarrier();
    }
    return select(0.0, red[min(li, 9u) * WG], li < 10u);
}
