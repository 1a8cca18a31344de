// Staging for several pixels a thread (CPU adapters) with subgroups of at least 8: the plain record,
// staged as three vec4 (p0 p1, p2 orient, rgba), and read shared over the subgroup. Every lane of a
// subgroup reads the same record, and llvmpipe would loop over the lanes for each field it reads;
// here lane l of lanes 0-2 reads vec4 l and subgroupBroadcast shares them (docs/PERFORMANCE.md, "What
// llvmpipe runs under a branch"). llvmpipe's loop visits every lane and loads only for active ones,
// so the other lanes are left out of the read rather than reading the third again ("Staged records
// read by three lanes"). The same floats as stage_tri.wgsl, so
// the same set-up. Every lane of the subgroup must read: the forward's loop over entries stops only
// when every lane's pixels are done (stage_break).
alias Staged = vec4f;
const STAGED_SLOTS: u32 = 3u;

const ROUND_BASE: bool = false;

var<private> stage_lane: u32;

// At the walk's start, with every lane active: this lane's index in its subgroup.
fn stage_begin() {
    stage_lane = subgroupExclusiveAdd(1u);
}

fn stage_put(q: u32, t: TriPx, reach: f32) {
    staged[q * 3u] = vec4f(t.p0, t.p1);
    staged[q * 3u + 1u] = vec4f(t.p2, t.orient, t._pad);
    staged[q * 3u + 2u] = t.rgba;
}

fn stage_get(q: u32, reach: f32) -> TriSetup {
    var v = vec4f(0.0);  // (lanes 3 and on: broadcast nothing)
    if (stage_lane < 3u) { v = staged[q * 3u + stage_lane]; }
    let a = subgroupBroadcast(v, 0u);
    let b = subgroupBroadcast(v, 1u);
    return setup_tri(TriPx(a.xy, a.zw, b.xy, b.z, b.w, subgroupBroadcast(v, 2u)), reach);
}

fn stage_break(thread_done: bool) -> bool {
    return subgroupAll(thread_done);
}

// The walks' vote for skipping an entry none of a vector's pixels reaches (VECTOR_SKIP: whether any
// lane of the subgroup needs it), where the subgroup is a vector of at least eight lanes.
const VECTOR_VOTES: bool = true;
fn vector_any(x: bool) -> bool { return subgroupAny(x); }
