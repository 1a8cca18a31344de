// The loss of one iteration into the loss ring, shared by loss_reduce.wgsl (its own dispatch: a loss
// without a gradient), reduce.wgsl (the engine's loss and gradient) and adam.wgsl (the fit loop):
// in those two, workgroup (0, b) of the gradient reduction's dispatch does it, a dispatch fewer.
// The including kernel declares frame, loss_partial, state and ring.
//
// Sums image b's tiles' partial losses in a fixed order (strided per thread, then a fixed tree) and
// writes the mean at slot state.iter % ring_len. A scene record with a number that is not finite
// has a NaN partial (forward_walk.wgsl checks it), so its loss is NaN. Call from uniform control
// flow with all WG threads of a workgroup.

var<workgroup> loss_red: array<f32, WG>;

fn record_loss(b: u32, li: u32) {
    var s = 0.0;
    for (var tile = li; tile < frame.n_tiles; tile += WG) {
        s += loss_partial[b * frame.n_tiles + tile];
    }
    loss_red[li] = s;
    workgroupBarrier();
    for (var off = WG / 2u; off > 0u; off = off / 2u) {
        if (li < off) { loss_red[li] += loss_red[li + off]; }
        workgroupBarrier();
    }
    if (li == 0u) {
        ring[b * frame.ring_len + state.iter % frame.ring_len] = loss_red[0] * frame.inv_values;
    }
}
