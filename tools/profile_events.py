"""Where a fit's events spend the fit thread's CPU: cProfile enabled only inside the strategy's
``on_event``, and this thread's CPU inside each of the event operations (FitState's count
changes, placement, respawn, probes). The fit as ``profile_time_to_quality.py long`` runs it.

    python tools/profile_events.py [--seconds 20 | --iters N] [--size 512] [--tris 1000] [--replicas R] [--top 45]

``--iters N``: a fixed plan of N iterations instead of a time limit, so that two trees run the
same events (their CPU comparable on any adapter; ``--top 0`` prints only the operations).
``--wgpu``: no profiler; instead wgpu-py's methods are timed (thread CPU, the driver's share
included) while an event runs, so the events' CPU splits into their wgpu calls and the rest.
"""

import argparse
import cProfile
import pstats
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trifit import Engine, Fitter, StopConditions, fitstate, load_image, strategy  # noqa: E402
from trifit.resources import sample_path  # noqa: E402

OPERATIONS = {strategy.DefaultStrategy: ("on_event", "_respawn", "_place", "_probe_sigma"),
              fitstate.FitState: ("add", "keep", "most_costly", "replace_on_device", "stopped_on_device",
                                  "use_schedule", "to_full_size", "place_on_device")}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--tris", type=int, default=1000)
    p.add_argument("--image", default="astronaut.png")
    p.add_argument("--iters", type=int, default=None, help="a fixed plan of this many iterations")
    p.add_argument("--replicas", type=int, default=0, help="replicas an image (0: the fit's own choice)")
    p.add_argument("--top", type=int, default=45)
    p.add_argument("--wgpu", action="store_true", help="time wgpu-py's methods inside events (no cProfile)")
    a = p.parse_args()
    if a.wgpu:
        a.top = 0
    prof, inside, calls = cProfile.Profile(), defaultdict(lambda: [0, 0.0]), defaultdict(lambda: [0, 0.0])
    in_event = [False]

    def timed(cls, name, profiled=False):
        orig = getattr(cls, name)

        def wrapper(*args, **kw):
            c = time.thread_time()
            if profiled:
                in_event[0] = True
                if a.top:
                    prof.enable()
            try:
                return orig(*args, **kw)
            finally:
                if profiled:
                    in_event[0] = False
                    if a.top:
                        prof.disable()
                row = inside[f"{cls.__name__}.{name}"]
                row[0] += 1
                row[1] += time.thread_time() - c
        setattr(cls, name, wrapper)

    def timed_wgpu(cls, name):
        orig = getattr(cls, name)

        def wrapper(*args, **kw):
            if not in_event[0]:
                return orig(*args, **kw)
            c = time.thread_time()
            try:
                return orig(*args, **kw)
            finally:
                row = calls[f"{cls.__name__}.{name}"]
                row[0] += 1
                row[1] += time.thread_time() - c
        setattr(cls, name, wrapper)

    for cls, names in OPERATIONS.items():
        for name in names:
            timed(cls, name, profiled=name == "on_event")
    if a.wgpu:
        from wgpu.backends import wgpu_native as wn

        for cls in (wn.GPUDevice, wn.GPUQueue, wn.GPUCommandEncoder, wn.GPUComputePassEncoder, wn.GPUBuffer):
            for name, value in list(vars(cls).items()):
                if callable(value) and not name.startswith("__"):
                    timed_wgpu(cls, name)
    eng = Engine("gpu")
    target = load_image(sample_path(a.image), a.size)
    Fitter(target, triangles=a.tris, size=a.size, engine=eng).close()  # pipelines first
    f = Fitter(target, triangles=a.tris, size=a.size, seed=0, engine=eng, replicas=a.replicas)
    t = time.thread_time()
    f.run(StopConditions(iterations=a.iters) if a.iters else StopConditions(time_limit=a.seconds))
    print(f"# {eng.description}: {f.iteration} iterations; the fit thread's CPU {time.thread_time() - t:.3f} s")
    for k, (n, c) in sorted(inside.items(), key=lambda kv: -kv[1][1]):
        print(f"  {k:40s} {n:6d} calls {c:8.3f} s  {1e3 * c / max(n, 1):7.3f} ms a call")
    if a.wgpu:
        total = sum(c for _, c in calls.values())
        print(f"# inside the events, wgpu-py's methods: {sum(n for n, _ in calls.values())} calls, {total:.3f} s")
        for k, (n, c) in sorted(calls.items(), key=lambda kv: -kv[1][1]):
            print(f"  {k:45s} {n:6d} calls {c:8.3f} s  {1e6 * c / max(n, 1):8.1f} us a call")
    for order in ("tottime", "cumulative") if a.top else ():
        pstats.Stats(prof).sort_stats(order).print_stats(a.top)
    if a.top:  # which of wgpu-py's methods the C time (inside its call wrapper) is spent under
        pstats.Stats(prof).sort_stats("tottime").print_callers("proxy_func")


if __name__ == "__main__":
    main()
