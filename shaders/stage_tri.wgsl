// Staging for several pixels a thread (CPU adapters): the plain record is staged and each thread
// sets it up once for its PPT pixels. There a workgroup-memory read costs a gather per lane, so
// the smaller record is cheaper to stage and read than the set-up one (docs/PERFORMANCE.md).
alias Staged = TriPx;

// the backward re-composites from the background each time (backward.wgsl composite_below)
const ROUND_BASE: bool = false;

fn stage_tri(t: TriPx, reach: f32) -> Staged {
    return t;
}

fn staged_setup(s: Staged, reach: f32) -> TriSetup {
    return setup_tri(s, reach);
}
