// Staging for several pixels a thread (CPU adapters): the plain record is staged and each thread
// sets it up once for its PPT pixels. There a workgroup-memory read costs a gather per lane, so
// the smaller record is cheaper to stage and read than the set-up one (docs/PERFORMANCE.md).
// Adapters with subgroups of at least 8 read it shared over the subgroup (stage_tri_shared.wgsl).
alias Staged = TriPx;
const STAGED_SLOTS: u32 = 1u;

// the backward re-composites from the background each time (backward.wgsl composite_below)
const ROUND_BASE: bool = false;

fn stage_begin() {}

fn stage_put(q: u32, t: TriPx, reach: f32) {
    staged[q] = t;
}

fn stage_get(q: u32, reach: f32) -> TriSetup {
    return setup_tri(staged[q], reach);
}

fn stage_break(thread_done: bool) -> bool {
    return thread_done;
}

// (no vote over a subgroup here: the walks skip no entries, VECTOR_SKIP)
const VECTOR_VOTES: bool = false;
fn vector_any(x: bool) -> bool { return x; }
