// The baseline forward (issue #4): one thread per pixel walks *every* triangle back to front,
// with no binning, no culling, no workgroup staging and no early stop -- the simplest correct
// kernel, kept so `trifit bench` can show what the tiled kernels buy.
// Dispatch: (ceil(W * H / 256), batch).

@group(0) @binding(0) var<uniform> frame: Frame;
// (binding 1, the scene records: the scene piece, scene_storage.wgsl / scene_uniform.wgsl)
@group(0) @binding(2) var<storage, read_write> image: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
    let b = wid.y;
    let k = wid.x * WG + li;
    if (k >= frame.width * frame.height) { return; }
    let pix = vec2u(k % frame.width, k / frame.width);
    let p = vec2f(pix) + vec2f(0.5);
    let sig = sigma_px(b, frame);
    var c = background(b, frame);
    for (var i = 0u; i < frame.n_tris; i++) {
        let t = load_tri(record_tri(b, i, frame), frame);
        let alpha = t.rgba.a * sigmoid(signed_distance(p, t) / sig);
        c = c * (1.0 - alpha) + t.rgba.rgb * alpha;
    }
    let o = ((b * frame.height + pix.y) * frame.width + pix.x) * 3u;
    image[o] = c.r;
    image[o + 1u] = c.g;
    image[o + 2u] = c.b;
}
