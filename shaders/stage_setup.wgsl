// Staging for one pixel a thread (GPUs): each triangle is set up (common.wgsl TriSetup) once per
// tile, as it is staged, and its 256 pixels read the set-up record.
alias Staged = TriSetup;

// the backward keeps the canvas beneath a staged round (backward.wgsl composite_below)
const ROUND_BASE: bool = true;

fn stage_tri(t: TriPx, reach: f32) -> Staged {
    return setup_tri(t, reach);
}

fn staged_setup(s: Staged, reach: f32) -> TriSetup {
    return s;
}
