"""Where a time-limited fit's GPU idles: each submission of the fit bracketed by two timestamps on
the GPU, beside the host's clock at its submissions, readbacks and events.

    python tools/gpu_timeline.py [--seconds 1] [--size 176] [--tris 150] [--seed 0] [--image astronaut.png]
                                 [--plain] [--json OUT] [--set KEY=VALUE] [--variant default|spin|ratio]
    python tools/gpu_timeline.py --analyse OUT          # one run's chunk ends split, its idle by operations
    python tools/gpu_timeline.py --summarise DIR        # tl-VARIANT-IMAGE-SEED.json files: rows and medians

Every ``queue.submit`` of the timed fit goes as [a pass writing timestamp 2i, the fit's command
buffers, a pass writing timestamp 2i + 1] (command buffers encoded before the fit, so the
bracketing adds one Python call a submission). A timestamp written after the last command is the
moment the GPU finished it, so between two submissions ``begin(i+1) - end(i)`` is the GPU's idle,
measured on the GPU's own clock. The host's side of each gap comes from its own clock: when the
readback that waited for submission i returned (``readback``), and when submission i+1 was
handed to the queue. Within a gap the host's turn (readback returned -> next submit) is host work;
the rest (idle - host turn) is the time from the GPU finishing to the host seeing the map done,
plus from the submit call to the GPU starting -- no clock alignment is needed for that split.

Gaps are grouped by what the host did in them: an event (the strategy's ``on_event``), a chunk
end without one, or the parts inside a chunk (no readback between). ``--plain`` runs the same fit
without the bracketing first, for the iterations it costs.
"""

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profile_time_to_quality import _settings  # noqa: E402  (--set KEY=VALUE, parsed as that tool does)

from trifit import Engine, Fitter, StopConditions, load_image  # noqa: E402
from trifit.resources import sample_path  # noqa: E402

#: the events' operations timed (FitState's methods): which of them a gap's event ran
OPERATIONS = ("add", "keep", "place_on_device", "replace_on_device", "stopped_on_device", "select_replicas",
              "use_schedule", "to_full_size", "sigma_errors", "most_costly")
CAPACITY = 4096  # timestamps in the query set (WebGPU's cap): 2,048 submissions


def _brackets(device, query_set, n: int):
    """n pairs of finished command buffers, each a pass writing timestamp 2i (begin) or 2i + 1."""
    from wgpu.backends.wgpu_native.extras import write_timestamp

    out = []
    for i in range(n):
        pair = []
        for q in (2 * i, 2 * i + 1):
            enc = device.create_command_encoder()
            cpass = enc.begin_compute_pass()
            write_timestamp(cpass, query_set, q)
            cpass.end()
            pair.append(enc.finish())
        out.append(pair)
    return out


class _SpinningPolls:
    """wgpu-native's entry points with every device poll non-blocking: readback.py's wait for a
    map then spins through its loop of polls (an experiment: how much of a chunk end's wake-up
    is the blocking poll's). Its guard against a map that never completes is off with it."""

    def __init__(self, lib):
        self._lib = lib

    def __getattr__(self, name):
        return getattr(self._lib, name)

    def wgpuDevicePoll(self, device, wait, index):
        self._lib.wgpuDevicePoll(device, False, index)
        return False  # (never "idle": the loop spins until the map's callback has run)


def _variant(name: str) -> None:
    """Patch the process for an experiment: "spin" (readbacks poll without blocking), "ratio"
    (each part of a chunk as long as the whole GPU/host ratio allows: render/gpu/fitloop.py
    PART_SLACK = 1, as before it was 0.5)."""
    from trifit.gpu import fitloop, readback

    if name == "spin":
        native = readback.native()
        native.lib = _SpinningPolls(native.lib)
    elif name == "ratio":
        fitloop.PART_SLACK = 1.0
    elif name != "default":
        raise SystemExit(f"unknown variant {name}")


def _timed(orig, record):
    """``orig`` wrapped so that each call hands its start and end on the host's clock to ``record``."""
    def call(*args, **kw):
        t0 = time.perf_counter()
        try:
            return orig(*args, **kw)
        finally:
            record(t0, time.perf_counter())
    return call


def fit(a, engine, target, bracket: bool) -> dict:
    import wgpu
    from wgpu.backends import wgpu_native as wn

    from trifit.gpu import readback
    from trifit.strategy import FixedStrategy

    Fitter(target, triangles=a.tris, size=a.size, engine=engine, **_settings(a)).close()  # pipelines first
    device = engine.impl.ctx.device
    subs, reads, events = [], [], []  # host clock (s): (before, after), (start, end, submissions before), ditto
    if bracket:
        qs = device.create_query_set(type=wgpu.QueryType.timestamp, count=CAPACITY)
        pairs = _brackets(device, qs, CAPACITY // 2)
    orig_submit, orig_read = wn.GPUQueue.submit, readback._Native.read
    orig_events = {cls: vars(cls)["on_event"] for cls in (FixedStrategy, *FixedStrategy.__subclasses__())
                   if "on_event" in vars(cls)}

    def submit(queue, buffers):
        i = len(subs)
        t0 = time.perf_counter()
        if bracket and i < len(pairs):
            orig_submit(queue, [pairs[i][0], *buffers, pairs[i][1]])
        else:
            orig_submit(queue, buffers)
        subs.append((t0, time.perf_counter()))

    ops = []  # (start, end, name): the events' operations (as tools/profile_events.py names them)
    from trifit import fitstate

    orig_ops = {(fitstate.FitState, n): getattr(fitstate.FitState, n) for n in OPERATIONS}
    wn.GPUQueue.submit = submit
    readback._Native.read = _timed(orig_read, lambda t0, t1: reads.append((t0, t1, len(subs))))
    for cls, orig in orig_events.items():
        cls.on_event = _timed(orig, lambda t0, t1: events.append((t0, t1, len(subs))))
    for (cls, name), orig in orig_ops.items():
        setattr(cls, name, _timed(orig, lambda t0, t1, name=name: ops.append((t0, t1, name))))
    try:
        t0 = time.perf_counter()
        f = Fitter(target, triangles=a.tris, size=a.size, seed=a.seed, engine=engine, **_settings(a))
        f.run(StopConditions(time_limit=a.seconds))
        wall = time.perf_counter() - t0
    finally:
        wn.GPUQueue.submit, readback._Native.read = orig_submit, orig_read
        for cls, orig in orig_events.items():
            cls.on_event = orig
        for (cls, name), orig in orig_ops.items():
            setattr(cls, name, orig)
    out = {"bracketed": bracket, "iterations": f.iteration, "wall_s": wall, "submissions": len(subs),
           "psnr": f.step(0).psnr}
    f.close()
    if bracket:
        n = min(len(subs), len(pairs))
        buf = device.create_buffer(size=n * 16, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
        dst = device.create_buffer(size=n * 16, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        enc = device.create_command_encoder()
        enc.resolve_query_set(qs, 0, 2 * n, buf, 0)
        enc.copy_buffer_to_buffer(buf, 0, dst, 0, n * 16)
        orig_submit(device.queue, [enc.finish()])
        ts = np.frombuffer(readback.read_ranges(dst, [(0, n * 16)])[0], dtype=np.uint64).reshape(n, 2) / 1e6
        out.update(_gaps(ts, subs[:n], reads, events, t0))
        out["raw"] = {"t0": t0, "gpu_ms": ts.tolist(), "submits": subs, "reads": reads, "events": events, "ops": ops}
    return out


def _overlap(intervals, lo: float, hi: float) -> float:
    """Seconds of ``intervals`` [(start, end, ...)] inside [lo, hi]."""
    return sum(max(0.0, min(e, hi) - max(s, lo)) for s, e, *_ in intervals)


def _gaps(ts, subs, reads, events, t0) -> dict:
    """The GPU's idle before each submission (ms), grouped by what the host did between handing
    over the submission before and this one: ran event code ("event"), waited for a readback
    but ran no event ("chunk end"), or neither ("within a chunk": the host's encoding was
    behind the GPU). ``host_turn``: from the last readback returned in the gap to the submit
    (host work the GPU waited for); ``rest`` = idle - host turn (the map's wake-up and the
    submission's start); ``event``: event code run in the gap."""
    busy = ts[:, 1] - ts[:, 0]
    idle = np.maximum(ts[1:, 0] - ts[:-1, 1], 0.0)
    groups: dict[str, list] = defaultdict(list)
    for i in range(len(idle)):
        lo, hi = subs[i][1], subs[i + 1][0]
        returned = [e for s, e, _ in reads if lo <= e <= hi]
        in_event = _overlap(events, lo, hi) * 1e3
        waited = _overlap(reads, lo, hi) * 1e3
        turn = (hi - max(returned)) * 1e3 if returned else 0.0
        kind = "event" if in_event > 0 else "chunk end" if returned else "within a chunk"
        groups[kind].append((idle[i], turn, in_event, waited, (hi - lo) * 1e3))
    res = {"gpu_span_ms": float(ts[-1, 1] - ts[0, 0]), "gpu_busy_ms": float(busy.sum()),
           "gpu_idle_ms": float(idle.sum()), "first_submission_after_start_ms": (subs[0][0] - t0) * 1e3,
           "gaps": {}}
    for kind, rows in groups.items():
        r = np.array(rows)
        cols = {"idle": r[:, 0], "host_turn": r[:, 1], "rest": r[:, 0] - r[:, 1], "event": r[:, 2],
                "readback_wait": r[:, 3], "host_gap": r[:, 4]}
        res["gaps"][kind] = {"count": len(r), **{f"{k}_ms_total": float(v.sum()) for k, v in cols.items()},
                             **{f"{k}_ms_median": float(np.median(v)) for k, v in cols.items()}}
    return res


def analyse(run: dict) -> dict:
    """A run's raw timeline, on one clock: the host's = the GPU's + an offset, taken as the
    largest (host submit - GPU begin) over the submissions (so the quickest start of a submission
    on an idle GPU counts as instant, and every other latency is measured from there). Each gap
    that ends a chunk (a readback returned in it) splits into: the GPU finishing -> the readback
    returning ("wake"), the readback -> the first event operation or the submit ("after read"),
    the events' operations ("ops"), the last operation -> the submit ("to submit"), the submit
    call -> the GPU beginning ("start"). And the GPU's idle by the operations run in its gap."""
    raw = run["raw"]
    ts = np.array(raw["gpu_ms"]) / 1e3  # s
    subs = np.array(raw["submits"])
    n = len(ts)
    off = float(np.max(subs[:n, 0] - ts[:, 0]))
    begin, end = ts[:, 0] + off, ts[:, 1] + off  # host clock
    reads = [(s_, e_) for s_, e_, _ in raw["reads"]]
    ops = raw["ops"]
    parts = defaultdict(float)
    by_ops = defaultdict(lambda: [0, 0.0])
    for i in range(n - 1):
        lo, hi = subs[i, 1], subs[i + 1, 0]
        idle = max(0.0, begin[i + 1] - end[i])
        names = sorted({name for s_, e_, name in ops if e_ > lo and s_ < hi})
        key = "+".join(names) or "-"
        returned = [e_ for s_, e_ in reads if lo <= e_ <= hi]
        if returned:
            key = "chunk end: " + key
            back = max(returned)
            in_ops = [(max(s_, back), min(e_, hi)) for s_, e_, _ in ops if e_ > back and s_ < hi]
            first_op = min((a for a, _ in in_ops), default=hi)
            last_op = max((b for _, b in in_ops), default=back)
            parts["wake"] += max(0.0, back - end[i])
            parts["after read"] += first_op - back
            parts["ops"] += _overlap(in_ops, back, hi)
            parts["to submit"] += hi - max(last_op, back) if in_ops else 0.0
            parts["start"] += max(0.0, begin[i + 1] - hi)
            parts["chunk ends"] += 1
            parts["idle at chunk ends"] += idle
        else:
            key = "no readback: " + key
        by_ops[key][0] += 1
        by_ops[key][1] += idle
    return {"offset_s": off, "chunk_end_ms": {k: (v if k == "chunk ends" else v * 1e3) for k, v in parts.items()},
            "submit_call_ms_median": float(np.median(subs[:, 1] - subs[:, 0]) * 1e3),
            "idle_by_ops_ms": {k: {"gaps": c, "idle_ms": t * 1e3} for k, (c, t) in
                               sorted(by_ops.items(), key=lambda kv: -kv[1][1])}}


def summarise(folder: Path) -> None:
    """Per-fit rows and each variant's medians from ``--json`` files named
    tl-VARIANT-IMAGE-SEED.json in ``folder`` (how the docs/bench/ timelines were laid out)."""
    rows: dict[str, list] = defaultdict(list)
    for path in sorted(folder.glob("tl-*-*-*.json")):
        variant, image, seed = path.stem[3:].rsplit("-", 2)
        run = json.loads(path.read_text())["runs"][-1]
        ends = analyse(run)["chunk_end_ms"]
        within = run["gaps"].get("within a chunk", {}).get("idle_ms_total", 0.0)
        rows[variant].append((f"{image} s{seed}", run["iterations"], run["gpu_busy_ms"], run["gpu_idle_ms"],
                              ends.get("chunk ends", 0), *(ends.get(k, 0.0) for k in
                              ("wake", "after read", "ops", "to submit", "start")), within, run["psnr"]))
    head = "fit                 its   busy   idle  ends   wake  after   ops  to-sub  start  within  PSNR"
    for variant, rs in rows.items():
        print(f"== {variant}\n{head}")
        for name, *v in rs:
            print(f"{name:16} {v[0]:6d} {v[1]:6.1f} {v[2]:6.1f} {v[3]:5.0f} {v[4]:6.1f} {v[5]:6.1f} {v[6]:6.1f} "
                  f"{v[7]:6.1f} {v[8]:6.1f} {v[9]:6.1f} {v[10]:6.3f}")
        med = np.median(np.array([r[1:] for r in rs], float), axis=0)
        print(f"{'median':16} {med[0]:6.0f} {med[1]:6.1f} {med[2]:6.1f} {med[3]:5.0f} {med[4]:6.1f} {med[5]:6.1f} "
              f"{med[6]:6.1f} {med[7]:6.1f} {med[8]:6.1f} {med[9]:6.1f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--size", type=int, default=176)
    p.add_argument("--tris", type=int, default=150)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--image", default="astronaut.png")
    p.add_argument("--plain", action="store_true", help="first the same fit without the bracketing")
    p.add_argument("--json", help="write the results here too")
    p.add_argument("--analyse", metavar="JSON", help="only analyse a --json file written before")
    p.add_argument("--summarise", metavar="DIR", help="only summarise the tl-VARIANT-IMAGE-SEED.json files in DIR")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="a fit setting (repeatable)")
    p.add_argument("--variant", default="default", help="an experiment: default, spin or ratio (_variant)")
    a = p.parse_args()
    if a.summarise:
        summarise(Path(a.summarise))
        return
    if a.analyse:
        for r in json.loads(Path(a.analyse).read_text())["runs"]:
            if "raw" in r:
                print(json.dumps(analyse(r), indent=1))
        return
    engine = Engine("gpu")
    _variant(a.variant)
    target = load_image(sample_path(a.image), a.size)
    runs = ([fit(a, engine, target, False)] if a.plain else []) + [fit(a, engine, target, True)]
    for r in runs:
        print(f"{'bracketed' if r['bracketed'] else 'plain':9} {r['iterations']:6d} iterations in {r['wall_s']:.3f} s, "
              f"{r['submissions']} submissions, PSNR {r['psnr']:.2f}")
        if "gaps" not in r:
            continue
        print(f"  GPU: span {r['gpu_span_ms']:.1f} ms, busy {r['gpu_busy_ms']:.1f}, idle {r['gpu_idle_ms']:.1f}; "
              f"first submission {r['first_submission_after_start_ms']:.1f} ms after the Fitter's start")
        print("  gaps before a submission  count  idle ms (total, median)  host turn  rest  event code in the gap")
        for kind, g in r["gaps"].items():
            print(f"  {kind:24} {g['count']:6d}  {g['idle_ms_total']:8.1f} {g['idle_ms_median']:6.3f}      "
                  f"{g['host_turn_ms_total']:7.1f} {g['host_turn_ms_median']:6.3f}  {g['rest_ms_total']:6.1f} "
                  f"{g['rest_ms_median']:6.3f}  {g['event_ms_total']:7.1f} {g['event_ms_median']:6.3f}")
    if a.json:
        Path(a.json).write_text(json.dumps({"adapter": engine.adapter, "args": vars(a), "runs": runs},
                                           indent=1, default=float))


if __name__ == "__main__":
    main()
