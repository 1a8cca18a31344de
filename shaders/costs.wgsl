// Removal costs alone: column 0 of the reduced sums, where the backward's removal-cost mode puts
// them, compacted so that a pruning event reads back 4 bytes a triangle, not a gradient row's 40.
// Dispatch (ceil(n_tris / 64), batch, 1).

@group(0) @binding(0) var<uniform> frame: Frame;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> costs: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3u) {
    let t = gid.x;
    let b = gid.y;
    if (t >= frame.n_tris) {
        return;
    }
    costs[b * frame.n_tris + t] = grad[(b * (frame.n_tris + 1u) + t) * 10u];
}
