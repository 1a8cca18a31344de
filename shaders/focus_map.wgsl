// A focus map: per-pixel loss weights (render/focus.py), the weighted variant of forward.wgsl and
// backward.wgsl (render/gpu/shaders.py picks this piece or focus_none.wgsl). The including kernel
// names the binding (WEIGHTS_BINDING, its first free one). The host writes weights scaled by
// N / sum(w) for a loss, so the loss record's 1 / (3 N) gives the weighted mean; for removal
// costs, the weights as they are.

@group(0) @binding(WEIGHTS_BINDING) var<storage, read> weights: array<f32>;  // [b, y, x]

// Pixel o's (o = its first value's index) loss term and dL/dC, times its weight.
fn weigh_loss(o: u32, contrib: ptr<function, f32>, g: ptr<function, vec3f>) {
    let w = weights[o / 3u];
    *contrib *= w;
    *g *= w;
}

// How much the weighted squared error at the pixel centred at p (image b) grows when delta is
// taken off it. The forward weighted dL/dC, so residual is already w (render - target).
fn removal_cost(p: vec2f, b: u32, delta: vec3f, residual: vec3f) -> f32 {
    let w = weights[(b * frame.height + u32(p.y)) * frame.width + u32(p.x)];
    return w * dot(delta, delta) - 2.0 * dot(residual, delta);
}
