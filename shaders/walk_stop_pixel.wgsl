// The walks' early stop where a thread walks one pixel (GPUs; forward_walk.wgsl, backward_walk.wgsl):
// a pixel counts itself into n_walk as its walk ends -- rare, and a GPU branches around it -- and
// after a staged round the tile stops once every pixel has.

fn walk_ended() {
    atomicAdd(&n_walk, 1u);
}

fn round_all_done(li: u32, thread_live: bool) -> bool {
    workgroupBarrier();
    if (li == 0u) { all_done = select(0u, 1u, atomicLoad(&n_walk) == WG); }
    return workgroupUniformLoad(&all_done) == 1u;
}
