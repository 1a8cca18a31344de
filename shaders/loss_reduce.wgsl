// Per-image loss: one workgroup per image sums the tiles' partial losses (strided, then a fixed
// tree) and writes the mean to the loss ring at slot state.iter % ring_len. It also checks that
// every number of the image's scene record is finite and reports a NaN loss when one is not:
// binning silently drops a triangle with a NaN vertex, so the loss alone would never show it,
// and the fitter's rollback keys on a non-finite loss.
// Dispatch: (batch, 1, 1).

@group(0) @binding(0) var<uniform> frame: Frame;
@group(0) @binding(1) var<storage, read> loss_partial: array<f32>;
@group(0) @binding(2) var<storage, read> state: State;
@group(0) @binding(3) var<storage, read_write> ring: array<f32>;
@group(0) @binding(4) var<storage, read> scene: array<f32>;

var<workgroup> red: array<f32, 256>;
var<workgroup> bad: atomic<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
    let b = wid.x;
    if (li == 0u) { atomicStore(&bad, 0u); }
    workgroupBarrier();
    for (var i = li; i < frame.scene_stride; i += WG) {
        let v = scene[b * frame.scene_stride + i];
        if (!(abs(v) <= 3.0e38)) { atomicOr(&bad, 1u); }  // false for NaN and inf
    }
    var s = 0.0;
    for (var tile = li; tile < frame.n_tiles; tile += WG) {
        s += loss_partial[b * frame.n_tiles + tile];
    }
    red[li] = s;
    workgroupBarrier();
    for (var off = WG / 2u; off > 0u; off = off / 2u) {
        if (li < off) { red[li] += red[li + off]; }
        workgroupBarrier();
    }
    if (li == 0u) {
        var loss = red[0] * frame.inv_values;
        if (atomicLoad(&bad) != 0u) { loss = bitcast<f32>(0x7fc00000u); }  // quiet NaN
        ring[b * frame.ring_len + state.iter % frame.ring_len] = loss;
    }
}
