// The fit loop's schedules (render/fitloop.py Schedule.at, the same formulas): sigma annealed
// geometrically, the learning-rate scale by a cosine. The including kernel declares `sched`
// (struct Schedule: render/gpu/layouts.py SCHEDULE, generated).
// No kernel of its own: the iteration's first dispatch starts it (tile_bin.wgsl start_iteration:
// counter, learning-rate scale) and adam.wgsl ends it (the next iteration's sigma into the scene record), one dispatch fewer an
// iteration than a kernel of their own (each dispatch adds a launch and a barrier).

// `end`: the image's own final sigma (a batch anneals each image towards its own; the fit loop
// keeps them in a storage array beside the schedule).
fn schedule_sigma(it: u32, end: f32) -> f32 {
    let u = max(f32(it) - sched.iter_offset, 0.0);
    let fs = clamp(u / max(sched.sigma_iters, 1.0), 0.0, 1.0);
    return sched.sigma_start * pow(end / sched.sigma_start, fs);
}

fn schedule_lr(it: u32) -> f32 {
    let fl = clamp((f32(it) - sched.lr_offset) / max(sched.lr_decay_iters, 1.0), 0.0, 1.0);
    return sched.lr_final + (sched.lr_start - sched.lr_final) * 0.5 * (1.0 + cos(3.14159265 * fl));
}
