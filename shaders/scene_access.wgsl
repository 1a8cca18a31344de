// Read access to the scene buffer for the rasterising kernels (bin, forward, backward, render,
// naive_forward), whose scene piece binds it (group 0, binding 1) and reads a float with scene_at
// (scene_storage.wgsl, scene_uniform.wgsl). The record's layout: render/gpu/layouts.py SceneRecord,
// whose generated record_* functions give the indices.

fn load_tri(base: u32, frame: Frame) -> TriPx {
    return tri_record(vec4f(scene_at(base), scene_at(base + 1u), scene_at(base + 2u), scene_at(base + 3u)),
                      vec4f(scene_at(base + 4u), scene_at(base + 5u), scene_at(base + 6u), scene_at(base + 7u)),
                      vec2f(scene_at(base + 8u), scene_at(base + 9u)), frame);
}

// A triangle from its record's ten floats (x0, y0, x1, y1), (x2, y2, r, g), (b, a).
fn tri_record(a: vec4f, b: vec4f, c: vec2f, frame: Frame) -> TriPx {
    var t: TriPx;
    let w = f32(frame.width);
    let h = f32(frame.height);
    t.p0 = vec2f(a.x * w, a.y * h);
    t.p1 = vec2f(a.z * w, a.w * h);
    t.p2 = vec2f(b.x * w, b.y * h);
    t.rgba = vec4f(b.zw, c);
    let e1 = t.p1 - t.p0;
    let e2 = t.p2 - t.p0;
    t.orient = sign(e1.x * e2.y - e1.y * e2.x);
    return t;
}

fn sigma_px(b: u32, frame: Frame) -> f32 {
    let s = scene_at(record_sigma(b, frame));
    return s * f32(min(frame.width, frame.height));
}

fn background(b: u32, frame: Frame) -> vec3f {
    let o = record_background(b, frame);
    return vec3f(scene_at(o), scene_at(o + 1u), scene_at(o + 2u));
}

