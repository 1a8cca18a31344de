"""Where the backward kernel's time goes (issue #19): the big-fit cells of
``tools/profile_time_to_quality.py cells`` with timing-only variants of the backward, each a copy
of the staged package with one part of the kernel taken out (their gradients are wrong; only the
passes' timestamps mean anything). On a lent GPU after ``. tools/device_env.sh``:

    python3 tools/backward_ablation.py [--package /tmp/trifit-pkg] [--repeats 5] [--variants a,b]
    python3 tools/backward_ablation.py --package PKG --cell fit:176:150 --calls 5   # a CPU adapter

Variants: ``full`` (the kernel as it is, run first and last for drift), ``no subgroup sums`` (no lane
exchanges: each subgroup parks its lanes' own values), ``no sums`` (no subgroup sums, no parking
in workgroup memory and no gather: each thread adds its values into a register that the gather
returns, so the arithmetic stays live), ``no sums or gradient`` (also the gradient's arithmetic
after the coverage: the walk, the distance and its gradient remain).
"""

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

NO_SUBGROUP_SUMS = [
    ("reduce_subgroup.wgsl", "    let any_live = subgroupAny(live);", "    let any_live = false;"),
]
NO_SUMS = [
    ("reduce_subgroup.wgsl", "fn stash10(g: Grad10, li: u32, sg: SgIn, j: u32, live: bool, place: u32) {",
     "var<private> kept: vec4f;\nfn stash10(g: Grad10, li: u32, sg: SgIn, j: u32, live: bool, place: u32) {\n"
     "    kept += g.a + g.b + vec4f(g.c, 0.0, 0.0);\n    if (li < 100000u) { return; }"),
    ("reduce_subgroup.wgsl", "    let base = q * MAX_SUBGROUPS;",
     "    if (q < 100000u) { return kept[q % 4u]; }\n    let base = q * MAX_SUBGROUPS;"),
]
NO_GRADIENT = NO_SUMS + [
    ("backward.wgsl", "    if (frame.removal_costs != 0u) {\n        // Removing",
     "    if (frame.removal_costs == 7u) {\n        // Removing"),
    ("backward.wgsl", "        g.a = g_d * vec4f(h.dg.g0 * w.wh, h.dg.g1 * w.wh);", "        g.a = vec4f(h.alpha);"),
    ("backward.wgsl", "        g.b = vec4f(g_d * h.dg.g2 * w.wh, g_rgb.rg);", "        g.b = vec4f(h.cov);"),
]
VARIANTS = {"full": [], "no subgroup sums": NO_SUBGROUP_SUMS, "no sums": NO_SUMS,
            "no sums or gradient": NO_GRADIENT, "full again": []}


def staged_variant(package: str, name: str, edits) -> str:
    dest = f"/tmp/ablation-{name.replace(' ', '_').replace(',', '')}"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(package, dest)
    for fname, old, new in edits:
        path = Path(dest, "trifit", "shaders", fname)
        text = path.read_text()
        if old not in text:
            raise SystemExit(f"variant {name!r}: {fname} no longer has the text it edits; update this script")
        path.write_text(text.replace(old, new))
    return dest


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--package", default="/tmp/trifit-pkg", help="the staged package (tools/stage_package.sh)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--cell", action="append", metavar="KIND:SIDE:TRIS", help="cells other than the big ones")
    p.add_argument("--calls", type=int, default=25, help="calls per timed submission")
    a = p.parse_args()
    extra = [arg for c in a.cell or [] for arg in ("--cell", c)] + ["--calls", str(a.calls)]
    for name in a.variants.split(","):
        dest = staged_variant(a.package, name, VARIANTS[name])
        site = [s for s in os.environ.get("PYTHONPATH", "").split(":") if s and s != a.package]
        env = dict(os.environ, PYTHONPATH=":".join([dest, *site]))
        print(f"### {name}", flush=True)
        r = subprocess.run([sys.executable, str(ROOT / "tools" / "profile_time_to_quality.py"), "cells",
                            "--repeats", str(a.repeats), *extra], env=env, capture_output=True, text=True)
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith(("fwdbwd", "fit"))]
        print("\n".join(lines) if r.returncode == 0 else r.stderr[-2000:], flush=True)


if __name__ == "__main__":
    main()
