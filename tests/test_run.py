"""The run loop: a fit's scene depends on its inputs and the iterations run -- not on chunk sizes,
machine load or which front end drove it -- and what does depend on time (a time limit's plans,
live changes) is recorded and replays to the same bytes."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from trifit import FitRun, Fitter, Scene, StopConditions, reference as R, replay_run
from trifit.cli import main
from trifit.fitter import BatchFitter
from trifit.run import CHECK_EVERY, FIRST_STEP, ChunkSizer

pytestmark = pytest.mark.gpu

# every event of the default strategy within 150 iterations at 64 px: the half-size stage,
# growth stages, over-growth and pruning cycles (with learning-rate restarts), respawns, sigma
# probes and host snapshots
EVENTFUL = dict(coarse_min_size=16, growth_until=0.3, prune_cycle_min=12, respawn_every=7,
                sigma_probes=3, host_snapshot_every=40)


def _target(W=64, H=48, seed=3):
    truth = Scene.random(30, W, H, seed=seed, sigma_px=1.2)
    return np.clip(R.render(truth) + np.random.default_rng(seed).normal(0, 0.02, (H, W, 3)), 0, 1)


def _fit(engine, stop, chunk=None, sizer=None, **settings):
    f = Fitter(_target(), triangles=24, size=64, seed=5, engine=engine, **{**EVENTFUL, **settings})
    run = FitRun(f, stop, chunk=chunk)
    if sizer is not None:
        run.sizer = sizer
    run.run()
    scene = f.scene
    f.close()
    return scene


def _bytes(scene: Scene) -> bytes:
    return scene.triangles.tobytes() + scene.background.tobytes() + np.float64(scene.sigma).tobytes()


class _RandomSizer(ChunkSizer):
    """Chunk sizes as a loaded machine might produce them: anything from 1 to 90."""

    def __init__(self, seed):
        super().__init__(0.1)
        self.rng = np.random.default_rng(seed)

    def next(self) -> int:
        return int(self.rng.integers(1, 91))


class _BusyCPU:
    """Every core busy with other work while the fit runs."""

    def __enter__(self):
        import os
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                      for _ in range(os.cpu_count() or 2)]

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()


@pytest.fixture(scope="module")
def segmented_engine(gpu_ctx):
    """The engine as GPUs run it: the backward in segments (CPU adapters walk whole lists)."""
    from trifit import Engine

    return Engine("gpu", segmented=True)


@pytest.mark.parametrize("placement, segmented", [("host", False), ("device", False), ("device", True)])
def test_chunk_sizes_and_load_leave_the_scene_alone(gpu_engine, segmented_engine, placement, segmented):
    engine = segmented_engine if segmented else gpu_engine
    stop = StopConditions(iterations=150)
    reference = _fit(engine, stop, chunk=1, placement=placement)
    assert reference.n_triangles == 24
    for chunk in (7, 64, None):
        assert _bytes(_fit(engine, stop, chunk=chunk, placement=placement)) == _bytes(reference), chunk
    assert _bytes(_fit(engine, stop, sizer=_RandomSizer(1), placement=placement)) == _bytes(reference)
    with _BusyCPU():
        assert _bytes(_fit(engine, stop, placement=placement)) == _bytes(reference)


def test_chunks_begun_from_parts_encoded_ahead_leave_the_scene_alone(gpu_engine, monkeypatch):
    """The next chunk's first part, encoded while the GPU runs a chunk's last, is what the chunk
    would encode after the host's turn (render/gpu/fitloop.py ``_encode_ahead``): the same bytes
    with it as without, through the strategy's events -- count changes, respawns, probes --
    and chunks that end between them."""
    from trifit.gpu import fitloop

    taken, last = [], [None]  # (whether a chunk began with a part encoded ahead; whether its loop had just changed)
    take = fitloop.GpuFitLoop._take_ready

    def counted(self, *args):
        got = take(self, *args)
        taken.append((got is not None, self is not last[0]))
        last[0] = self
        return got

    monkeypatch.setattr(fitloop.GpuFitLoop, "_take_ready", counted)
    settings = dict(coarse_min_size=16, sigma_probes=3, host_snapshot_every=400)  # (the default's events)

    def fit(ahead: bool):
        monkeypatch.setattr(fitloop, "ENCODE_AHEAD", ahead)
        taken.clear()
        last[0] = None
        f = Fitter(_target(), triangles=24, size=64, seed=5, engine=gpu_engine, **settings)
        FitRun(f, StopConditions(iterations=900), chunk=64).run()
        out = _bytes(f.scene), [switched for began, switched in taken if began]
        f.close()
        return out

    with_ahead, begun_ahead = fit(True)
    without, none = fit(False)
    assert none == []
    # (else the comparison says little) both ways: on the loop that ran the chunk before, and on a
    # kept loop a count change returned to (render/fitstate.py _encode_kept_ahead)
    assert begun_ahead.count(False) >= 3 and begun_ahead.count(True) >= 1
    assert with_ahead == without


def test_loops_made_while_chunks_run_leave_the_scene_alone(gpu_engine, monkeypatch):
    """The loop of each count and size a fit reaches is made while the chunks before the event
    that moves to it run (render/fitstate.py ``_make_next_loop``), and that event resets it as a
    kept loop: the same bytes as loops made inside the events, through the half-size stage's
    end, growth, pruning cycles, respawns and probes -- and then no loop is made inside an event."""
    from trifit import fitstate
    from trifit.gpu import backend

    made = []  # (whether each loop was made inside an event's count change or the stage's end)
    inside = [False]
    make, take = backend.GpuBackend.fit_loop, fitstate.FitState._take_on_device

    def counted(self, *args, **kw):
        made.append(inside[0])
        return make(self, *args, **kw)

    def in_event(self, *args, **kw):
        inside[0] = True
        try:
            return take(self, *args, **kw)
        finally:
            inside[0] = False

    monkeypatch.setattr(backend.GpuBackend, "fit_loop", counted)
    monkeypatch.setattr(fitstate.FitState, "_take_on_device", in_event)
    settings = dict(coarse_min_size=16, sigma_probes=3, host_snapshot_every=400)  # (the default's events)

    def fit(ahead: bool):
        if not ahead:
            monkeypatch.setattr(fitstate.FitState, "_make_next_loop", lambda self: False)
        made.clear()
        f = Fitter(_target(), triangles=24, size=64, seed=5, engine=gpu_engine, **settings)
        FitRun(f, StopConditions(iterations=900), chunk=64).run()
        out = _bytes(f.scene), list(made)
        f.close()
        return out

    with_ahead, made_ahead = fit(True)
    without, made_inside = fit(False)
    # the first loop with the fitter; every later one while chunks ran, or (without) in the events
    assert made_ahead[1:] and not any(made_ahead)
    assert len(made_inside) > 2 and all(made_inside[1:])
    assert with_ahead == without


class _FixedSizer(ChunkSizer):
    def __init__(self, n):
        super().__init__(0.1)
        self.n = n

    def next(self) -> int:
        return self.n


def test_sized_chunks_end_at_the_events_near_their_end(gpu_engine):
    """An event ends a chunk on the device anyway: a sized run chunk whose end falls within half a
    chunk of the next event ends at it, not one more turn of the GPU beside it."""
    f = Fitter(_target(), triangles=24, size=64, seed=5, engine=gpu_engine, **EVENTFUL)
    events, on_event = [], f.strategy.on_event
    f.strategy.on_event = lambda it: (events.append(it), on_event(it))[1]
    run = FitRun(f, StopConditions(iterations=150))
    run.sizer = _FixedSizer(5)
    ends = [p.stats.iteration for p in run]
    f.close()
    assert len(events) > 10 and ends[-1] == 150 and set(events) <= set(ends)
    for prev, end in zip([0] + ends, ends):
        upcoming = min((e for e in events if e > prev), default=1 << 30)
        # a chunk ends at the next event when it is within 1.5 chunks (7 iterations), else after 5
        assert end == (upcoming if upcoming - prev <= 7 else min(prev + 5, 150)), (prev, end, ends, events)


def test_the_preview_image_after_each_chunk_is_this_fits_render(gpu_engine):
    """Fitter.gpu_image, what the window draws after each chunk: where an event made another loop
    current (a count change, the half-size stage's end) its image buffer holds no render of this
    fit yet -- a new loop's is zeros -- so there is none until the next chunk has run; otherwise it
    is the render of the fit's leading replica at the iteration reached."""
    f = Fitter(_target(), triangles=24, size=64, seed=5, engine=gpu_engine, replicas=2, **EVENTFUL)
    loops, none, shown = [], 0, 0
    for step in FitRun(f, StopConditions(iterations=150), chunk=3):
        loops.append((f.n_triangles, f.coarse))  # (the loop's key: its count and working size)
        got = f.gpu_image()
        if got is None:
            none += 1
            assert len(loops) == 1 or loops[-1] != loops[-2], f"no image at {step.stats.iteration} without a loop change"
            continue
        buffer, width, height, first = got
        image = np.frombuffer(gpu_engine.device.queue.read_buffer(buffer, first * 4, width * height * 12), np.float32)
        assert (width, height) == (f.working_targets().shape[2], f.working_targets().shape[1])
        assert image.std() > 0.01, f"a blank preview at iteration {step.stats.iteration}"
        shown += 1
    f.close()
    assert none >= 3 and shown > 30  # (the growth stages, the pruning cycles and the stage's end changed loops)


@pytest.mark.parametrize("stop", [StopConditions(target_psnr=24.0, iterations=400),
                                  StopConditions(plateau=20, iterations=600)],
                         ids=["target-psnr", "plateau"])
def test_loss_based_stops_end_at_the_same_iteration_whatever_the_chunking(gpu_engine, stop):
    scenes = [_fit(gpu_engine, stop, chunk=c, sigma_probes=0) for c in (1, 7, 64, None)]
    scenes.append(_fit(gpu_engine, stop, sizer=_RandomSizer(2), sigma_probes=0))
    ends = {s.meta["iterations"] for s in scenes}
    assert len(ends) == 1 and next(iter(ends)) % CHECK_EVERY == 0
    assert next(iter(ends)) < stop.iterations  # the loss rule, not the iteration cap, stopped it
    assert len({_bytes(s) for s in scenes}) == 1


def test_live_changes_are_recorded_and_replay_exactly(gpu_engine):
    f = Fitter(_target(), triangles=24, size=64, seed=5, engine=gpu_engine, **EVENTFUL)
    run = FitRun(f, StopConditions(iterations=140), chunk=9)
    for progress in run:  # what a GUI user does, at whatever iteration the chunks happen to end
        if progress.stats.iteration == 27:
            run.request("triangles", 30)
        elif progress.stats.iteration == 54:
            run.request("sigma", 0.8)
            run.request("lr", 0.7)
        elif progress.stats.iteration == 90:
            run.request("sigma", None)
    original = f.scene
    f.close()
    kinds = [c[1] for c in original.meta["changes"]]
    assert kinds == ["plan", "triangles", "sigma", "lr", "sigma"]
    assert [c[0] for c in original.meta["changes"]][1:] == [27, 54, 54, 90]
    g = Fitter(_target(), engine=gpu_engine, **original.meta["settings"])
    replay_run(g, original.meta).run()
    assert g.scene.to_json() == original.to_json()
    g.close()


def test_a_time_limited_fit_replays_from_its_scene(gpu_engine, tmp_path):
    from PIL import Image

    image = tmp_path / "t.png"
    Image.fromarray((_target() * 255).astype(np.uint8)).save(image)
    first, again = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["fit", str(image), "--tris", "24", "--size", "64", "--time-limit", "1.5", "--quiet",
                 "--backend", "gpu", "-o", str(first)]) == 0
    meta = json.loads(first.read_text())["meta"]
    kinds = [kind for _, kind, _ in meta["changes"]]
    assert kinds[0] == "guessed_plan" and "time_plan" in kinds and meta["iterations"] > 0
    assert main(["fit", str(image), "--replay", str(first), "--quiet", "--backend", "gpu", "-o", str(again)]) == 0
    a, b = Scene.load(first), Scene.load(again)
    assert _bytes(a) == _bytes(b) and a.meta["changes"] == b.meta["changes"]
    assert main(["fit", str(image), "--replay", str(first), "--iters", "5", "-o", str(again)]) == 2


def test_a_time_limits_first_chunk_is_short_whatever_the_chunk(gpu_engine):
    # until a chunk has been timed a time limit's plan is a blind guess (a hundred iterations,
    # whose growth and pruning steps come early): a fixed chunk (a timelapse's frames) runs no
    # further into it than a sized first chunk, and then as asked
    f = Fitter(_target(), triangles=8, size=64, seed=0, engine=gpu_engine)
    run = FitRun(f, StopConditions(time_limit=60), chunk=64)
    steps = iter(run)
    first, second = next(steps), next(steps)
    assert (first.chunk, second.chunk) == (FIRST_STEP, 64) and f.iteration == FIRST_STEP + 64
    assert not f.coarse and f.strategy.plan_guessed is False  # (re-planned from the first chunk's speed)
    run.cancel()
    f.close()


def test_batched_fits_score_as_sequential_ones(gpu_engine):
    # four crops of a photograph, the same iterations: the batch runs the same strategy in
    # lockstep, so each image ends as its own fit does (exactly, on the adapters tested)
    from trifit.imageio import load_image
    from trifit.resources import sample_path

    photo = load_image(sample_path("astronaut.png"), 128)
    crops = [photo[y:y + 64, x:x + 64] for y in (0, 64) for x in (0, 64)]
    settings = dict(triangles=20, size=64, coarse_min_size=16)
    bf = BatchFitter(crops, seeds=[0, 1, 2, 3], engine=gpu_engine, **settings)
    FitRun(bf, StopConditions(iterations=160)).run()
    batched = [_psnr(gpu_engine, s, t) for s, t in zip(bf.scenes, crops)]
    bf.close()
    alone = []
    for k, crop in enumerate(crops):
        f = Fitter(crop, seed=k, engine=gpu_engine, **settings)
        f.run(StopConditions(iterations=160))
        alone.append(_psnr(gpu_engine, f.scene, crop))
        f.close()
    assert abs(np.mean(batched) - np.mean(alone)) < 0.1
    flat = [10 * np.log10(1 / np.mean((c - c.mean(axis=(0, 1))) ** 2)) for c in crops]
    assert all(b > f + 3.0 for b, f in zip(batched, flat))  # each well above its mean colour


def _psnr(engine, scene, target) -> float:
    mse = float(np.mean((engine.render(scene).astype(np.float64) - target) ** 2))
    return 10 * np.log10(1 / mse)


@pytest.mark.parametrize("stop", [StopConditions(iterations=30), StopConditions(plateau=5)])
def test_the_callback_sees_every_chunk_the_last_included(ref_engine, stop):
    """A progress bar that adds each chunk's iterations ends at the run's count: the last chunk
    is reported, and no chunk twice."""
    f = Fitter(_target(24, 18), triangles=6, size=24, seed=0, engine=ref_engine)
    seen = []
    FitRun(f, stop, chunk=7).run(lambda st: seen.append((st.iteration, st.iterations)))
    assert sum(n for _, n in seen) == f.iteration > 0
    assert [it for it, _ in seen] == sorted({it for it, _ in seen})  # increasing: none repeated
