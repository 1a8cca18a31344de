"""The issue-#5 command, as a user runs it: `trifit fit IMAGE --tris 150 --size 176 --seed S
--time-limit SEC`, each run a fresh process, each saved scene scored by the float64 reference
engine against the working-size target (as render/quality.py scores). One line per run.

    python tools/cli_fits.py --time-limit 12 --runs 3 [--images astronaut.png,chelsea.png,/path/x.png]
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from trifit import Scene, load_image  # noqa: E402
from trifit.quality import score  # noqa: E402
from trifit.resources import sample_path  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--images", default="astronaut.png,chelsea.png")
    p.add_argument("--time-limit", type=float, default=12.0)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tris", type=int, default=150)
    p.add_argument("--json", help="also write the rows here")
    p.add_argument("--fit-args", default="", help="more options for each fit, as one string (\"--replicas 3\")")
    a = p.parse_args()
    rows = []
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} trifit fit IMAGE --tris {a.tris} --size 176 --seed {a.seed} "
          f"--time-limit {a.time_limit:g} {a.fit_args}".rstrip(), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for image in a.images.split(","):
            path = sample_path(image) if "/" not in image else image
            target = load_image(path, 176).astype(np.float64)
            for run in range(a.runs):
                out = Path(tmp) / f"{Path(path).stem}-{run}.json"
                cmd = [sys.executable, "-m", "trifit.cli", "fit", path, "--tris", str(a.tris), "--size", "176",
                       "--seed", str(a.seed), "--time-limit", f"{a.time_limit:g}", "--quiet", "-o", str(out),
                       *a.fit_args.split()]
                subprocess.run(cmd, check=True, cwd=ROOT)
                scene = Scene.load(out)
                meta = scene.meta
                r = {"image": Path(path).name, "run": run, "iterations": meta.get("iterations"),
                     "adapter": meta.get("adapter"), "sigma_px": scene.sigma * min(scene.width, scene.height),
                     **score(scene, target)}
                rows.append(r)
                print(f"{r['image']:28s} run {run} PSNR {r['psnr']:.2f} SSIM {r['ssim'] or float('nan'):.3f} "
                      f"iterations {r['iterations']} sigma {r['sigma_px']:.2f} px ({r['adapter']})", flush=True)
    for image in dict.fromkeys(r["image"] for r in rows):
        v = [r["psnr"] for r in rows if r["image"] == image]
        print(f"# {image}: mean {np.mean(v):.2f} ({min(v):.2f}-{max(v):.2f}) over {len(v)} runs", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
