// Read access to the scene buffer for the rasterising kernels (bin, forward, backward, render,
// naive_forward), which declare `scene` (group 0, binding 1). The record's layout: render/gpu/
// layouts.py SceneRecord, whose generated record_* functions give the indices.
// (naga does not allow storage pointers as function arguments, so these read the global.)

fn load_tri(base: u32, frame: Frame) -> TriPx {
    var t: TriPx;
    let w = f32(frame.width);
    let h = f32(frame.height);
    t.p0 = vec2f(scene[base + 0u] * w, scene[base + 1u] * h);
    t.p1 = vec2f(scene[base + 2u] * w, scene[base + 3u] * h);
    t.p2 = vec2f(scene[base + 4u] * w, scene[base + 5u] * h);
    t.rgba = vec4f(scene[base + 6u], scene[base + 7u], scene[base + 8u], scene[base + 9u]);
    let e1 = t.p1 - t.p0;
    let e2 = t.p2 - t.p0;
    t.orient = sign(e1.x * e2.y - e1.y * e2.x);
    return t;
}

fn sigma_px(b: u32, frame: Frame) -> f32 {
    let s = scene[record_sigma(b, frame)];
    return s * f32(min(frame.width, frame.height));
}

fn background(b: u32, frame: Frame) -> vec3f {
    let o = record_background(b, frame);
    return vec3f(scene[o], scene[o + 1u], scene[o + 2u]);
}

