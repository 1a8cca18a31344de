"""What a user waits for (issue #19): start-up phases of a fit in a fresh process, the big-fit
cells with their passes, and long fits' host CPU and readback per iteration.

    python tools/profile_time_to_quality.py start          # one fresh process: phase by phase
    python tools/profile_time_to_quality.py wall --repeats 5 --pythonpath NEW --pythonpath BASE
                                                           # process wall of `trifit fit astronaut.png
                                                           # --time-limit 1`, fresh processes, alternating
                                                           # (--quiet; with --bar as typed, its progress bar shown)
    python tools/profile_time_to_quality.py cells          # fit 512/1000, 1024/5000; fwd+bwd 512^2x1024, 1024^2x5000
    ... cells --cell fit:176:150 --cell fwdbwd:128:64 --calls 5   # other cells (a CPU adapter)
    python tools/profile_time_to_quality.py long [--seconds 20] [--size 512] [--tris 1000]
    python tools/profile_time_to_quality.py host --seconds 20   # the same fit: this thread's CPU inside wgpu's
                                                           # calls and the fit loop's encoding; each thread's CPU
    python tools/profile_time_to_quality.py readback       # 600 iterations, 128 px, 60 triangles
    ... long|readback --set placement=device               # fit settings (repeatable), e.g. events on the device
    ... cells|long|host --fuse-tiles 1073741824             # a GPU fit's iteration unfused (three dispatches) at
                                                           # every size; --fuse-tiles 1: fused at every size
    python tools/profile_time_to_quality.py events [--size 512] [--tris 1000] [--repeats 5]
                                                           # one growth placement and one respawn, host vs device
    python tools/profile_time_to_quality.py reads --iters 11000 --size 64 --tris 150
                                                           # every GPU round trip of a fit, by who asked

long and readback report the readback by kind (snapshots apart) when the engine counts kinds.
"""

import argparse
import json
import resource
import sys
import time

T0 = time.perf_counter()


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def start(a) -> dict:
    marks = {}
    t = time.perf_counter()
    import trifit  # noqa: F401
    from trifit import Engine, Fitter, StopConditions, load_image
    from trifit.resources import sample_path
    marks["import"] = time.perf_counter() - t
    t = time.perf_counter()
    eng = Engine("gpu")
    marks["engine (adapter, device)"] = time.perf_counter() - t
    t = time.perf_counter()
    target = load_image(sample_path("astronaut.png"), 176)
    marks["image"] = time.perf_counter() - t
    t = time.perf_counter()
    f = Fitter(target, triangles=150, size=176, seed=0, engine=eng)
    marks["fitter (first loop: pipelines, buffers, placement)"] = time.perf_counter() - t
    t = time.perf_counter()
    f.step(1)
    marks["first step"] = time.perf_counter() - t
    t = time.perf_counter()
    f.run(StopConditions(time_limit=a.seconds))
    marks[f"run {a.seconds:g} s"] = time.perf_counter() - t
    t = time.perf_counter()
    f2 = Fitter(target, triangles=150, size=176, seed=1, engine=eng)
    f2.step(1)
    marks["second fitter in the same process + 1 step"] = time.perf_counter() - t
    marks["process so far (from interpreter start of this script)"] = time.perf_counter() - T0
    return {"marks_s": marks, "iterations": f.iteration}


def wall(a) -> dict:
    """Process wall of the issue's 1 s fit, from exec to exit, in fresh processes: each
    ``--pythonpath`` (a staged trifit first on PYTHONPATH) in turn, ``--repeats`` rounds; ``--quiet``
    unless ``--bar`` (the command as a user types it, its progress bar on a stderr not a terminal)."""
    import os
    import tempfile
    from pathlib import Path

    from trifit.bench import process_wall

    image = Path(__file__).resolve().parent.parent / "resources" / a.image
    paths = a.pythonpath or [os.environ.get("PYTHONPATH", "")]
    rows = {p: [] for p in paths}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.repeats):
            for path in paths:
                fit = ["fit", str(image), "--time-limit", f"{a.seconds:g}", "-o", f"{tmp}/a.json"]
                fit += [] if a.bar else ["--quiet"]
                rows[path].append(process_wall(fit, env={**os.environ, "PYTHONPATH": path}))
    return {path: {"wall_s": r, "median_s": sorted(r)[len(r) // 2]} for path, r in rows.items()}


BIG_CELLS = [("fwdbwd", 512, 1024), ("fit", 512, 1000), ("fwdbwd", 1024, 5000), ("fit", 1024, 5000)]


def cells(a) -> dict:
    from trifit import Engine
    from trifit.bench import bench_cell

    eng = Engine("gpu")
    out = []
    chosen = [(kind, int(side), int(tris)) for kind, side, tris in (c.split(":") for c in a.cell or [])]
    for kind, side, tris in chosen or BIG_CELLS:
        r = bench_cell(eng, kind, 1, side, tris, a.repeats, a.calls)
        out.append(r)
        print(f"{kind} {side}^2 x {tris}: median {r['median_ms']:.3f} ms (min {r['min_ms']:.3f} max {r['max_ms']:.3f}); "
              f"passes {json.dumps({k: round(v, 4) for k, v in r.get('phases_ms', {}).items()})}", flush=True)
    return {"cells": out}


def _settings(a) -> dict:
    """--set KEY=VALUE fit settings: whole numbers, numbers and true / false parsed, else strings."""
    out = {}
    for item in a.set or []:
        key, _, value = item.partition("=")
        if value.lower() in ("true", "false"):
            value = value.lower() == "true"
        else:
            for kind in (int, float):
                try:
                    value = kind(value)
                    break
                except ValueError:
                    pass
        out[key] = value
    return out


class _EventClock:
    """This thread's CPU seconds inside the strategy's events (placement, respawn checks, pruning,
    probes): the host's share of them, apart from the GPU's (on lavapipe the GPU's work runs on
    other threads, so the process's CPU time would count it); and their wall seconds (the host's
    share, and the waits for the GPU work and readbacks they need)."""

    def __init__(self, fitter):
        self.cpu_s, self.wall_s, self.calls = 0.0, 0.0, 0
        strategy = fitter.strategy
        inner = strategy.on_event

        def timed(iteration):
            t, w = time.thread_time(), time.perf_counter()
            try:
                return inner(iteration)
            finally:
                self.cpu_s += time.thread_time() - t
                self.wall_s += time.perf_counter() - w
                self.calls += 1

        strategy.on_event = timed


def _readback(before: dict, after: dict, iterations: int) -> dict:
    """Bytes read back per iteration, in all and by kind (the engine's readback_<kind>_bytes)."""
    kinds = {k[len("readback_"):-len("_bytes")]: (after[k] - before.get(k, 0)) / max(iterations, 1)
             for k in after if k.startswith("readback_") and k != "readback_bytes"}
    total = (after["readback_bytes"] - before["readback_bytes"]) / max(iterations, 1)
    out = {"readback_bytes_per_iteration": total}
    if kinds:
        out["readback_by_kind_per_iteration"] = kinds
        out["readback_without_snapshots_per_iteration"] = total - kinds.get("snapshot", 0.0)
    return out


def long_fit(a) -> dict:
    from trifit import Engine, Fitter, StopConditions, load_image
    from trifit.resources import sample_path

    eng = Engine("gpu")
    target = load_image(sample_path(a.image), a.size)
    settings = _settings(a)
    Fitter(target, triangles=a.tris, size=a.size, engine=eng, **settings).close()  # pipelines first
    before = eng.counters()
    c0, t0 = _cpu(), time.perf_counter()
    f = Fitter(target, triangles=a.tris, size=a.size, seed=a.seed, engine=eng, **settings)
    events, thread0 = _EventClock(f), time.thread_time()
    marks = []
    f.run(StopConditions(time_limit=a.seconds), callback=lambda s: marks.append((time.perf_counter() - t0, s.iteration, s.psnr)))
    wall, cpu, thread_cpu = time.perf_counter() - t0, _cpu() - c0, time.thread_time() - thread0
    after = eng.counters()
    rb = after["readback_bytes"] - before["readback_bytes"]
    psnr = f.step(0).psnr
    tm = f.timings()
    res = {"seconds": a.seconds, "size": a.size, "tris": a.tris, "settings": settings, "seed": a.seed,
           "iterations": f.iteration, "wall_s": wall, "host_cpu_s": cpu, "readback_bytes_per_iteration": rb / max(f.iteration, 1),
           **_readback(before, after, f.iteration), "psnr_working": psnr, "gpu_ms": tm["gpu_ms"], "host_ms": tm["host_ms"],
           "submissions": after["submissions"] - before["submissions"], "respawned": f.respawned,
           "upload_bytes_per_iteration": (after["upload_bytes"] - before["upload_bytes"]) / max(f.iteration, 1),
           "fit_thread_cpu_s": thread_cpu, "event_cpu_s": events.cpu_s, "event_wall_s": events.wall_s,
           "events": events.calls}
    for at in (1, 5, 10, 20):
        got = [m for m in marks if m[0] <= at]
        if got:
            res[f"psnr_at_{at}s"] = got[-1][2]
    return res


def _thread_cpu() -> dict[str, tuple[str, float]]:
    """Each thread of this process: (name, user + system CPU seconds), from /proc (Linux)."""
    import os

    tick, out = os.sysconf("SC_CLK_TCK"), {}
    for tid in os.listdir("/proc/self/task"):
        try:
            name = open(f"/proc/self/task/{tid}/comm").read().strip()
            fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended
            continue
        out[tid] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out


def host_calls(a) -> dict:
    """A time-limited fit (as ``long``) with wgpu-py's per-chunk calls, the fit loop's direct
    encoding, its readbacks (render/gpu/readback.py), its chunks (``GpuFitLoop._run``), its steps
    and the strategy's events wrapped: this thread's CPU and wall inside each (nested: a step holds
    its chunks and events), and every thread's CPU (/proc); and
    the GPU's time for an iteration (the medians of its passes' timestamps in each chunk's first
    iteration) times the iterations: an estimate of how long the GPU ran iterations."""
    from collections import defaultdict

    from wgpu.backends import wgpu_native as wn

    from trifit import Engine, Fitter, StopConditions, load_image
    from trifit.gpu import readback
    from trifit.gpu.encode import Repeats
    from trifit.gpu.fitloop import GpuFitLoop
    from trifit.resources import sample_path
    from trifit.strategy import FixedStrategy

    inside: dict = defaultdict(lambda: [0, 0.0, 0.0])

    def wrap(cls, name, label):
        orig = getattr(cls, name)

        def timed(*args, **kw):
            c, t = time.thread_time(), time.perf_counter()
            try:
                return orig(*args, **kw)
            finally:
                row = inside[label]
                row[0] += 1
                row[1] += time.thread_time() - c
                row[2] += time.perf_counter() - t
        setattr(cls, name, timed)

    for cls in (FixedStrategy, *FixedStrategy.__subclasses__()):  # (the events, each strategy's own)
        if "on_event" in vars(cls):
            wrap(cls, "on_event", f"{cls.__name__}.on_event")
    for cls, name in [(wn.GPUCommandEncoder, "finish"), (Repeats, "encode"), (wn.GPUBuffer, "map_sync"),
                      (wn.GPUQueue, "submit"), (wn.GPUBuffer, "read_mapped"), (wn.GPUDevice, "create_command_encoder"),
                      (wn.GPUQueue, "write_buffer"), (wn.GPUCommandEncoder, "begin_compute_pass"),
                      (wn.GPUDevice, "create_bind_group"), (wn.GPUComputePassEncoder, "end"), (wn.GPUBuffer, "unmap"),
                      (readback._Native, "read"), (GpuFitLoop, "_run"), (Fitter, "step")]:
        wrap(cls, name, f"{cls.__name__}.{name}")
    eng = Engine("gpu")
    target = load_image(sample_path(a.image), a.size)
    settings = _settings(a)
    Fitter(target, triangles=a.tris, size=a.size, engine=eng, **settings).close()  # pipelines first
    inside.clear()
    before, c0, t0 = _thread_cpu(), time.thread_time(), time.perf_counter()
    f = Fitter(target, triangles=a.tris, size=a.size, seed=a.seed, engine=eng, **settings)
    f.run(StopConditions(time_limit=a.seconds))
    thread_cpu, wall, after = time.thread_time() - c0, time.perf_counter() - t0, _thread_cpu()
    threads = sorted(((cpu - before.get(tid, (name, 0.0))[1], name, tid) for tid, (name, cpu) in after.items()),
                     reverse=True)
    gpu_ms = f.timings()["gpu_ms"]  # (median per pass of the chunks' timed first iterations; "loss" is the events')
    # an iteration is either fused ("forward+backward") or not ("bin", "forward", "backward"): a fit
    # whose half-size stage walks unfused and its full size fused has medians of both, so the
    # estimate takes the dearer of the two iterations (an upper bound)
    paths = {"fused": ("forward+backward", "reduce+adam"), "unfused": ("bin", "forward", "backward", "reduce+adam")}
    per_path = {name: sum(gpu_ms.get(k, 0.0) for k in keys) for name, keys in paths.items()
                if any(k in gpu_ms for k in keys[:-1])}
    per_iteration = max(per_path.values(), default=0.0)
    return {"seconds": a.seconds, "size": a.size, "tris": a.tris, "iterations": f.iteration, "wall_s": wall,
            "gpu_ms": gpu_ms, "gpu_ms_per_iteration": per_path, "gpu_busy_s_estimate": per_iteration * f.iteration / 1e3,
            "fit_thread_cpu_s": thread_cpu, "process_cpu_s": sum(t[0] for t in threads),
            "threads": [{"name": n, "tid": tid, "cpu_s": c} for c, n, tid in threads if c > 0],
            "inside": {k: {"calls": n, "thread_cpu_s": c, "wall_s": w} for k, (n, c, w) in
                       sorted(inside.items(), key=lambda kv: -kv[1][1])}}


def readback(a) -> dict:
    from trifit import Engine, Fitter, StopConditions, load_image
    from trifit.resources import sample_path

    eng = Engine("gpu")
    target = load_image(sample_path("astronaut.png"), 128)
    settings = _settings(a)
    before = eng.counters()
    c0 = _cpu()
    f = Fitter(target, triangles=60, size=128, seed=a.seed, engine=eng, **settings)
    events, thread0 = _EventClock(f), time.thread_time()
    f.run(StopConditions(iterations=600))
    thread_cpu = time.thread_time() - thread0
    after = eng.counters()
    return {"settings": settings, "seed": a.seed, "iterations": f.iteration, **_readback(before, after, 600),
            "submissions": after["submissions"] - before["submissions"], "cpu_s": _cpu() - c0,
            "psnr_working": f.step(0).psnr, "respawned": f.respawned, "fit_thread_cpu_s": thread_cpu,
            "event_cpu_s": events.cpu_s, "events": events.calls}


def reads(a) -> dict:
    """Where a fit's GPU round trips come from: an --iters plan of --tris at --size (the plan a
    fixed iteration count makes), every map of a buffer counted by the trifit functions that
    asked for it (the innermost three), and the events run."""
    import os
    import traceback
    from collections import Counter

    from wgpu.backends import wgpu_native as wn

    import trifit
    from trifit import Engine, Fitter, StopConditions, load_image
    from trifit.resources import sample_path

    ours_dir = os.path.dirname(os.path.abspath(trifit.__file__))
    callers: Counter = Counter()
    real = wn.GPUBuffer.map_sync

    def counted(self, *args, **kw):
        ours = [f.name for f in traceback.extract_stack()[:-1] if os.path.abspath(f.filename).startswith(ours_dir)]
        callers[" < ".join(ours[-3:][::-1])] += 1
        return real(self, *args, **kw)

    wn.GPUBuffer.map_sync = counted
    eng = Engine("gpu")
    f = Fitter(load_image(sample_path(a.image), a.size), triangles=a.tris, size=a.size, seed=a.seed, engine=eng,
               **_settings(a))
    events = _EventClock(f)
    f.run(StopConditions(iterations=a.iters))
    wn.GPUBuffer.map_sync = real
    return {"iterations": f.iteration, "size": a.size, "tris": a.tris, "settings": _settings(a), "events": events.calls,
            "reads": sum(callers.values()), "by_caller": dict(callers.most_common())}


def events(a) -> dict:
    """The host's cost of one event, each placement: a fit of --tris at --size (no half-size
    stage) stepped a few iterations, then --repeats placements of 5% of the count and respawn
    events (re-placing 5% of the triangles, marked dead by opacity); with placement on the device
    also a growth (placing 5% more and adding them: a count change) and a pruning back (ranking by
    removal cost and keeping the count); this thread's CPU seconds and wall per event, medians
    and min-max, and the bytes read back per event. (In a fit the error sums and the removal
    costs come back with the chunk before the event; here each event computes its own.)"""
    import numpy as np

    from trifit import Engine, Fitter, load_image
    from trifit.resources import sample_path

    eng = Engine("gpu")
    target = load_image(sample_path(a.image), a.size)
    out = {"size": a.size, "tris": a.tris, "adapter": eng.adapter.get("name")}
    k = max(1, a.tris // 20)
    for mode in ("host", "device"):
        f = Fitter(target, triangles=a.tris, size=a.size, seed=a.seed, engine=eng, placement=mode,
                   coarse_fraction=0.0, growth_stages=1, overgrow=1.0, respawn_alpha=0.0)
        f.step(3)
        rows = {"place": [], "respawn": []} if mode == "host" else {"place": [], "respawn": [], "grow": [], "prune": []}
        for _ in range(a.repeats):
            for kind in rows:
                f.step(1)  # a fresh forward to place against, as after a chunk
                b0, t0, w0 = eng.counters()["readback_bytes"], time.thread_time(), time.perf_counter()
                if kind == "place":
                    f.strategy._place([k])
                elif kind == "grow":
                    f.add(f.strategy._place([k]))
                elif kind == "prune":
                    f.keep(f.most_costly(a.tris))
                else:
                    tris = f.values()[0] if mode == "host" else None
                    dead = [np.arange(0, a.tris, 20)[:k]]
                    new = f.strategy._place([len(dead[0])])
                    (f.replace if mode == "host" else f.replace_on_device)(dead, new)
                    del tris
                rows[kind].append((time.thread_time() - t0, time.perf_counter() - w0,
                                   eng.counters()["readback_bytes"] - b0))
        f.close()
        for kind, r in rows.items():
            cpu, wall, rb = (np.array(c) for c in zip(*r))
            out[f"{mode}_{kind}"] = {"new_triangles": k, "cpu_ms_median": float(np.median(cpu) * 1e3),
                                     "cpu_ms_min_max": [float(cpu.min() * 1e3), float(cpu.max() * 1e3)],
                                     "wall_ms_median": float(np.median(wall) * 1e3), "readback_bytes": int(np.median(rb))}
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["start", "wall", "cells", "long", "host", "readback", "events", "reads"])
    p.add_argument("--pythonpath", action="append", help="wall: a PYTHONPATH to time the CLI under (repeatable)")
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--tris", type=int, default=1000)
    p.add_argument("--image", default="astronaut.png")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--iters", type=int, default=11000, help="reads: the plan's iterations")
    p.add_argument("--cell", action="append", metavar="KIND:SIDE:TRIS",
                   help="cells: this cell instead of the big ones (repeatable), e.g. fit:176:150 or fwdbwd:128:64")
    p.add_argument("--calls", type=int, default=25, help="cells: calls per timed submission")
    p.add_argument("--bar", action="store_true", help="wall: the fit shows its progress bar (as typed), not --quiet")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="a fit setting (long, readback)")
    p.add_argument("--fuse-tiles", type=int, metavar="N",
                   help="cells, long, host: a fit walks the forward and the backward in one dispatch from N tiles an "
                        "image (render/gpu/workspace.py FUSE_BACKWARD_TILES; a huge N turns it off on GPUs)")
    a = p.parse_args()
    if a.fuse_tiles is not None:
        from trifit.gpu import workspace

        workspace.FUSE_BACKWARD_TILES = a.fuse_tiles
    modes = {"start": start, "wall": wall, "cells": cells, "long": long_fit, "host": host_calls, "readback": readback,
             "events": events, "reads": reads}
    res = modes[a.what](a)
    print(json.dumps(res, indent=1, default=float), flush=True)


if __name__ == "__main__":
    sys.exit(main())
