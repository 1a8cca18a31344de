// Staging for one pixel a thread (GPUs): each triangle is set up (common.wgsl TriSetup) once per
// tile, as it is staged, and its 256 pixels read the set-up record.
alias Staged = TriSetup;

// the backward keeps the canvas beneath a staged round (backward.wgsl composite_below)
const ROUND_BASE: bool = true;

// The walks' early stop (forward_walk.wgsl, backward_walk.wgsl): a pixel counts itself into n_walk
// as its walk ends -- rare, and a GPU branches around it -- and after a staged round the tile stops
// once every pixel has.
fn walk_ended() {
    atomicAdd(&n_walk, 1u);
}

fn round_all_done(li: u32, thread_live: bool) -> bool {
    workgroupBarrier();
    if (li == 0u) { all_done = select(0u, 1u, atomicLoad(&n_walk) == WG); }
    return workgroupUniformLoad(&all_done) == 1u;
}

fn stage_tri(t: TriPx, reach: f32) -> Staged {
    return setup_tri(t, reach);
}

fn staged_setup(s: Staged, reach: f32) -> TriSetup {
    return s;
}
