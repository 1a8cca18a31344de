"""``trifit bench``: the engine's speed on whatever adapter it runs on.

Method (docs/PERFORMANCE.md): scenes are ``Scene.random`` with triangles 0.1-0.4 of the frame,
opacity 0.2-0.95 and sigma 1.5 px, seed 0; targets uniform noise (seed 1). For each cell, one
warm-up submission, then ``repeats`` timed submissions, each encoding ``calls`` evaluations
back to back in one compute pass and waiting for the result; the figure is wall ms per call
(amortised over the calls of a submission). We quote the median over repeats and the min-max.
A per-pass breakdown comes from GPU timestamps of one separate call. The fit-iteration cell
runs the device-resident fitter (chunks of 25 or 100 iterations a readback, each in growing
submissions since the seventh session: 8, 16, 32, ... iterations; two before, 8 then the rest).
The start-up cell times ``trifit fit`` and ``trifit --version`` in fresh processes: wall, and the
process's CPU.
"""

from __future__ import annotations

import json
import platform
import sys
import time

import numpy as np

from . import __version__
from .engine import Engine
from .scene import Scene

# (name, kind, batch, side, triangles): kind is "fwd", "fwdbwd" or "fit"
FULL_CELLS = [
    ("forward 128^2, 64 tris", "fwd", 1, 128, 64),
    ("forward 256^2, 128 tris", "fwd", 1, 256, 128),
    ("forward 512^2, 256 tris", "fwd", 1, 512, 256),
    ("forward 512^2, 1024 tris", "fwd", 1, 512, 1024),
    ("forward+backward 128^2, 64 tris", "fwdbwd", 1, 128, 64),
    ("forward+backward 256^2, 128 tris", "fwdbwd", 1, 256, 128),
    ("forward+backward 256^2, 512 tris", "fwdbwd", 1, 256, 512),
    ("forward+backward 512^2, 1024 tris", "fwdbwd", 1, 512, 1024),
    ("forward+backward batch 16, 256^2, 32 tris", "fwdbwd", 16, 256, 32),
    ("forward+backward batch 64, 128^2, 64 tris", "fwdbwd", 64, 128, 64),
    ("fit iteration 176px, 150 tris", "fit", 1, 176, 150),
    ("fit iteration 176px, 150 tris, 100/submission", "fit100", 1, 176, 150),
]
#: what users run at large sizes (issue #19): on a GPU only -- a CPU adapter takes minutes a call
BIG_CELLS = [
    ("fit iteration 512px, 1000 tris", "fit", 1, 512, 1000),
    ("forward+backward 1024^2, 5000 tris", "fwdbwd", 1, 1024, 5000),
    ("fit iteration 1024px, 5000 tris", "fit", 1, 1024, 5000),
]
QUICK_CELLS = [
    ("forward 64^2, 32 tris", "fwd", 1, 64, 32),
    ("forward+backward 64^2, 32 tris", "fwdbwd", 1, 64, 32),
    ("forward+backward batch 4, 64^2, 32 tris", "fwdbwd", 4, 64, 32),
    ("fit iteration 64px, 50 tris", "fit", 1, 64, 50),
]
#: the host cell (issue #19): (side, triangles, iterations of a fixed plan) on a GPU, a CPU
#: adapter's full bench, and --quick
HOST_CELLS = {"gpu": (512, 1000, 20000), "cpu": (176, 150, 1400), "quick": (64, 50, 300)}
#: issue #4 on lavapipe: tiled render() >= 4x the naive kernel; loss_and_grad() <= 3x render()
BASELINE_CELLS = [(128, 64), (176, 150), (256, 256)]
CROSSOVER_CELLS = [("fwdbwd", 1, 32, 16), ("fwdbwd", 1, 64, 32), ("fwdbwd", 1, 96, 64)]


def _inputs(batch: int, side: int, tris: int):
    scenes = [Scene.random(tris, side, side, seed=b) for b in range(batch)]
    targets = np.random.default_rng(1).uniform(0, 1, (batch, side, side, 3)).astype(np.float32)
    return scenes, targets


def _stats(values: list[float]) -> dict[str, float]:
    a = np.asarray(values)
    return {"median_ms": float(np.median(a)), "min_ms": float(a.min()), "max_ms": float(a.max()), "n": len(a)}


def bench_cell(engine: Engine, kind: str, batch: int, side: int, tris: int, repeats: int, calls: int) -> dict:
    impl = engine.impl
    if hasattr(impl, "timer"):
        impl.timer.samples.clear()
    scenes, targets = _inputs(batch, side, tris)
    out: dict = {"kind": kind, "batch": batch, "size": side, "triangles": tris, "calls_per_submission": calls}
    if kind in ("fit", "fit100"):
        from .fitter import Fitter

        target = targets[0]
        if kind == "fit100":
            calls = out["calls_per_submission"] = 100
        # steady state: the full-size loop with every triangle (no growth, over-growth and pruning,
        # coarse stage, respawn or sigma probe: none of those events happens inside the timed steps)
        f = Fitter(target, triangles=tris, size=side, seed=0, engine=engine, chunk=calls,
                   growth_stages=1, coarse_fraction=0, respawn_every=0, overgrow=1.0, sigma_probes=0)
        f.step(calls)  # warm-up (pipelines, buffers)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            f.step(calls)
            times.append((time.perf_counter() - t0) * 1e3 / calls)
        out.update(_stats(times))
        out["phases_ms"] = f.timings()["gpu_ms"]
        f.close()
        return out
    tris_a = np.stack([s.triangles for s in scenes])
    bg = np.stack([s.background for s in scenes])
    sigma = np.array([s.sigma for s in scenes])
    backward = kind == "fwdbwd"
    if engine.backend == "gpu":
        impl.forward_backward_timed(tris_a, bg, sigma, targets, 1, backward=backward)
        times = [impl.forward_backward_timed(tris_a, bg, sigma, targets, calls, backward=backward)
                 for _ in range(repeats)]
        impl.timer.samples.clear()
        impl.loss_and_grad_batch(tris_a, bg, sigma, targets) if backward else impl.render_batch(tris_a, bg, sigma, side, side)
        out["phases_ms"] = {k: v[-1] for k, v in impl.timer.samples.items() if v}
        out["host_ms"] = {k: v[-1] for k, v in impl.host.samples.items() if v}
    else:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            if backward:
                impl.loss_and_grad_batch(tris_a, bg, sigma, targets)
            else:
                impl.render_batch(tris_a, bg, sigma, side, side)
            times.append((time.perf_counter() - t0) * 1e3)
    out.update(_stats(times))
    return out


def run_bench(args) -> int:
    engine = Engine(args.backend)
    on_cpu = engine.on_cpu
    cells = QUICK_CELLS if args.quick else FULL_CELLS + ([] if on_cpu else BIG_CELLS)
    repeats = args.repeats or (3 if args.quick else 7)
    calls = 5 if args.quick else 25
    results = {
        "software": f"trifit {__version__}",
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "adapter": engine.adapter,
        "backend": engine.backend,
        "date": time.strftime("%Y-%m-%d"),
        "method": f"median of {repeats} timed submissions after 1 warm-up; {calls} calls per submission "
                  "(wall ms per call, amortised); min-max over the submissions",
        "cells": [],
        "crossover": [],
    }
    print(f"trifit bench on {engine.description} [{engine.backend}]; {results['method']}")
    if on_cpu and not args.quick:
        results["left_out"] = [name for name, *_ in BIG_CELLS]
        print("(left out on a CPU adapter, minutes a call: " + "; ".join(results["left_out"]) + ")")
    print(f"{'cell':46s} {'batch':>5s} {'median ms':>10s} {'min-max ms':>18s}")
    for name, kind, batch, side, tris in cells:
        r = bench_cell(engine, kind, batch, side, tris, repeats, calls if engine.backend == "gpu" or kind == "fit" else 1)
        r["name"] = name
        results["cells"].append(r)
        print(f"{name:46s} {batch:5d} {r['median_ms']:10.3f} {r['min_ms']:8.3f}-{r['max_ms']:<8.3f}")
        if r.get("phases_ms"):
            print("    passes (ms, one call): " + ", ".join(f"{k} {v:.3f}" for k, v in r["phases_ms"].items()))
    if engine.backend == "gpu":
        ref = Engine("reference")
        print("\ncrossover against the float64 reference (forward+backward, ms per call):")
        for kind, batch, side, tris in CROSSOVER_CELLS[: 2 if args.quick else 3]:
            g = bench_cell(engine, kind, batch, side, tris, repeats, calls)
            c = bench_cell(ref, kind, batch, side, tris, max(1, repeats // 2), 1)
            row = {"size": side, "triangles": tris, "gpu_ms": g["median_ms"], "reference_ms": c["median_ms"],
                   "winner": "gpu" if g["median_ms"] < c["median_ms"] else "reference"}
            results["crossover"].append(row)
            print(f"  {side}^2 x {tris}: gpu {g['median_ms']:.3f}  reference {c['median_ms']:.3f}  -> {row['winner']}")
    if engine.backend == "gpu":
        print("\nbaseline: naive forward (every pixel walks every triangle) vs the tiled kernels, ms per call:")
        for side, tris in BASELINE_CELLS[: 1 if args.quick else None]:
            row = baseline_cell(engine, side, tris, repeats, calls)
            results.setdefault("baseline", []).append(row)
            print(f"  {side}^2 x {tris}: naive {row['naive_forward_ms']:.3f}  tiled {row['tiled_forward_ms']:.3f} "
                  f"(x{row['speedup']:.1f})  loss_and_grad {row['tiled_forward_backward_ms']:.3f} "
                  f"= {row['grad_over_render']:.2f} x render")
    if engine.backend == "gpu" and not args.quick:
        results["memory"] = memory_cell(engine)
        m = results["memory"]
        print(f"\nmemory: batch {m['batch']}, {m['size']}^2, {m['triangles']} tris, forward+backward: "
              f"peak pool bytes in use {m['peak_in_use_bytes'] / 2**20:.0f} MiB (target <= 1024 MiB)"
              if "error" not in m else f"\nmemory cell refused: {m['error']}")
    side, tris, its = HOST_CELLS["quick" if args.quick else "cpu" if on_cpu else "gpu"]
    if engine.backend == "gpu":  # (the float64 reference would take minutes; its host is all of it)
        results["host"] = h = host_cell(engine, side, tris, its)
        print(f"\nhost: a fit of astronaut.png at {side} px / {tris} triangles over a fixed plan of {its:,} iterations "
              f"(every event): the fit thread {h['fit_thread_cpu_us_per_iteration']:.1f} us of CPU an iteration "
              f"({h['fit_thread_cpu_s']:.2f} s in {h['wall_s']:.2f} s), {h['events']} events at "
              f"{h['event_cpu_ms_per_event']:.2f} ms each, the process {h['process_cpu_s']:.2f} s; read back "
              f"{h['readback_bytes_per_iteration']:.0f} B an iteration ({h['readback_without_snapshots_per_iteration']:.0f} "
              f"without crash-recovery snapshots); PSNR {h['psnr']:.2f} dB")
    runs, seconds = (2, 0.25) if args.quick else (5, 1.0)
    results["start"] = start_cell(args.backend, runs, seconds)
    st = results["start"]
    c = st["fit"].get("cpu")
    cpu = f", process CPU {c['median_s']:.2f} ({c['min_s']:.2f}-{c['max_s']:.2f})" if c else ""
    print(f"\nstart-up, {runs} fresh processes each (s, median (min-max)): `{st['fit']['command']}` "
          f"{st['fit']['median_s']:.2f} ({st['fit']['min_s']:.2f}-{st['fit']['max_s']:.2f}){cpu}; "
          f"`trifit --version` {st['version']['median_s']:.2f} ({st['version']['min_s']:.2f}-{st['version']['max_s']:.2f})")
    results["pool"] = engine.pool_stats()
    if args.json:
        from pathlib import Path

        from .fileutil import atomic_write_bytes

        atomic_write_bytes(Path(args.json), json.dumps(results, indent=1).encode())
    return 0


def host_cell(engine: Engine, side: int, tris: int, iterations: int) -> dict:
    """What a fit costs the host (issue #19): the bundled astronaut at ``side`` px with ``tris``
    triangles and every event (growth, over-growth and pruning cycles, respawn, sigma probes) over
    a fixed plan of ``iterations`` -- the same events in every run, so that the host's figures
    compare across commits (a time limit's plan follows the speed) -- after a first fitter has
    built the pipelines. The fit thread's CPU, its share inside the events, the process's CPU
    (all its threads: the driver's too), and what came back, crash-recovery snapshots apart."""
    from .fitter import Fitter
    from .imageio import load_image
    from .resources import sample_path
    from .run import StopConditions

    target = load_image(sample_path("astronaut.png"), side)
    Fitter(target, triangles=tris, size=side, engine=engine).close()  # pipelines first
    f = Fitter(target, triangles=tris, size=side, seed=0, engine=engine)
    events = {"n": 0, "cpu_s": 0.0}
    inner = f.strategy.on_event

    def on_event(iteration):  # (this fitter's own strategy: the thread's CPU inside each event)
        t = time.thread_time()
        try:
            return inner(iteration)
        finally:
            events["n"] += 1
            events["cpu_s"] += time.thread_time() - t

    f.strategy.on_event = on_event
    before = engine.counters()
    c0, t0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
    try:
        f.run(StopConditions(iterations=iterations))
        wall, thread, process = time.perf_counter() - w0, time.thread_time() - t0, time.process_time() - c0
        after = engine.counters()
        psnr = f.step(0).psnr
    finally:
        f.close()
    n = max(f.iteration, 1)
    read = (after["readback_bytes"] - before["readback_bytes"]) / n
    snapshots = (after.get("readback_snapshot_bytes", 0) - before.get("readback_snapshot_bytes", 0)) / n
    return {"size": side, "triangles": tris, "iterations": f.iteration, "wall_s": wall,
            "fit_thread_cpu_s": thread, "fit_thread_cpu_us_per_iteration": thread / n * 1e6,
            "process_cpu_s": process, "events": events["n"], "event_cpu_s": events["cpu_s"],
            "event_cpu_ms_per_event": events["cpu_s"] / max(events["n"], 1) * 1e3,
            "readback_bytes_per_iteration": read, "readback_without_snapshots_per_iteration": read - snapshots,
            "submissions_per_iteration": (after["submissions"] - before["submissions"]) / n, "psnr": psnr}


def start_cell(backend: str, runs: int, seconds: float) -> dict:
    """What a user waits for before a fit (issue #19): the process wall, from exec to exit, of
    ``trifit fit`` on the bundled astronaut with a time limit of ``seconds`` (default size and
    count), and of ``trifit --version``; ``runs`` fresh processes each, after one that is not
    counted (it writes the bytecode and the C declarations' cache an installed trifit has after
    its first run)."""
    import os
    import tempfile

    from .resources import sample_path

    with tempfile.TemporaryDirectory(prefix="trifit-bench-") as tmp:
        fit = ["fit", str(sample_path("astronaut.png")), "--time-limit", f"{seconds:g}", "--backend", backend,
               "--quiet", "-o", os.path.join(tmp, "a.json")]
        process_wall(fit)
        fit_runs = [process_run(fit) for _ in range(runs)]
        version_runs = [process_run(["--version"]) for _ in range(runs)]
    out = {}
    for key, command, rows in (("fit", f"trifit fit astronaut.png --time-limit {seconds:g}", fit_runs),
                               ("version", "trifit --version", version_runs)):
        walls, cpus = [w for w, _ in rows], [c for _, c in rows]
        out[key] = {"command": command, "runs_s": walls, **_seconds(walls)}
        if None not in cpus:  # the process's CPU in all its threads (a driver's, a BLAS library's too)
            out[key]["cpu_runs_s"] = cpus
            out[key]["cpu"] = _seconds(cpus)
    out["fit"]["time_limit_s"] = seconds
    return out


def process_wall(args: list[str], env: dict | None = None) -> float:
    """Seconds from exec to exit of ``trifit ARGS`` in a fresh Python process (its output dropped;
    ``env``: the process's environment, this one's by default)."""
    return process_run(args, env)[0]


def process_run(args: list[str], env: dict | None = None) -> tuple[float, float | None]:
    """:func:`process_wall`'s run: (seconds from exec to exit, the CPU seconds the process used in
    all its threads, user and system), the CPU None where the platform does not count a finished
    child's (no ``resource`` module: Windows)."""
    import os
    import subprocess

    try:
        import resource
    except ImportError:
        resource = None
    before = resource.getrusage(resource.RUSAGE_CHILDREN) if resource else None
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "trifit.cli", *args], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"} if env is None else env)
    wall = time.perf_counter() - t
    if before is None:
        return wall, None
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _seconds(values: list[float]) -> dict[str, float]:
    return {"median_s": float(np.median(values)), "min_s": float(min(values)), "max_s": float(max(values))}


def memory_cell(engine: Engine, batch: int = 32, side: int = 256, tris: int = 512) -> dict:
    """Peak device bytes the pool holds for one batched forward+backward (issue #4's memory cell),
    measured with a fresh GPU backend so earlier cells do not count."""
    from .errors import AdapterError
    from .gpu.backend import GpuBackend

    be = GpuBackend(engine.impl.ctx)
    scenes, targets = _inputs(batch, side, tris)
    out = {"batch": batch, "size": side, "triangles": tris}
    try:
        be.loss_and_grad_batch(np.stack([s.triangles for s in scenes]), np.stack([s.background for s in scenes]),
                               np.array([s.sigma for s in scenes]), targets)
    except AdapterError as exc:
        out["error"] = str(exc)
        return out
    st = be.pool.stats()
    out.update({"peak_in_use_bytes": st["peak_in_use_bytes"], "pool_bytes": st["bytes"]})
    be.pool.clear()
    return out


def baseline_cell(engine: Engine, side: int, tris: int, repeats: int, calls: int) -> dict:
    """Naive vs tiled forward, and tiled forward+backward, on one scene (medians of repeats)."""
    impl = engine.impl
    scenes, targets = _inputs(1, side, tris)
    args = (np.stack([s.triangles for s in scenes]), np.stack([s.background for s in scenes]),
            np.array([s.sigma for s in scenes]), targets)
    def timed(**kw):
        impl.forward_backward_timed(*args, 1, **kw)
        return float(np.median([impl.forward_backward_timed(*args, calls, **kw) for _ in range(repeats)]))
    naive, tiled, both = timed(backward=False, naive=True), timed(backward=False), timed(backward=True)
    return {"size": side, "triangles": tris, "naive_forward_ms": naive, "tiled_forward_ms": tiled,
            "tiled_forward_backward_ms": both, "speedup": naive / tiled, "grad_over_render": both / tiled}
