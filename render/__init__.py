"""trifit's engine: soft triangles, a float64 reference and a WGSL/wgpu GPU backend, and the fitter.

The engine (this folder, render/, installed as the package ``trifit``) never imports Qt; the
desktop app is ``trifit.app`` (app/). Public API::

    import trifit
    scene = trifit.Scene.load("scene.json")
    engine = trifit.Engine(backend="auto")             # "gpu" | "reference" | "auto"
    img = engine.render(scene)                           # float32 (H, W, 3) in [0, 1]
    loss, grad = engine.loss_and_grad(scene, target)     # grad.triangles (T, 10), grad.background (3,)
    fitter = trifit.Fitter(target, triangles=150, size=176, seed=0, engine=engine)
    stats = fitter.step(100)
"""

__version__ = "0.1.0"

from .engine import Engine, Gradient  # noqa: E402
from .errors import AdapterError, BatchError, ImageError, SceneError, TrifitError  # noqa: E402
from .fitter import BatchFitter, Fitter  # noqa: E402
from .imageio import load_image  # noqa: E402
from .run import FitRun, Progress, StopConditions, replay_run  # noqa: E402
from .scene import Scene  # noqa: E402

__all__ = [
    "AdapterError", "BatchError", "BatchFitter", "Engine", "FitRun", "Fitter", "Gradient", "ImageError",
    "Progress", "Scene", "replay_run",
    "SceneError", "StopConditions", "TrifitError", "__version__", "load_image",
]
