// The walks' early stop where a thread walks several pixels (CPU adapters; forward_walk.wgsl,
// backward_walk.wgsl). llvmpipe runs an atomic under a branch as a loop over its lanes whether or not
// any lane takes it, so an atomic as each pixel's walk ends cost every (pixel, entry) pair that loop
// (docs/PERFORMANCE.md, "What llvmpipe runs under a branch"). Instead, after each staged round a
// thread with a pixel still walking counts itself into n_walk once, and the count restarts.

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
