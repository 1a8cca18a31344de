// Which triangles stopped contributing (the respawn rule, render/strategy.py stopped_contributing):
// opacity under the respawn threshold, or under 1 px^2 of opacity-weighted area on the frame.
// Read from the scene records the fit loop materialised, so the state stays on the device.
// Dispatch (ceil(n_tris / 64), batch, 1).

@group(0) @binding(0) var<uniform> frame: Frame;
@group(0) @binding(1) var<storage, read> scene: array<f32>;
@group(0) @binding(2) var<storage, read> args: array<f32>;       // respawn alpha, frame width, height (px)
@group(0) @binding(3) var<storage, read_write> flags: array<u32>; // (B, n_tris): 1 = stopped contributing

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3u) {
    let t = gid.x;
    let b = gid.y;
    if (t >= frame.n_tris) {
        return;
    }
    let r = record_tri(b, t, frame);
    let size = vec2f(args[1], args[2]);
    let v0 = clamp(vec2f(scene[r], scene[r + 1u]), vec2f(0.0), vec2f(1.0)) * size;
    let v1 = clamp(vec2f(scene[r + 2u], scene[r + 3u]), vec2f(0.0), vec2f(1.0)) * size;
    let v2 = clamp(vec2f(scene[r + 4u], scene[r + 5u]), vec2f(0.0), vec2f(1.0)) * size;
    let e1 = v1 - v0;
    let e2 = v2 - v0;
    let a = scene[r + 9u];
    let useful = a * 0.5 * abs(e1.x * e2.y - e1.y * e2.x);
    let dead = a < args[0] || useful / max(a, 1e-9) < 1.0;
    flags[b * frame.n_tris + t] = select(0u, 1u, dead);
}
