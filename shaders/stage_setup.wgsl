// Staging for one pixel a thread (GPUs): each triangle is set up (common.wgsl TriSetup) once per
// tile, as it is staged, and its 256 pixels read the set-up record. The walks stage with stage_put
// and read with stage_get into `staged` (STAGED_SLOTS Staged a record), which they declare.
alias Staged = TriSetup;
const STAGED_SLOTS: u32 = 1u;

// the backward keeps the canvas beneath a staged round (backward.wgsl composite_below)
const ROUND_BASE: bool = true;

fn stage_begin() {}

fn stage_put(q: u32, t: TriPx, reach: f32) {
    staged[q] = setup_tri(t, reach);
}

fn stage_get(q: u32, reach: f32) -> TriSetup {
    return staged[q];
}

// Whether the forward's one-entry loop stops for a thread whose pixels are all done.
fn stage_break(thread_done: bool) -> bool {
    return thread_done;
}

// (no vote over a subgroup here: the walks skip no entries, VECTOR_SKIP)
const VECTOR_VOTES: bool = false;
fn vector_any(x: bool) -> bool { return x; }
