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

# What ``import trifit`` names, loaded on first use (PEP 562): the CLI's --version and --help,
# and any tool that needs one module, never pay for numpy, the engine or wgpu.
_LAZY = {
    "Engine": "engine", "Gradient": "engine",
    "AdapterError": "errors", "BatchError": "errors", "ImageError": "errors", "SceneError": "errors",
    "SettingsError": "errors", "TrifitError": "errors",
    "BatchFitter": "fitter", "Fitter": "fitter",
    "load_image": "imageio",
    "FitRun": "run", "Progress": "run", "StopConditions": "run", "replay_run": "run",
    "Scene": "scene",
}

__all__ = [
    "AdapterError", "BatchError", "BatchFitter", "Engine", "FitRun", "Fitter", "Gradient", "ImageError",
    "Progress", "Scene", "replay_run",
    "SceneError", "SettingsError", "StopConditions", "TrifitError", "__version__", "load_image",
]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'trifit' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
