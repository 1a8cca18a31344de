"""Soak test (issue #7, not run in CI): fit for a long time with live changes of the triangle
count and sigma every few seconds; sample host RSS, malloc's bytes in use and the buffer pool's
bytes; report whether RSS and the pool stay flat (within 5%) after warm-up.

    python tools/soak.py --minutes 30 --json docs/bench/soak-lavapipe.json
"""

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from trifit import Engine, Fitter  # noqa: E402
from trifit.hostmem import malloc_in_use  # noqa: E402
from trifit.resources import sample_path  # noqa: E402


def malloc_mb() -> float:
    """What glibc's malloc has handed out and not had back, in MiB (0 off glibc; trifit.hostmem)."""
    return (malloc_in_use() or 0) / 2**20


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--size", type=int, default=96)
    p.add_argument("--change-every", type=float, default=3.0, help="seconds between live changes")
    p.add_argument("--warmup", type=float, default=0.2, help="fraction of the run treated as warm-up")
    p.add_argument("--json", default=None)
    a = p.parse_args()
    eng = Engine("auto")
    f = Fitter(sample_path("chelsea.png"), triangles=100, size=a.size, seed=0, engine=eng)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    end = t0 + a.minutes * 60
    next_change = t0 + a.change_every
    samples = []
    changes = 0
    while time.perf_counter() < end:
        st = f.step(25)
        now = time.perf_counter()
        if now >= next_change:
            f.set_triangles(int(rng.integers(50, 200)))
            f.set_sigma(float(rng.uniform(0.4, 3.0)) if rng.uniform() < 0.8 else None)
            changes += 1
            next_change = now + a.change_every
        samples.append({"t": now - t0, "iteration": f.iteration, "rss_mb": rss_mb(), "malloc_mb": malloc_mb(),
                        "pool_bytes": eng.pool_stats()["bytes"], "psnr": st.psnr, "triangles": f.n_triangles})
    warm = [s for s in samples if s["t"] >= a.warmup * a.minutes * 60]
    def spread(key):
        v = np.array([s[key] for s in warm], dtype=float)
        return {"min": float(v.min()), "max": float(v.max()), "first": float(v[0]), "last": float(v[-1]),
                "max_over_min_pct": float(100 * (v.max() / v.min() - 1))}
    report = {"adapter": eng.adapter, "backend": eng.backend, "date": time.strftime("%Y-%m-%d %H:%M"),
              "minutes": a.minutes, "size": a.size, "iterations": f.iteration, "live_changes": changes,
              "rss_mb": spread("rss_mb"), "malloc_mb": spread("malloc_mb"), "pool_bytes": spread("pool_bytes"),
              "flat_within_5pct": spread("rss_mb")["max_over_min_pct"] <= 5 and spread("pool_bytes")["max_over_min_pct"] <= 5,
              "samples": samples[:: max(1, len(samples) // 400)]}
    print(json.dumps({k: v for k, v in report.items() if k != "samples"}, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
