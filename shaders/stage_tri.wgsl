// Staging for several pixels a thread (CPU adapters): the plain record is staged and each thread
// sets it up once for its PPT pixels. There a workgroup-memory read costs a gather per lane, so
// the smaller record is cheaper to stage and read than the set-up one (docs/PERFORMANCE.md).
alias Staged = TriPx;

// the backward re-composites from the background each time (backward.wgsl composite_below)
const ROUND_BASE: bool = false;

// The walks' early stop (forward_walk.wgsl, backward_walk.wgsl): llvmpipe runs an atomic under a
// branch as a loop over its lanes whether or not any lane takes it, so an atomic as each pixel's walk
// ends cost every (pixel, entry) pair that loop. Instead, after each staged round a thread with a
// pixel still walking counts itself into n_walk once, and the count restarts for the next round.
fn walk_ended() {}

fn round_all_done(li: u32, thread_live: bool) -> bool {
    if (thread_live) { atomicAdd(&n_walk, 1u); }
    workgroupBarrier();
    if (li == 0u) {
        all_done = select(0u, 1u, atomicLoad(&n_walk) == 0u);
        atomicStore(&n_walk, 0u);  // (every thread has counted itself before the barrier)
    }
    return workgroupUniformLoad(&all_done) == 1u;
}

fn stage_tri(t: TriPx, reach: f32) -> Staged {
    return t;
}

fn staged_setup(s: Staged, reach: f32) -> TriSetup {
    return setup_tri(s, reach);
}
