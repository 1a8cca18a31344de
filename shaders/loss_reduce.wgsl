// Per-image loss: one workgroup per image sums the tiles' partial losses into the loss ring
// (loss_record.wgsl: fixed order; NaN where the forward found a number of the scene record that is
// not finite), for a loss without a gradient: the fit loop's Adam dispatch and the engine's
// loss-and-gradient reduction sum it in a workgroup of their own instead.
// Dispatch: (batch, 1, 1).

@group(0) @binding(0) var<uniform> frame: Frame;
@group(0) @binding(1) var<storage, read> loss_partial: array<f32>;
@group(0) @binding(2) var<storage, read> state: State;
@group(0) @binding(3) var<storage, read_write> ring: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
    record_loss(wid.x, li);
}
