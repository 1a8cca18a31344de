"""Where a time-limited fit's wall clock goes (docs/PERFORMANCE.md round 11).

Runs 1 s fits of the bundled samples (150 triangles, 176 px, seeds 0-2, after one warm-up fit in
the same process) and prints, per fit: iterations, chunks, the time inside the fit loop's
``run`` (bucketed by chunk length and working size, with its cost per iteration), the time in
each host event of the Fitter, and the engine's host phases (encode / submit / readback).

    python3 tools/fit_timeline.py [--time-limit 1] [--seeds 0,1,2] [--settings '{"first_submission": 4}']

Timing wrappers are patched onto one Fitter at a time; they add a few microseconds per call.
"""

import argparse
import collections
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from render import Engine, Fitter, StopConditions, load_image  # noqa: E402
from resources import sample_path  # noqa: E402

EVENTS = ("_handle_events", "_grow", "_prune", "_respawn", "_probe_sigma", "_rebuild", "_new_triangles",
          "_join_state", "_most_costly", "_state_now", "_maybe_snapshot", "replan_for_time")


def timed_fit(engine: Engine, image: str, seed: int, limit: float, settings: dict) -> None:
    target = load_image(str(sample_path(image)), 176)
    f = Fitter(target, 150, 176, seed, engine=engine, **settings)
    chunks, events = [], collections.defaultdict(float)
    loop_class = type(f._loop)
    plain_run = loop_class.run

    def run(loop, n, **hints):
        t = time.perf_counter()
        out = plain_run(loop, n, **hints)
        chunks.append((n, time.perf_counter() - t, loop.target_shape != target.shape))
        return out

    def timed(name, fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                events[name] += time.perf_counter() - t
        return wrapper

    for name in EVENTS:
        setattr(f, name, timed(name, getattr(f, name)))
    host = engine.impl.host
    host.samples.clear()
    loop_class.run = run
    try:
        t0 = time.perf_counter()
        stats = f.run(StopConditions(time_limit=limit))
        wall = time.perf_counter() - t0
    finally:
        loop_class.run = plain_run
    buckets = collections.defaultdict(lambda: [0, 0, 0.0])
    for n, dt, coarse in chunks:
        b = buckets[("coarse" if coarse else "full", "<25" if n < 25 else "<50" if n < 50 else "<=100")]
        b[0] += 1
        b[1] += n
        b[2] += dt
    print(f"{image} seed {seed}: wall {wall:.3f} s, {sum(c[0] for c in chunks)} iterations in {len(chunks)} chunks, "
          f"loop.run {sum(c[1] for c in chunks):.3f} s, PSNR {stats.psnr:.2f} (float32, working size)")
    print("   events s:", {k: round(v, 3) for k, v in events.items()})
    print("   host phases s:", {k: round(sum(v) / 1e3, 3) for k, v in host.samples.items()},
          "counts", {k: len(v) for k, v in host.samples.items()})
    for key in sorted(buckets):
        c, n, dt = buckets[key]
        print(f"   {key}: chunks {c} iterations {n} time {dt:.3f} s, {1e6 * dt / max(n, 1):.0f} us an iteration")
    f.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--time-limit", type=float, default=1.0)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--images", default="astronaut.png,chelsea.png")
    p.add_argument("--settings", default="{}", help="FitSettings overrides, JSON")
    a = p.parse_args()
    engine = Engine("gpu")
    settings = json.loads(a.settings)
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} {engine.description} {settings or ''}", flush=True)
    warm = Fitter(load_image(str(sample_path("chelsea.png")), 176), 150, 176, 9, engine=engine)
    warm.run(StopConditions(time_limit=0.3))  # pipelines, buffers
    warm.close()
    for image in a.images.split(","):
        for seed in (int(s) for s in a.seeds.split(",")):
            timed_fit(engine, image, seed, a.time_limit, settings)


if __name__ == "__main__":
    main()
