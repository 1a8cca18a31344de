// A respawn on the device: every image's triangles reordered in place -- new slot t takes old
// slot source[t] (parameters, both Adam moments and the scene record), or fresh row -1 - source[t]
// (raw parameters and the record they materialise to, from the host; moments zero). The background
// and the record's tail stay. The old state is a copy made in the same submission.
// Dispatch (ceil(n_tris * 10 / 64), batch, 1).

@group(0) @binding(0) var<uniform> frame: Frame;
@group(0) @binding(1) var<storage, read_write> params: array<f32>;
@group(0) @binding(2) var<storage, read_write> moments: array<f32>;
@group(0) @binding(3) var<storage, read_write> scene: array<f32>;
@group(0) @binding(4) var<storage, read> old_params: array<f32>;
@group(0) @binding(5) var<storage, read> old_moments: array<f32>;
@group(0) @binding(6) var<storage, read> old_scene: array<f32>;
@group(0) @binding(7) var<storage, read> source: array<i32>;  // (B, n_tris)
@group(0) @binding(8) var<storage, read> fresh: array<f32>;   // (rows, 20): raw parameters, then record values

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3u) {
    let k = gid.x;
    let b = gid.y;
    if (k >= frame.n_tris * TRI_FLOATS) {
        return;
    }
    let t = k / TRI_FLOATS;
    let c = k % TRI_FLOATS;
    let n = frame.n_tris * TRI_FLOATS + 3u;
    let dst = b * n + k;
    let s = source[b * frame.n_tris + t];
    let rec = record_tri(b, t, frame) + c;
    if (s >= 0) {
        let src = b * n + u32(s) * TRI_FLOATS + c;
        params[dst] = old_params[src];
        moments[2u * dst] = old_moments[2u * src];
        moments[2u * dst + 1u] = old_moments[2u * src + 1u];
        scene[rec] = old_scene[record_tri(b, u32(s), frame) + c];
    } else {
        let j = u32(-1 - s);
        params[dst] = fresh[j * 20u + c];
        moments[2u * dst] = 0.0;
        moments[2u * dst + 1u] = 0.0;
        scene[rec] = fresh[j * 20u + 10u + c];
    }
}
