// Fitter: start of one iteration on the device. Advances the iteration counter and evaluates
// the sigma and learning-rate schedules for it, writing sigma into every image's scene record.
// One thread. Dispatch: (1, 1, 1).

struct Schedule {
    sigma_start: f32,      // fraction of the shorter side
    sigma_end: f32,
    sigma_iters: f32,      // geometric anneal from start to end over this many iterations
    lr_decay_iters: f32,   // learning-rate scale: cosine from lr_start down to lr_final over these
    lr_final: f32,
    iter_offset: f32,      // the sigma anneal starts at this iteration
    lr_offset: f32,        // ... and the learning-rate cosine at this one
    lr_start: f32,
}

@group(0) @binding(0) var<uniform> frame: Frame;
@group(0) @binding(1) var<uniform> sched: Schedule;
@group(0) @binding(2) var<storage, read_write> state: State;
@group(0) @binding(3) var<storage, read_write> scene: array<f32>;

@compute @workgroup_size(1)
fn main() {
    let it = state.iter + 1u;
    state.iter = it;
    let u = max(f32(it) - sched.iter_offset, 0.0);
    let fs = clamp(u / max(sched.sigma_iters, 1.0), 0.0, 1.0);
    let sigma = sched.sigma_start * pow(sched.sigma_end / sched.sigma_start, fs);
    let fl = clamp((f32(it) - sched.lr_offset) / max(sched.lr_decay_iters, 1.0), 0.0, 1.0);
    let lr = sched.lr_final + (sched.lr_start - sched.lr_final) * 0.5 * (1.0 + cos(3.14159265 * fl));
    state.sigma = sigma;
    state.lr_scale = lr;
    for (var b = 0u; b < frame.batch; b++) {
        scene[b * frame.scene_stride + frame.n_tris * 10u + 3u] = sigma;
    }
}
