// No focus map: every pixel's loss term counts fully. The unweighted variant of forward.wgsl and
// backward.wgsl (render/gpu/shaders.py picks this piece or focus_map.wgsl): the loss, dL/dC and
// the removal costs come out of the same arithmetic as if these functions were not there.

// Pixel o's (o = its first value's index) loss term and dL/dC, as they are.
fn weigh_loss(o: u32, contrib: ptr<function, f32>, g: ptr<function, vec3f>) {}

// How much the squared error at the pixel centred at p (image b) grows when delta is taken off
// it, with residual = render - target there: |delta|^2 - 2 residual . delta.
fn removal_cost(p: vec2f, b: u32, delta: vec3f, residual: vec3f) -> f32 {
    return dot(delta, delta) - 2.0 * dot(residual, delta);
}
