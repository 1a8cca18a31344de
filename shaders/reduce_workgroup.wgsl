// The portable fallback of reduce_subgroup.wgsl (adapters without subgroup operations):
// stash10() sums the ten values over the workgroup at once with a fixed tree in workgroup memory
// (halving steps over THREADS) and parks the totals under slot j; gather() reads them back.

struct SgIn {
    @builtin(local_invocation_id) unused: vec3u,
}

var<workgroup> red: array<f32, 10u * THREADS>;  // [value, thread]
var<workgroup> res: array<f32, KB * 10u>;

fn park_place(sg: SgIn) -> u32 { return 0u; }  // (the subgroup variant's)

fn stash10(g: Grad10, li: u32, sg: SgIn, j: u32, live: bool, place: u32) {  // (`live`, `place`: the subgroup variant's)
    workgroupBarrier();  // the previous call's readers are done with `red`
    let v = array<f32, 10>(g.a.x, g.a.y, g.a.z, g.a.w, g.b.x, g.b.y, g.b.z, g.b.w, g.c.x, g.c.y);
    for (var c = 0u; c < 10u; c++) { red[c * THREADS + li] = v[c]; }
    workgroupBarrier();
    for (var off = THREADS / 2u; off > 0u; off = off / 2u) {
        if (li < off) {
            for (var c = 0u; c < 10u; c++) { red[c * THREADS + li] += red[c * THREADS + li + off]; }
        }
        workgroupBarrier();
    }
    if (li < 10u) { res[j * 10u + li] = red[li * THREADS]; }
}

fn load_tri_shared(base: u32, sg: SgIn) -> TriPx { return load_tri(base, frame); }  // (the subgroup variant's)

fn shared_any(x: bool) -> bool { return x; }

fn gather(q: u32, sg: SgIn) -> f32 {
    return res[q];
}
