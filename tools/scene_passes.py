"""The forward+backward passes on a saved scene against its image -- a fitted scene, where the
bench's random ones have no opaque triangles -- with per-pass timestamps. ``--recompute-below 0``
switches off the backward's re-compositing beneath nearly opaque entries (timing only: its
gradients lose accuracy), to see what the re-compositing costs.

    python tools/scene_passes.py SCENE.json IMAGE [--size 176] [--repeats 5] [--calls 5] [--recompute-below 0]
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import trifit.gpu.workspace as workspace  # noqa: E402
from trifit import Engine, Scene, load_image  # noqa: E402
from trifit.resources import sample_path  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("scene")
    p.add_argument("image", help="the target: a bundled sample's name or a path")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--calls", type=int, default=5, help="calls per timed submission")
    p.add_argument("--recompute-below", type=float, help=f"in place of {workspace.RECOMPUTE_BELOW}")
    a = p.parse_args()
    threshold = workspace.RECOMPUTE_BELOW
    if a.recompute_below is not None:
        workspace.RECOMPUTE_BELOW = a.recompute_below
    scene = Scene.load(a.scene)
    image = a.image if "/" in a.image else sample_path(a.image)
    target = load_image(image, max(scene.width, scene.height)).astype(np.float32)[None]
    eng = Engine("gpu")
    impl = eng.impl
    tris, bg, sigma = scene.triangles[None], scene.background[None], np.array([scene.sigma])
    opaque = int(np.sum(scene.triangles[:, 9] > 1 - threshold))
    impl.forward_backward_timed(tris, bg, sigma, target, 1)
    times = [impl.forward_backward_timed(tris, bg, sigma, target, a.calls) for _ in range(a.repeats)]
    impl.timer.samples.clear()
    impl.loss_and_grad_batch(tris, bg, sigma, target)
    passes = {k: round(v[-1], 4) for k, v in impl.timer.samples.items() if v}
    print(f"{eng.description}: {scene.width}x{scene.height}, {len(scene.triangles)} triangles ({opaque} with opacity "
          f"above 1 - {threshold:g}; re-compositing below {workspace.RECOMPUTE_BELOW:g}); forward+backward "
          f"median {np.median(times):.3f} ms (min {min(times):.3f} max {max(times):.3f}); passes (one call) {passes}")


if __name__ == "__main__":
    main()
