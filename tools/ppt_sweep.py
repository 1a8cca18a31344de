"""Pixels per thread of the forward and backward kernels (1, 2, 4, 8) on this adapter, for the
forward+backward and fit-iteration cells of `trifit bench` (docs/PERFORMANCE.md, round 7).

    python tools/ppt_sweep.py [--repeats 7] [--calls 25] [--json OUT]
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trifit import Engine  # noqa: E402
from trifit.bench import bench_cell  # noqa: E402

CELLS = [  # (kind, batch, side, triangles)
    ("fwdbwd", 1, 128, 64),
    ("fwdbwd", 1, 256, 512),
    ("fwdbwd", 16, 256, 32),
    ("fwdbwd", 64, 128, 64),
    ("fit", 1, 176, 150),
    ("fit100", 1, 176, 150),
]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--calls", type=int, default=25)
    p.add_argument("--json")
    a = p.parse_args()
    rows = []
    for kind, batch, side, tris in CELLS:
        for ppt in (1, 2, 4, 8):
            eng = Engine("gpu", pixels_per_thread=ppt)
            r = bench_cell(eng, kind, batch, side, tris, a.repeats, a.calls)
            r["pixels_per_thread"] = ppt
            rows.append(r)
            print(f"{kind:7s} B={batch:<3d} {side}^2 x {tris:<4d} ppt {ppt}: median {r['median_ms']:.3f} ms "
                  f"({r['min_ms']:.3f}-{r['max_ms']:.3f})  passes "
                  + ", ".join(f"{k} {v:.3f}" for k, v in r.get("phases_ms", {}).items()), flush=True)
    print("adapter:", Engine("gpu").description)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
