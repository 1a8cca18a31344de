"""Paired summary of tools/device_cli_pairs.sh's rows: per image, each
tree's median PSNR (min-max) over the seeds and the mean paired difference tree - base with its
standard error; then the mean
over images of each image's mean difference, and how many images gained.

    python tools/pair_summary.py pairs.json   # {"TREE SEED": rows}: each TREE against the one named base
"""

import json
import sys
from pathlib import Path

import numpy as np


def main() -> None:
    rows = {}
    for key, found in json.loads(Path(sys.argv[1]).read_text()).items():
        tree, seed = key.rsplit(" ", 1)
        for r in found:
            rows[(tree, r["image"], int(seed))] = r
    images = sorted({img for _, img, _ in rows})
    for tree in sorted({t for t, _, _ in rows} - {"base"}):
        summarise(rows, images, tree)


def summarise(rows: dict, images: list, tree: str) -> None:
    """Each image's rows of ``tree`` against base's of the same seeds."""
    means = []
    for img in images:
        seeds = sorted(s for t, i, s in rows if t == "base" and i == img and (tree, img, s) in rows)
        if not seeds:
            continue
        base = np.array([rows[("base", img, s)]["psnr"] for s in seeds])
        new = np.array([rows[(tree, img, s)]["psnr"] for s in seeds])
        d = new - base
        se = d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else float("nan")
        its = [rows[(t, img, s)]["iterations"] for t in ("base", tree) for s in seeds]
        print(f"{img:28s} seeds {len(seeds)}: base {np.median(base):.3f} ({base.min():.3f}-{base.max():.3f}) "
              f"{tree} {np.median(new):.3f} ({new.min():.3f}-{new.max():.3f}) paired {d.mean():+.3f} ({se:.3f}) "
              f"iterations median {int(np.median(its[:len(seeds)]))} / {int(np.median(its[len(seeds):]))}")
        means.append(d.mean())
    if len(means) > 1:
        print(f"# {tree}, over {len(means)} images: mean of the paired means {np.mean(means):+.3f}, "
              f"{sum(m > 0 for m in means)} of {len(means)} up")


if __name__ == "__main__":
    main()
