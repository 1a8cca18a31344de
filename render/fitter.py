"""The fitter: N soft triangles fitted to a target image by Adam through the engine.

``Fitter`` owns the schedule, initialisation, live changes (triangle count, sigma, learning rate),
stop conditions and history. The iterations themselves run in a backend's fit loop -- on the
device for the GPU (render/gpu/fitloop.py), in numpy for the reference -- obtained through the
engine's backend; this module never branches on which.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from . import __version__
from .engine import Engine
from .errors import TrifitError
from .fitloop import FitSettings, Schedule, logit, raw_from_scene
from .imageio import as_target
from .scene import Scene

MAX_TRIANGLES_FIT = 20000


@dataclass
class StopConditions:
    iterations: int | None = None
    time_limit: float | None = None   # seconds of fitting
    target_psnr: float | None = None  # dB, from the loss of the latest iteration (mse only)
    plateau: int | None = None        # stop when the best loss has not improved by 0.1% in this many iterations

    def any(self) -> bool:
        return any(v is not None for v in (self.iterations, self.time_limit, self.target_psnr, self.plateau))


@dataclass
class StepStats:
    iteration: int
    iterations: int
    loss: float
    psnr: float
    wall_s: float
    it_per_s: float
    n_triangles: int
    sigma_px: float


@dataclass
class History:
    iterations: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)

    def add(self, first_iter: int, losses: np.ndarray) -> None:
        self.iterations.extend(range(first_iter, first_iter + len(losses)))
        self.losses.extend(float(v) for v in losses)

    def __len__(self) -> int:
        return len(self.losses)


def psnr_from_mse(mse: float) -> float:
    return float("inf") if mse <= 0 else 10.0 * math.log10(1.0 / mse)


class Fitter:
    """Fit ``triangles`` soft triangles to ``target_image`` (path, PIL image or array).

    The target is resized so its longer side is ``size`` px. ``step(n)`` runs n iterations; the
    fit can be changed between steps (``set_triangles``, ``set_sigma``, ``set_learning_rate``).
    """

    def __init__(self, target_image, triangles: int = 150, size: int = 176, seed: int = 0,
                 engine: Engine | None = None, *, init_scene: Scene | None = None,
                 source: str | None = None, **settings):
        self.engine = engine or Engine("auto")
        self.settings = FitSettings(triangles=int(triangles), size=int(size), seed=int(seed), **settings)
        if not 1 <= self.settings.triangles <= MAX_TRIANGLES_FIT:
            raise TrifitError(f"triangle count must be between 1 and {MAX_TRIANGLES_FIT}, got {triangles}")
        self.target = as_target(target_image, self.settings.size)
        self.height, self.width = self.target.shape[:2]
        self.source = source if source is not None else (str(target_image) if isinstance(target_image, str) else None)
        self.history = History()
        self.wall_s = 0.0
        self._rng = np.random.default_rng(self.settings.seed)
        self._schedule = self._default_schedule()
        if init_scene is not None:
            raw, n = self._raw_from_init_scene(init_scene)
        else:
            raw, n = self._initial_raw(self.settings.triangles), self.settings.triangles
        self.n_triangles = n
        self._loop = self.engine.impl.fit_loop(self.target, raw, n, self.settings, self._schedule, 0)

    # ------------------------------------------------------------------ setup
    @property
    def short_side(self) -> int:
        return min(self.width, self.height)

    def _default_schedule(self) -> Schedule:
        s = self.settings
        return Schedule(s.sigma_start_px / self.short_side, s.sigma_end_px / self.short_side,
                        s.sigma_iters, s.lr_decay_iters, s.lr_final)

    def _error_map(self, image: np.ndarray | None) -> np.ndarray:
        ref = image if image is not None else self.target.mean(axis=(0, 1), keepdims=True)
        err = np.sum((self.target - ref) ** 2, axis=2).astype(np.float64)
        return err + 1e-6 * max(err.mean(), 1e-12)

    def _new_triangles(self, n: int, image: np.ndarray | None, radius_scale: float = 1.0) -> np.ndarray:
        """n triangles centred where the error is largest (sampled), coloured from the target."""
        H, W = self.height, self.width
        err = self._error_map(image).ravel()
        idx = self._rng.choice(err.size, size=n, p=err / err.sum())
        cy, cx = (idx // W + self._rng.uniform(0, 1, n)) / H, (idx % W + self._rng.uniform(0, 1, n)) / W
        base = math.sqrt(1.5 / max(self.settings.triangles, 1)) * radius_scale
        r = base * self._rng.uniform(0.5, 1.5, n)
        ang0 = self._rng.uniform(0, 2 * np.pi, n)
        angles = ang0[:, None] + np.array([0, 2 * np.pi / 3, 4 * np.pi / 3])[None] + self._rng.uniform(-0.4, 0.4, (n, 3))
        S = self.short_side
        vx = cx[:, None] + np.cos(angles) * r[:, None] * S / W
        vy = cy[:, None] + np.sin(angles) * r[:, None] * S / H
        verts = np.stack([vx, vy], axis=-1).reshape(n, 6)
        px = np.clip((cx * W).astype(int), 0, W - 1)
        py = np.clip((cy * H).astype(int), 0, H - 1)
        rgb = self.target[py, px].astype(np.float64)
        alpha = np.full((n, 1), 0.6)
        tris = np.concatenate([verts, rgb, alpha], axis=1)
        # larger triangles paint first (bottom), finer ones on top
        order = np.argsort(-r, kind="stable")
        return tris[order]

    def _initial_raw(self, n: int) -> np.ndarray:
        bg = self.target.reshape(-1, 3).mean(axis=0).astype(np.float64)
        scene = Scene(self.width, self.height, self._schedule.sigma_start, bg, self._new_triangles(n, None))
        return raw_from_scene(scene)

    def _raw_from_init_scene(self, scene: Scene):
        if scene.n_triangles < 1:
            raise TrifitError("the scene to refine has no triangles")
        s = scene.copy()
        s.sigma = self._schedule.sigma_start
        return raw_from_scene(s), scene.n_triangles

    # ------------------------------------------------------------------ stepping
    @property
    def iteration(self) -> int:
        return self._loop.iter

    def step(self, iterations: int = 100) -> StepStats:
        """Run ``iterations`` iterations (on the device for the GPU backend)."""
        n = int(iterations)
        if n < 0:
            raise ValueError("iterations must be >= 0")
        first = self._loop.iter + 1
        t0 = time.perf_counter()
        losses = self._loop.run(n) if n else np.empty(0)
        dt = time.perf_counter() - t0
        self.wall_s += dt
        if not np.all(np.isfinite(losses)):
            raise TrifitError("the loss became NaN or infinite")
        self.history.add(first, losses)
        loss = float(losses[-1]) if len(losses) else (self.history.losses[-1] if len(self.history) else float("nan"))
        return StepStats(self._loop.iter, n, loss, psnr_from_mse(loss) if self.settings.loss == "mse" else float("nan"),
                         dt, n / dt if dt > 0 else float("inf"), self.n_triangles,
                         self._loop.sigma * self.short_side)

    def run(self, stop: StopConditions, callback=None, chunk: int | None = None) -> StepStats:
        """Step until a stop condition holds; ``callback(stats)`` after each chunk (return False to stop)."""
        if not stop.any():
            raise ValueError("give at least one stop condition")
        chunk = chunk or max(self.settings.chunk, 1)
        start_iter, t0 = self.iteration, time.perf_counter()
        best, best_at = float("inf"), self.iteration
        stats = None
        while True:
            n = chunk
            if stop.iterations is not None:
                n = min(n, stop.iterations - (self.iteration - start_iter))
                if n <= 0:
                    break
            stats = self.step(n)
            if callback is not None and callback(stats) is False:
                break
            if stop.time_limit is not None and time.perf_counter() - t0 >= stop.time_limit:
                break
            if stop.target_psnr is not None and stats.psnr >= stop.target_psnr:
                break
            if stats.loss < best * (1 - 1e-3):
                best, best_at = stats.loss, self.iteration
            elif stop.plateau is not None and self.iteration - best_at >= stop.plateau:
                break
        return stats if stats is not None else self.step(0)

    # ------------------------------------------------------------------ live changes
    def set_sigma(self, sigma_px: float | None) -> None:
        """Fix the edge softness at ``sigma_px`` pixels from the next step (None: back to the anneal)."""
        if sigma_px is None:
            self._schedule = replace(self._default_schedule(), iter_offset=0.0)
        else:
            if not (0 < float(sigma_px) <= 1000):
                raise ValueError(f"sigma must be in (0, 1000] px, got {sigma_px}")
            s = float(sigma_px) / self.short_side
            self._schedule = replace(self._schedule, sigma_start=s, sigma_end=s)
        self._loop.set_schedule(self._schedule)

    def set_learning_rate(self, scale: float) -> None:
        """Scale every learning-rate group (1.0 = the defaults) from the next step."""
        if not (0 < float(scale) <= 100):
            raise ValueError(f"learning-rate scale must be in (0, 100], got {scale}")
        base = FitSettings()
        for name in ("lr_vertex", "lr_colour", "lr_alpha", "lr_background"):
            setattr(self.settings, name, getattr(base, name) * float(scale))
        self._rebuild(*self._loop.get_state(), self.n_triangles)

    def set_triangles(self, n: int) -> None:
        """Grow (new triangles where the error is largest) or shrink (drop the least visible)."""
        n = int(n)
        if not 1 <= n <= MAX_TRIANGLES_FIT:
            raise ValueError(f"triangle count must be between 1 and {MAX_TRIANGLES_FIT}, got {n}")
        if n == self.n_triangles:
            return
        raw, m, v = self._loop.get_state()
        T = self.n_triangles
        tri_raw, bg_raw = raw[: T * 10].reshape(T, 10), raw[T * 10 :]
        tri_m, bg_m = m[: T * 10].reshape(T, 10), m[T * 10 :]
        tri_v, bg_v = v[: T * 10].reshape(T, 10), v[T * 10 :]
        if n < T:
            keep = np.sort(np.argsort(-self._usefulness(), kind="stable")[:n])
            tri_raw, tri_m, tri_v = tri_raw[keep], tri_m[keep], tri_v[keep]
        else:
            image = self.engine.render(self.scene, self.width, self.height)
            new = self._new_triangles(n - T, image, radius_scale=0.7)
            new[:, 6:10] = logit(new[:, 6:10])
            tri_raw = np.concatenate([tri_raw, new])
            tri_m = np.concatenate([tri_m, np.zeros_like(new)])
            tri_v = np.concatenate([tri_v, np.zeros_like(new)])
        self.settings.triangles = n
        self._rebuild(np.concatenate([tri_raw.ravel(), bg_raw]), np.concatenate([tri_m.ravel(), bg_m]),
                      np.concatenate([tri_v.ravel(), bg_v]), n)

    def _usefulness(self) -> np.ndarray:
        """Opacity x on-frame area (in pixels) of each triangle: how much it can matter."""
        tris, _, _ = self._loop.current_values()
        v = tris[:, :6].reshape(-1, 3, 2).copy()
        v = np.clip(v, 0.0, 1.0)
        v[..., 0] *= self.width
        v[..., 1] *= self.height
        e1, e2 = v[:, 1] - v[:, 0], v[:, 2] - v[:, 0]
        area = 0.5 * np.abs(e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0])
        return tris[:, 9] * area

    def _rebuild(self, raw, m, v, n: int) -> None:
        it = self._loop.iter
        release = getattr(self._loop, "release", None)
        if release is not None:
            release()
        self.n_triangles = n
        self._loop = self.engine.impl.fit_loop(self.target, raw, n, self.settings, self._schedule, it)
        self._loop.set_state(raw, m, v)

    # ------------------------------------------------------------------ results
    @property
    def scene(self) -> Scene:
        """The current scene at the working size, with ``meta`` filled in."""
        tris, bg, sigma = self._loop.current_values()
        meta = {
            "software": f"trifit {__version__}",
            "seed": self.settings.seed,
            "source": self.source,
            "iterations": self.iteration,
            "backend": self.engine.backend,
            "adapter": self.engine.adapter.get("name"),
            "settings": self.settings.as_dict(),
        }
        return Scene(self.width, self.height, float(sigma), np.clip(bg, 0, 1), tris.copy(), {"meta": meta})

    def gpu_image(self):
        """(wgpu buffer, width, height) of the last forward's image for the GPU backend, else None."""
        return self._loop.gpu_image()

    def timings(self) -> dict:
        """Median per-pass GPU ms (sampled iterations), host phases, counters and pool use."""
        gpu = {k: float(np.median(s)) for k, s in self._loop.gpu_phase_samples().items() if s}
        host = {k: float(np.median(s)) for k, s in self.engine.impl.host.samples.items() if s}
        return {"gpu_ms": gpu, "host_ms": host, "counters": self.engine.counters(),
                "pool": self.engine.pool_stats()}

    def close(self) -> None:
        release = getattr(self._loop, "release", None)
        if release is not None:
            release()
