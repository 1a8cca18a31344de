// The loss of one iteration into the loss ring, shared by loss_reduce.wgsl (its own dispatch: a loss
// without a gradient), reduce.wgsl (the engine's loss and gradient) and adam.wgsl (the fit loop):
// in those two, workgroup (0, b) of the gradient reduction's dispatch does it, a dispatch fewer.
// The including kernel declares frame, scene, loss_partial, state and ring.
//
// Sums image b's tiles' partial losses in a fixed order (strided per thread, then a fixed tree) and
// writes the mean at slot state.iter % ring_len. It also checks that every number of the image's
// scene record is finite and reports a NaN loss when one is not: binning silently drops a triangle
// with a NaN vertex, so the loss alone would never show it, and the fitter's rollback keys on a
// non-finite loss. Call from uniform control flow with all WG threads of a workgroup.

var<workgroup> loss_red: array<f32, WG>;
var<workgroup> loss_bad: atomic<u32>;

fn record_loss(b: u32, li: u32) {
    if (li == 0u) { atomicStore(&loss_bad, 0u); }
    workgroupBarrier();
    for (var i = li; i < frame.scene_stride; i += WG) {
        let v = scene[b * frame.scene_stride + i];
        if (!(abs(v) <= 3.0e38)) { atomicOr(&loss_bad, 1u); }  // false for NaN and inf
    }
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
        var loss = loss_red[0] * frame.inv_values;
        if (atomicLoad(&loss_bad) != 0u) { loss = bitcast<f32>(0x7fc00000u); }  // quiet NaN
        ring[b * frame.ring_len + state.iter % frame.ring_len] = loss;
    }
}
