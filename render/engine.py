"""The public engine: one interface over two backends.

``Engine(backend="gpu")`` runs the WGSL kernels through wgpu; ``Engine(backend="reference")`` runs
the float64 numpy oracle; ``"auto"`` takes the GPU adapter when one exists (Mesa's lavapipe
counts) and the reference otherwise, and says which in :attr:`Engine.description` and the logs.
Both backends expose the same batched methods; nothing above this module branches on which
one it has.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import focus, reference
from .errors import AdapterError, BatchError, DeviceLostError, SceneError
from .gpu.device import ADAPTER_ENV  # noqa: F401 (TRIFIT_ADAPTER, named for the engine's users)
from .gpu.timing import Counters, HostPhases, median_ms
from .limits import is_whole
from .scene import Scene

log = logging.getLogger("trifit")

BACKENDS = ("auto", "gpu", "reference")

#: What ``backend="auto"`` picks per adapter type. The GPU backend beat the float64 reference in
#: every forward+backward cell on every adapter type measured -- a software rasterizer (lavapipe)
#: on two CPU cores included (the crossover table: docs/PERFORMANCE.md) -- so auto takes the
#: GPU adapter whenever one exists; tests/test_auto.py pins this.
AUTO_POLICY = {
    "DiscreteGPU": "gpu",
    "IntegratedGPU": "gpu",  # not measured; an integrated GPU outruns the software one above
    "CPU": "gpu",
    "VirtualGPU": "gpu",
    "Unknown": "gpu",
}
MEASURED_CROSSOVER = {
    "DiscreteGPU": [(32, 16, 0.100, 6.876), (64, 32, 0.152, 54.017), (96, 64, 0.184, 276.163)],
    "CPU": [(32, 16, 2.646, 6.934), (64, 32, 9.232, 48.402)],
}


@dataclass
class Gradient:
    """Gradient of a loss with respect to a scene's numbers (docs/MODEL.md)."""

    triangles: np.ndarray  # (T, 10)
    background: np.ndarray  # (3,)


class ReferenceBackend:
    """The float64 oracle behind the batched backend interface (loops over the batch)."""

    name = "reference"

    def __init__(self):
        self.counters = Counters()
        self.host = HostPhases()
        self.adapter = {"name": "numpy float64 reference", "backend": "cpu", "type": "CPU",
                        "vendor": "", "driver": f"numpy {np.__version__}"}

    def render_batch(self, tris, bg, sigma, width, height, naive=False, transient=False):
        out = np.empty((len(tris), height, width, 3), dtype=np.float64)
        for b in range(len(tris)):
            with self.host.phase("forward"):
                out[b] = reference.render(_scene_of(tris[b], bg[b], sigma[b], width, height))
        return out

    def loss_and_grad_batch(self, tris, bg, sigma, targets, loss="mse", weights=None):
        B, T = tris.shape[:2]
        H, W = targets.shape[1:3]
        losses = np.empty(B)
        grads = np.zeros((B, T + 1, 10))
        for b in range(B):
            with self.host.phase("forward+backward"):
                losses[b], gt, gb = reference.loss_and_grad(
                    _scene_of(tris[b], bg[b], sigma[b], W, H), targets[b], loss, None if weights is None else weights[b])
            grads[b, :T] = gt
            grads[b, T, :3] = gb
        return losses, grads

    def removal_costs_batch(self, tris, bg, sigma, targets, transient=False, weights=None):
        from .placement import removal_costs

        out = np.empty(tris.shape[:2])
        for b in range(len(tris)):
            with self.host.phase("removal-costs"):
                out[b] = removal_costs(tris[b], bg[b], float(sigma[b]), targets[b], None if weights is None else weights[b])
        return out

    def mse_batch(self, tris, bg, sigma, targets, transient=False, weights=None):
        """(B,) each scene's (focus-weighted) mean squared error against its target, in float64."""
        H, W = targets.shape[1:3]
        out = np.empty(len(tris))
        for b in range(len(tris)):
            with self.host.phase("forward"):
                sq = (reference.render(_scene_of(tris[b], bg[b], sigma[b], W, H)) - targets[b]) ** 2
            w = None if weights is None else np.asarray(weights[b], dtype=np.float64)[..., None]
            out[b] = sq.mean() if w is None else float((sq * w).sum() / (3.0 * w.sum()))
        return out

    def fit_loop(self, *args, **kwargs):
        from .fitloop import ReferenceFitLoop

        return ReferenceFitLoop(self, *args, **kwargs)

    def pool_stats(self) -> dict[str, int]:
        return {"hits": 0, "misses": 0, "bytes": 0, "peak_bytes": 0, "in_use_bytes": 0, "idle_bytes": 0,
                "peak_in_use_bytes": 0}

    def gpu_phase_samples(self) -> dict[str, list[float]]:
        return {}


def _scene_of(tris, bg, sigma, width, height) -> Scene:
    return Scene(int(width), int(height), float(sigma), np.asarray(bg, np.float64),
                 np.asarray(tris, np.float64))


def _make_backend(backend: str, subgroups: bool | None, segmented: bool | None = None,
                  pixels_per_thread: int | None = None):
    """``backend``: one of BACKENDS (:class:`Engine` refuses others when it is made)."""
    if backend == "reference":
        return ReferenceBackend()
    from .gpu.backend import GpuBackend

    if backend == "gpu":
        return GpuBackend(subgroups=subgroups, segmented=segmented, pixels_per_thread=pixels_per_thread)
    try:
        gpu = GpuBackend(subgroups=subgroups, segmented=segmented, pixels_per_thread=pixels_per_thread)
    except AdapterError as exc:
        log.warning("no GPU adapter (%s); using the reference backend", exc)
        return ReferenceBackend()
    kind = gpu.adapter.get("type", "Unknown")
    if AUTO_POLICY.get(kind, "gpu") == "reference":
        log.info("adapter type %s: the reference backend is faster here (AUTO_POLICY)", kind)
        return ReferenceBackend()
    return gpu


def gpu_adapters() -> list[dict[str, str]]:
    """The GPU adapters ``TRIFIT_ADAPTER=K`` picks from (name, backend, type, ...), in its order:
    an engine made with ``TRIFIT_ADAPTER=K`` in the environment computes on the K-th
    (render/gpu/device.py). Empty when there is none (or TRIFIT_NO_GPU is set)."""
    import os

    if os.environ.get("TRIFIT_NO_GPU"):
        return []
    from .gpu.device import adapter_summary, list_adapters

    return [adapter_summary(a) for a in list_adapters()]


class Engine:
    """Render scenes and differentiate losses, on the GPU or with the float64 reference."""

    def __init__(self, backend: str = "auto", *, subgroups: bool | None = None, segmented: bool | None = None,
                 pixels_per_thread: int | None = None, deferred: bool = False):
        """``subgroups`` / ``segmented`` / ``pixels_per_thread`` (forward and backward: 1, 2, 4 or 8) force a kernel
        variant (None: what suits the adapter). ``deferred``: the backend is made at the engine's first
        use, not here, so that a caller's host work (reading and preparing its input) runs while the
        GPU comes up in the background (render/gpu/device.py ``warm_up``); an adapter error is then
        raised at that first use."""
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        self.requested = backend
        self._options = (subgroups, segmented, pixels_per_thread)
        self._impl = None
        self._making = threading.Lock()
        if not deferred:
            self._make()

    def _make(self):
        with self._making:
            if self._impl is None:
                self._impl = _make_backend(self.requested, *self._options)
                log.info("engine backend: %s on %s", self.backend, self.description)
        return self._impl

    @property
    def impl(self):
        """The backend (render/gpu/backend.py GpuBackend or render/reference.py's): made here at the
        first use of a deferred engine."""
        return self._impl if self._impl is not None else self._make()

    @impl.setter
    def impl(self, backend) -> None:
        self._impl = backend

    # ------------------------------------------------------------------ info
    @property
    def backend(self) -> str:
        """``"gpu"`` or ``"reference"``: what ``auto`` resolved to."""
        return self.impl.name

    @property
    def adapter(self) -> dict[str, str]:
        return dict(self.impl.adapter)

    @property
    def on_cpu(self) -> bool:
        """Whether it computes on a CPU: the reference backend, or a CPU adapter (lavapipe)."""
        return self.impl.adapter.get("type") == "CPU"

    @property
    def description(self) -> str:
        a = self.impl.adapter
        return f"{a['name']} ({a['backend']}, {a['type']})"

    def pool_stats(self) -> dict[str, int]:
        return self.impl.pool_stats()

    @property
    def device(self):
        """The wgpu device this engine computes on (None for the reference backend). A device
        reset replaces it: whoever draws the engine's buffers must follow (app/window.py)."""
        return self.impl.ctx.device if self.backend == "gpu" else None

    def device_lost(self, exc: BaseException) -> DeviceLostError | None:
        """``exc`` as a DeviceLostError where it is one or says the GPU device is lost (any call
        on a lost device fails so), else None: what a fitter recovers from."""
        if self.backend != "gpu":
            return exc if isinstance(exc, DeviceLostError) else None
        from .gpu.device import as_device_lost

        return as_device_lost(exc)

    def reset_device(self) -> None:
        """After a lost device: request a new one and a fresh backend on it (counters carry over)."""
        if self.backend != "gpu":
            return
        from .gpu.backend import GpuBackend
        from .gpu.device import get_context

        old = self.impl
        self.impl = GpuBackend(get_context(force_new=True), subgroups=old.subgroups, segmented=old.segmented,
                               pixels_per_thread=old.pixels_per_thread)
        self.impl.counters = old.counters
        log.warning("GPU device recreated: %s", self.description)

    def lose_device(self) -> None:
        """Testing aid: destroy the GPU device, as a driver reset would."""
        if self.backend == "gpu":
            self.impl.ctx.device.destroy()

    def counters(self) -> dict[str, int]:
        return self.impl.counters.as_dict()

    def timings(self) -> dict[str, dict[str, float]]:
        """Median ms per call: GPU passes (timestamps, where the adapter has them) and host phases."""
        gpu = getattr(self.impl, "timer", None)
        return {"gpu_ms": median_ms(gpu.samples) if gpu is not None else {},
                "host_ms": median_ms(self.impl.host.samples)}

    # ------------------------------------------------------------------ calls
    def render(self, scene: Scene, width: int | None = None, height: int | None = None) -> np.ndarray:
        """Render at ``width`` x ``height`` (default: the scene's frame; one of them alone keeps the
        frame's aspect, rounded as ``trifit render --width`` rounds it): float32 (H, W, 3) in [0, 1]."""
        W, H = _size(scene, width, height)
        return self.render_many([scene], W, H)[0]

    def render_many(self, scenes: Sequence[Scene], width: int, height: int, *, transient: bool = False) -> np.ndarray:
        """Render a batch of scenes with the same triangle count in one call: (B, H, W, 3).
        ``transient=True``: do not keep this shape's buffers cached (one-off shapes)."""
        tris, bg, sigma = _stack(scenes)
        W, H = _size(scenes[0], width, height)
        out = self.impl.render_batch(tris, bg, sigma, W, H, transient=transient)
        return np.clip(out, 0.0, 1.0).astype(np.float32)

    def loss_and_grad(self, scene: Scene, target: np.ndarray, loss: str = "mse", weights=None):
        """Loss of the scene rendered at the target's size against it, and the gradient.
        ``weights``: a focus map (H, W) in [0, 1] -- each pixel's loss term times its weight, the
        loss their weighted mean (render/focus.py, docs/MODEL.md) -- or, as ``Fitter`` takes it, a
        grey picture's path or PIL image of the target's aspect, resized to it."""
        losses, grads = self.loss_and_grad_many([scene], np.asarray(target)[None], loss, weights)
        return losses[0], grads[0]

    def loss_and_grad_many(self, scenes: Sequence[Scene], targets: np.ndarray, loss: str = "mse", weights=None):
        """``weights``: one focus map (H, W) for every scene (or a picture, as :meth:`loss_and_grad`
        takes it), or one each (B, H, W)."""
        if loss not in reference.LOSSES:
            raise ValueError(f"unknown loss {loss!r}; choose one of {', '.join(reference.LOSSES)}")
        targets = _check_targets(targets, len(scenes))
        tris, bg, sigma = _stack(scenes)
        losses, grads = self.impl.loss_and_grad_batch(tris, bg, sigma, targets, loss,
                                                      weights=_focus(weights, targets))
        T = tris.shape[1]
        out = [Gradient(g[:T].copy(), g[T, :3].copy()) for g in grads]
        return [float(v) for v in losses], out

    def removal_costs(self, scene: Scene, target: np.ndarray, *, transient: bool = False, weights=None) -> np.ndarray:
        """(T,): how much the summed squared error of the scene against ``target`` (rendered at the
        target's size) would grow if each triangle alone were removed -- what pruning ranks by.
        The GPU backend sums it in the backward's walk (float32), the reference in float64.
        ``transient=True``: do not keep this shape's buffers cached (one-off shapes).
        ``weights``: a focus map (H, W) or a picture (as :meth:`loss_and_grad` takes it): the growth
        of the weighted sum, each pixel's term times its weight."""
        targets = _check_targets(np.asarray(target)[None], 1)
        tris, bg, sigma = _stack([scene])
        costs = self.impl.removal_costs_batch(tris, bg, sigma, targets, transient=transient,
                                              weights=_focus(weights, targets))
        return np.asarray(costs[0], dtype=np.float64)


def _focus(weights, targets: np.ndarray) -> np.ndarray | None:
    """(B, H, W) weights for targets (B, H, W, 3): arrays as given (focus.check_batch), a picture
    (a path, a PIL image) read as ``Fitter`` reads one, resized to the targets' frame."""
    if isinstance(weights, (str, os.PathLike)) or type(weights).__module__.startswith("PIL."):
        weights = focus.focus_map(weights, targets.shape[1:3])
    return focus.check_batch(weights, targets)


def _size(scene: Scene, width, height) -> tuple[int, int]:
    for name, v in (("width", width), ("height", height)):
        if v is not None and not is_whole(v):
            raise SceneError(f"render {name} must be a whole number, got {v!r:.40}")
    W = int(width) if width is not None else scene.width
    H = int(height) if height is not None else scene.height
    if (width is None) != (height is None):  # one side given: the frame's aspect kept
        if width is None:
            W = max(1, round(H * scene.width / scene.height))
        else:
            H = max(1, round(W * scene.height / scene.width))
    if W <= 0 or H <= 0:
        raise SceneError(f"render size must be positive, got {W}x{H}")
    return W, H


def _stack(scenes: Sequence[Scene]):
    if len(scenes) == 0:
        raise BatchError("empty batch")
    counts = {s.n_triangles for s in scenes}
    if len(counts) != 1:
        raise BatchError(f"a batch must have one triangle count; got {sorted(counts)} (ragged batch refused)")
    try:
        tris = np.stack([np.asarray(s.triangles, dtype=np.float64).reshape(-1, 10) for s in scenes])
        bg = np.stack([np.asarray(s.background, dtype=np.float64).reshape(3) for s in scenes])
        sigma = np.array([s.sigma for s in scenes], dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise SceneError(f"a scene's triangles must be (T, 10) numbers and its background 3: {exc}") from None
    # the file's rules, on scene objects too (a NaN sigma rendered all NaN; alpha 5 rendered)
    if not (np.all(np.isfinite(tris)) and np.all(np.isfinite(bg)) and np.all(np.isfinite(sigma))):
        raise SceneError("a scene's numbers must be finite")
    if np.any(sigma <= 0):
        raise SceneError(f"a scene's sigma must be > 0, got {sigma.min()!r}")
    colours = np.concatenate([tris[..., 6:].ravel(), bg.ravel()])
    if colours.size and (colours.min() < 0 or colours.max() > 1):
        raise SceneError("a scene's colours, opacities and background must be in [0, 1]")
    return tris, bg, sigma


def _check_targets(targets, batch: int) -> np.ndarray:
    t = np.asarray(targets, dtype=np.float64)
    if t.ndim != 4 or t.shape[0] != batch or t.shape[3] != 3:
        raise BatchError(f"targets must be (B={batch}, H, W, 3); got {t.shape}")
    if not np.all(np.isfinite(t)):
        raise BatchError("targets must be finite")
    if t.size and (t.min() < 0 or t.max() > 1):  # (a uint8 image's 0-255 would score as if 255 times off)
        raise BatchError(f"targets must be in [0, 1] (float, as load_image gives), got values up to {t.max():g}")
    if t.shape[1] == 0 or t.shape[2] == 0:
        raise BatchError(f"targets must have pixels; got {t.shape}")
    return t
