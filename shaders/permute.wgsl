// Triangles gathered on the device, for a respawn (in place: the old state is a copy made in the
// same submission) or a count change (from another loop's buffers, of old_tris triangles): new
// slot t of every image takes old slot source[t] (parameters, both Adam moments and the scene
// record), or fresh row -1 - source[t] (raw parameters and the record they materialise to, from
// the host; moments zero). The background comes along from the old layout; the record's sigma
// stays (the loop wrote the next iteration's).
// Dispatch (ceil((n_tris * 10 + 3) / 64), batch, 1).

@group(0) @binding(0) var<uniform> frame: Frame;
@group(0) @binding(1) var<storage, read_write> params: array<f32>;
@group(0) @binding(2) var<storage, read_write> moments: array<f32>;
@group(0) @binding(3) var<storage, read_write> scene: array<f32>;
@group(0) @binding(4) var<storage, read> old_params: array<f32>;
@group(0) @binding(5) var<storage, read> old_moments: array<f32>;
@group(0) @binding(6) var<storage, read> old_scene: array<f32>;
@group(0) @binding(7) var<storage, read> source: array<i32>;  // (B, n_tris)
@group(0) @binding(8) var<storage, read> fresh: array<f32>;   // (rows, FRESH_ROW): raw parameters, then record values
@group(0) @binding(9) var<storage, read> old_tris: array<u32>;  // [0]: the old layout's triangle count

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3u) {
    let k = gid.x;
    let b = gid.y;
    let tris = frame.n_tris * TRI_FLOATS;
    if (k >= tris + 3u) {
        return;
    }
    let n = tris + 3u;
    let dst = b * n + k;
    let rec = b * frame.scene_stride + k;  // (a triangle's value, or the background's: record_tri's layout)
    let old_n = old_tris[0] * TRI_FLOATS + 3u;
    let old_stride = old_tris[0] * TRI_FLOATS + RECORD_TAIL;
    var e = old_tris[0] * TRI_FLOATS + (k - min(k, tris));  // the background's place in the old layout
    if (k < tris) {
        let s = source[b * frame.n_tris + k / TRI_FLOATS];
        if (s < 0) {
            let j = u32(-1 - s);
            let c = k % TRI_FLOATS;
            params[dst] = fresh[j * FRESH_ROW + c];
            moments[2u * dst] = 0.0;
            moments[2u * dst + 1u] = 0.0;
            scene[rec] = fresh[j * FRESH_ROW + 10u + c];
            return;
        }
        e = u32(s) * TRI_FLOATS + k % TRI_FLOATS;
    }
    let src = b * old_n + e;
    params[dst] = old_params[src];
    moments[2u * dst] = old_moments[2u * src];
    moments[2u * dst + 1u] = old_moments[2u * src + 1u];
    scene[rec] = old_scene[b * old_stride + e];
}
