"""How far a fitted scene's colours are from their best for its geometry: a scene's render is
linear in its triangles' rgb and its background (docs/MODEL.md: C = bg * prod(1 - alpha_j) + sum
rgb_i * alpha_i * prod_{j > i}(1 - alpha_j)), so with the geometry and opacities held the
mse-optimal colours in [0, 1] are a box-constrained least-squares problem per channel. Solved
here in float64 (cyclic coordinate descent), the PSNR before and after.

    python tools/colour_solve.py SCENE.json IMAGE [SCENE.json IMAGE ...]
"""

import sys

import numpy as np

from trifit import load_image, reference as R
from trifit.scene import Scene


def colour_weights(scene: Scene) -> np.ndarray:
    """(T + 1, pixels): the background's weight, then each triangle's, in every pixel."""
    W, H = scene.width, scene.height
    px, py = R.pixel_centres(W, H)
    d, _ = R.signed_distance(R.vertices_px(scene.triangles, W, H), px, py, want_grad=False)
    alpha = scene.triangles[:, 9][:, None] * R._sigmoid(d / (scene.sigma * min(W, H)))
    weights, above = np.empty((len(alpha) + 1, alpha.shape[1])), np.ones(alpha.shape[1])
    for i in range(len(alpha) - 1, -1, -1):
        weights[i + 1] = alpha[i] * above
        above = above * (1 - alpha[i])
    weights[0] = above
    return weights


def box_least_squares(A: np.ndarray, b: np.ndarray, x: np.ndarray, sweeps: int = 200) -> np.ndarray:
    x = x.copy()
    for _ in range(sweeps):
        for i in range(len(x)):
            if A[i, i] > 1e-12:
                x[i] = np.clip(x[i] - (A[i] @ x - b[i]) / A[i, i], 0.0, 1.0)
    return x


def psnr(img: np.ndarray, target: np.ndarray) -> float:
    return float(10 * np.log10(1 / np.mean((np.clip(img, 0, 1) - target) ** 2)))


def main():
    args = sys.argv[1:]
    if not args or len(args) % 2:
        sys.exit(__doc__)
    for scene_path, image in zip(args[::2], args[1::2]):
        scene = Scene.from_json(open(scene_path, "rb").read())
        target = load_image(image, max(scene.width, scene.height)).astype(np.float64)
        weights = colour_weights(scene)
        colours = np.vstack([scene.background[None], scene.triangles[:, 6:9]])
        A, pixels = weights @ weights.T, target.reshape(-1, 3)
        solved = np.stack([box_least_squares(A, weights @ pixels[:, c], colours[:, c]) for c in range(3)], axis=1)
        before = psnr((weights.T @ colours).reshape(target.shape), target)
        after = psnr((weights.T @ solved).reshape(target.shape), target)
        print(f"{scene_path}: PSNR {before:.3f} -> {after:.3f} dB with solved colours "
              f"(largest change {np.abs(solved - colours).max():.3f})")


if __name__ == "__main__":
    main()
