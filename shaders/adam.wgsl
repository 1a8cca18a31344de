// Fitter: fused gradient reduction + Adam step, one thread per raw parameter.
// Raw parameters: vertex coordinates as they are; colours, opacities and the background as
// logits (value = sigmoid(raw)), so every value stays in range by construction. The step
// writes the raw parameter, its moments, and the materialised scene value the next forward reads.
// One more workgroup, (0, b), the first of the dispatch, ends image b's iteration: it writes the
// loss into the loss ring (loss_record.wgsl; a dispatch of its own would add a launch and a barrier
// every iteration), then the next iteration's sigma into the scene record (schedule.wgsl; no Adam
// thread writes that slot, and this iteration's binning, forward and backward have read it). It is
// a workgroup of its own, not a reduction's, so that its loss tree runs beside the reductions
// instead of before one of them: at small sizes that workgroup was the dispatch's longest. And it
// is the first, so that it starts with the first wave (docs/PERFORMANCE.md, "The loss's sum in the
// reduction's first workgroup"). Workgroup (x + 1, b) takes reduce_param.wgsl's slots of x.
// A number this step makes non-finite is reported by the next iteration's forward, which checks
// the record it reads (forward_walk.wgsl), as the host loop does (render/fitloop.py).
// A locked triangle (locked[b * n_tris + i] != 0) keeps its parameters, moments and scene record
// to the bit: its threads end after the reduction, which every thread of the workgroup shares.
// An anchor (anchor[b, triangle, k] = (value, weight); render/gpu/fitloop.py set_anchor) adds the
// gradient of weight * (value now - anchored value)^2 to the loss's, on the value before the chain
// rule through the sigmoid (reference.anchor_penalty); a zero weight leaves the arithmetic as it is.
// A triangle smaller than opt.small_px moves its vertices at a rate in proportion to its size
// (small_rate; FitSettings.small_triangle_px).
// Dispatch: (1 + reduce_groups(n_tris, ppt) in render/gpu/workspace.py, batch); the reduction is reduce_param.wgsl's.
// (struct Optim: render/gpu/layouts.py OPTIM, generated.)

@group(0) @binding(0) var<uniform> frame: Frame;
@group(0) @binding(1) var<uniform> opt: Optim;
@group(0) @binding(2) var<storage, read> partial: array<f32>;
@group(0) @binding(3) var<storage, read> tile_mask: array<u32>;
@group(0) @binding(4) var<storage, read> state: State;
@group(0) @binding(5) var<storage, read_write> params: array<f32>;
@group(0) @binding(6) var<storage, read_write> moments: array<f32>;
@group(0) @binding(7) var<storage, read_write> scene: array<f32>;
@group(0) @binding(8) var<storage, read> loss_partial: array<f32>;
@group(0) @binding(9) var<storage, read_write> ring: array<f32>;
@group(0) @binding(10) var<uniform> sched: Schedule;
@group(0) @binding(11) var<storage, read> sigma_end: array<f32>;  // each image's final sigma
@group(0) @binding(12) var<storage, read> locked: array<u32>;  // [b, triangle]: 1 = locked
@group(0) @binding(13) var<storage, read> anchor: array<vec2f>;  // [b, triangle, k]: (value, weight)
@group(0) @binding(14) var<storage, read> tri_tiles: array<vec2u>;  // binning's tile ranges

// A triangle's vertex rate factor (FitSettings.small_triangle_px): its size s, the square root of
// its area in pixels of this frame, over opt.small_px (the setting in this frame's pixels: half of
// it at half size, render/fitstate.py _optim), within [SMALL_RATE_MIN, 1] (render/fitloop.py
// small_triangle_rates, the host's). `o`: its first raw parameter.
fn small_rate(o: u32) -> f32 {
    let wh = vec2f(f32(frame.width), f32(frame.height));
    let a = vec2f(params[o], params[o + 1u]) * wh;
    let e1 = vec2f(params[o + 2u], params[o + 3u]) * wh - a;
    let e2 = vec2f(params[o + 4u], params[o + 5u]) * wh - a;
    let area = 0.5 * abs(e1.x * e2.y - e1.y * e2.x);
    return clamp(sqrt(area) / opt.small_px, SMALL_RATE_MIN, 1.0);  // (SMALL_RATE_MIN: render/gpu/shaders.py)
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
    let b = wid.y;
    if (wid.x == 0u) {  // the iteration's end (wid is uniform in a workgroup: barriers allowed)
        record_loss(b, li);
        if (li == 0u) { scene[record_sigma(b, frame)] = schedule_sigma(state.iter + 1u, sigma_end[b]); }
        return;
    }
    let n_params = frame.n_tris * 10u + 3u;
    let slot = param_slot(wid.x - 1u, li);
    var g = reduce_param(b, slot, li);
    let j = slot.j;
    let tri = j / 10u;  // == n_tris for the background
    let k = j % 10u;
    let is_vertex = slot.valid && tri < frame.n_tris && k < 6u;
    var size_rate = 1.0;
    if (is_vertex && slot.lane == 0u && opt.small_px > 0.0) {
        size_rate = small_rate(b * n_params + tri * 10u);
    }
    // (uniform) every read of a vertex above comes before any write of one below: a workgroup's
    // parameters are whole triangles (PARAMS_PER_GROUP, a multiple of 10), so no other workgroup
    // writes them, and the rates are those of the parameters as the iteration began.
    storageBarrier();
    if (slot.lane != 0u || !slot.valid) { return; }
    if (tri < frame.n_tris && locked[b * frame.n_tris + tri] != 0u) { return; }
    let pi = b * n_params + j;
    var raw = params[pi];
    if (tri < frame.n_tris) {
        let pull = anchor[b * frame.n_tris * 10u + j];
        if (pull.y != 0.0) {
            var now = raw;
            if (!is_vertex) { now = sigmoid(raw); }
            g += 2.0 * pull.y * (now - pull.x);
        }
    }
    var lr = opt.lr_vertex * size_rate;
    if (!is_vertex) {
        let s = sigmoid(raw);
        g = g * s * (1.0 - s);
        if (tri == frame.n_tris) { lr = opt.lr_background; }
        else if (k == 9u) { lr = opt.lr_alpha; }
        else { lr = opt.lr_colour; }
    }
    let t = f32(max(state.iter, 1u));
    let m = opt.beta1 * moments[2u * pi] + (1.0 - opt.beta1) * g;
    let v = opt.beta2 * moments[2u * pi + 1u] + (1.0 - opt.beta2) * g * g;
    moments[2u * pi] = m;
    moments[2u * pi + 1u] = v;
    let mhat = m / (1.0 - pow(opt.beta1, t));
    let vhat = v / (1.0 - pow(opt.beta2, t));
    raw -= lr * state.lr_scale * mhat / (sqrt(vhat) + opt.eps);
    params[pi] = raw;
    var value = raw;
    if (!is_vertex) { value = sigmoid(raw); }
    scene[b * frame.scene_stride + j] = value;  // background j = n_tris*10 + c lands on bg[c]
}
