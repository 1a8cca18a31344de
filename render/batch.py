"""Batch mode: fit every image of a folder or glob, resumably, writing each result as it is done.

``run_batch(inputs, outdir, ...)`` fits the images through one shared engine (shader pipelines
and pooled GPU buffers are built once and reused), on one of two paths:

* **Batched** (the default when the engine's backend is ``"gpu"`` and the stop condition is an
  iteration count only -- on the command line: ``--iters N`` without ``--time-limit``,
  ``--target-psnr`` or ``--plateau``): the images are loaded at the working size, grouped by
  that size, and each group (up to :data:`BATCH_CHUNK` images) runs in lockstep through one
  :class:`trifit.fitter.BatchFitter` -- one set of GPU dispatches per iteration for the whole
  group, and the same strategy as a single fit (growth, pruning, respawn, sigma probes, the
  coarse stage: events at the same iterations for every image, decided per image). Should a
  batched fit fail, its images are fitted one by one instead.
* **Sequential** (``sequential=True`` / ``--sequential``, any time limit, PSNR or plateau stop --
  those are per image -- or the reference backend): one :class:`trifit.fitter.Fitter` per
  image, one after another.

Both paths run through the one run loop (render/run.py). Each fit is independent and seeded: an
image's result does not depend (beyond float precision) on which other images are in the batch
-- the batched kernels index every buffer per image, and each image has its own random stream.
``trifit batch`` without ``--iters`` (the default 600 iterations) stays sequential.

Guarantees:

* **Resumable**: an image whose output scene already exists, loads as a valid scene and matches
  the requested triangle count and working size is skipped (``force=True`` refits it).
* **Never loses finished work**: each scene (and its optional render and report) is written
  atomically the moment its fit (for the batched path: its group's fit) ends. Ctrl+C
  (``ctrl_c``) ends the fits under way at their next chunk and writes their scenes so far marked
  ``meta.interrupted``; a re-run fits those images again from the start (so their scenes end as an
  uninterrupted batch's, to the byte), and an interrupted fit never writes over a finished scene
  or over an interrupted one that ran further. A hard kill loses only the fits under way.
* **Bad images are reported and skipped**: an unreadable image, or a fit that fails, is recorded
  with its reason and the batch goes on; :attr:`BatchResult.exit_status` is 2 when any failed.

Output names: ``OUTDIR/<stem>.trifit.json`` (``<stem>_<ext>.trifit.json`` when two inputs share a
stem), plus ``<name>.trifit.png`` with ``render`` (True: the source image's size; a number: that
scale of it; crisp edges) and ``<name>.trifit-report.json`` with
``reports=True``; ``OUTDIR/batch-summary.json`` lists every image's outcome. Every output name
holds ``.trifit``, and files named so are never taken as inputs, so OUTDIR may be the input
folder without a render overwriting (or being refitted as) a source image.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import SceneError, TrifitError
from .fileutil import atomic_write_bytes
from .limits import DEFAULT_ITERATIONS

#: Suffixes taken from a folder (a glob or explicit file list takes whatever it names).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff", ".gif", ".ppm",
                  ".pgm", ".pbm", ".tga", ".jp2", ".ico")
SUMMARY_NAME = "batch-summary.json"


@dataclass
class ImageResult:
    image: str
    scene: str
    status: str  # "done" | "skipped" | "failed" | "interrupted" (its scene holds the iterations it ran)
    psnr: float | None = None
    iterations: int | None = None
    seconds: float | None = None
    error: str | None = None
    kept_earlier: bool = False  # interrupted, and the scene already there was kept (keeps_earlier)

    def message(self) -> str:
        """One line for a failure: the image, then why (without naming the image twice)."""
        err = self.error or "failed"
        return err if err.startswith(self.image) else f"{self.image}: {err}"


@dataclass
class BatchResult:
    results: list[ImageResult] = field(default_factory=list)
    interrupted: bool = False

    def _count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    @property
    def done(self) -> int:
        return self._count("done")

    @property
    def skipped(self) -> int:
        return self._count("skipped")

    @property
    def failed(self) -> list[ImageResult]:
        return [r for r in self.results if r.status == "failed"]

    @property
    def stopped(self) -> list[ImageResult]:
        """The images a Ctrl+C ended early (their scenes hold what they ran)."""
        return [r for r in self.results if r.status == "interrupted"]

    @property
    def exit_status(self) -> int:
        return 130 if self.interrupted else 2 if self.failed else 0

    def as_dict(self) -> dict:
        return {"done": self.done, "skipped": self.skipped, "failed": len(self.failed),
                "interrupted": self.interrupted, "images": [asdict(r) for r in self.results]}


# ---------------------------------------------------------------------- inputs
def find_images(sources: Iterable[str]) -> list[Path]:
    """Images named by folders (their image files, not recursive), globs (``**`` allowed) or
    plain paths; sorted per source, duplicates dropped, order otherwise kept."""
    sources = [str(s) for s in sources]
    found: list[Path] = []
    seen: set[str] = set()
    for src in sources:
        p = Path(src)
        if p.is_dir():
            items = sorted(q for q in p.iterdir()
                           if q.is_file() and q.suffix.lower() in IMAGE_SUFFIXES and ".trifit" not in q.name)
        elif p.exists():
            items = [p]
        elif glob.has_magic(str(src)):
            items = sorted(Path(q) for q in glob.glob(str(src), recursive=True)
                           if Path(q).is_file() and ".trifit" not in Path(q).name)
            if not items:
                raise TrifitError(f"{src}: the glob matches no file")
        else:
            raise TrifitError(f"{src}: no such file, folder or matching glob")
        for q in items:
            key = os.path.realpath(q)
            if key not in seen:
                seen.add(key)
                found.append(q)
    if not found:
        raise TrifitError("no images found in " + ", ".join(str(s) for s in sources))
    return found


def output_names(images: list[Path]) -> dict[Path, str]:
    """A distinct base name per image: its stem, or ``stem_ext`` where stems collide."""
    stems: dict[str, int] = {}
    for p in images:
        stems[p.stem.lower()] = stems.get(p.stem.lower(), 0) + 1
    names: dict[Path, str] = {}
    used: set[str] = set()
    for p in images:
        base = p.stem if stems[p.stem.lower()] == 1 else f"{p.stem}_{p.suffix.lstrip('.').lower()}"
        name, k = base, 2
        while name.lower() in used:
            name, k = f"{base}_{k}", k + 1
        used.add(name.lower())
        names[p] = name
    return names


def _load_scene(path: Path):
    from .scene import Scene

    if not path.is_file():
        return None
    try:
        return Scene.load(path)
    except SceneError:
        return None


def existing_result(path: Path, triangles: int, size: int):
    """The scene at ``path`` if it is a valid, finished result for these settings, else None (a
    scene that Ctrl+C ended, ``meta.interrupted``, is not finished: a re-run fits it again)."""
    scene = _load_scene(path)
    if scene is None or scene.meta.get("interrupted"):
        return None
    if scene.n_triangles != triangles or max(scene.width, scene.height) != size:
        return None
    return scene


def keeps_earlier(path: Path, iterations: int) -> bool:
    """Whether an interrupted fit of ``iterations`` must leave the scene at ``path`` as it is: a
    finished one (whatever its settings: ``--force`` refits it, Ctrl+C does not undo it) or an
    interrupted one that ran at least as far (a second Ctrl+C, sooner than the first)."""
    earlier = _load_scene(path)
    if earlier is None:
        return False
    if not earlier.meta.get("interrupted"):
        return True
    done = earlier.meta.get("iterations")
    return isinstance(done, int) and done >= iterations


# ---------------------------------------------------------------------- the run
#: images per batched fit (one loop, one set of dispatches per iteration for all of them)
BATCH_CHUNK = 16


def still_to_fit(images: list[Path], outdir: Path, names: dict, triangles: int, size: int, force: bool,
                 record) -> list[Path]:
    """The images whose scene is not already in ``outdir`` for these settings (all of them with
    ``force``); each of the others is recorded as skipped (the local batch's and the cluster's)."""
    pending = []
    for img_path in images:
        scene_path = outdir / f"{names[img_path]}.trifit.json"
        if not force and existing_result(scene_path, triangles, size) is not None:
            record(ImageResult(str(img_path), str(scene_path), "skipped"))
        else:
            pending.append(img_path)
    return pending


def tally(n: int, progress: bool, on_result=None):
    """A batch's result, its progress bar over ``n`` images, and ``record(r)``, which every
    finished, skipped or failed image goes through (the local batch's and the cluster's alike)."""
    from tqdm import tqdm

    result = BatchResult()
    bar = tqdm(total=n, unit="img", desc="batch", disable=not progress, dynamic_ncols=True)

    def record(r: ImageResult) -> None:
        result.results.append(r)
        if on_result is not None:
            on_result(r)
        if r.status == "failed" and progress:
            bar.write(f"trifit: failed: {r.message()}", file=sys.stderr)
        bar.update(1)

    return result, bar, record


def run_batch(inputs: Iterable[str] | Iterable[Path], outdir, *, triangles: int = 150, size: int = 176,
              stop=None, seed: int = 0, loss: str = "mse", strategy: str = "default", replicas: int = 0,
              sharp: bool = False, engine=None, backend: str = "auto",
              render: bool = False, reports: bool = False, force: bool = False,
              progress: bool = True, on_result: Callable[[ImageResult], None] | None = None,
              sequential: bool = False, batch_chunk: int = BATCH_CHUNK, ctrl_c=None) -> BatchResult:
    """Fit every image of ``inputs`` (folders, globs, paths) into ``outdir``; see the module doc.
    ``ctrl_c``: true once the user asked to stop, told each run as it starts (``ctrl_c.watch(run)``,
    which cancels it at its next chunk then): the images being fitted keep their scenes so far,
    the batch starts no other, and the result says it was interrupted."""
    from .engine import Engine
    from .fitloop import check_settings
    from .imageio import load_image
    from .run import StopConditions

    if isinstance(inputs, (str, os.PathLike)):  # (one folder, glob or path: not its characters)
        inputs = [inputs]
    check_settings({"triangles": triangles, "size": size, "seed": seed, "loss": loss, "strategy": strategy,
                    "replicas": replicas})
    images = find_images([str(s) for s in inputs])
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    if stop is not None and not isinstance(stop, StopConditions):
        raise TypeError(f"stop must be StopConditions, got {type(stop).__name__}")
    if stop is None or not stop.any():
        stop = StopConditions(iterations=DEFAULT_ITERATIONS)
    names = output_names(images)
    result, bar, record = tally(len(images), progress, on_result)

    only_iterations = (stop.iterations is not None and stop.time_limit is None
                       and stop.target_psnr is None and stop.plateau is None)
    opts = dict(triangles=triangles, size=size, seed=seed, loss=loss, strategy=strategy, replicas=replicas,
                sharp=sharp, render=render, reports=reports, progress=progress, bar=bar, record=record,
                outdir=outdir, names=names, ctrl_c=ctrl_c)
    try:
        pending = still_to_fit(images, outdir, names, triangles, size, force, record)
        if pending and engine is None:
            engine = Engine(backend)  # an AdapterError here ends the batch: no image could fit
        if sequential or not only_iterations or engine is None or engine.backend != "gpu":
            for img_path in pending:
                if ctrl_c:
                    break
                _fit_sequential(img_path, None, engine, stop, **opts)
        else:
            groups: dict[tuple, list] = {}  # working size -> [(path, target)], in input order
            for img_path in pending:
                t0 = time.perf_counter()
                try:
                    target = load_image(img_path, size)
                except TrifitError as exc:
                    record(ImageResult(str(img_path), str(outdir / f"{names[img_path]}.trifit.json"),
                                       "failed", error=str(exc), seconds=time.perf_counter() - t0))
                    continue
                except (MemoryError, ValueError, OSError) as exc:
                    record(ImageResult(str(img_path), str(outdir / f"{names[img_path]}.trifit.json"), "failed",
                                       error=f"{type(exc).__name__}: {exc}", seconds=time.perf_counter() - t0))
                    continue
                groups.setdefault(target.shape, []).append((img_path, target))
            for members in groups.values():
                for k in range(0, len(members), max(1, batch_chunk)):
                    if ctrl_c:
                        break
                    _fit_batched(members[k : k + max(1, batch_chunk)], engine, stop, **opts)
        result.interrupted = bool(ctrl_c)
    except KeyboardInterrupt:
        result.interrupted = True
        raise
    finally:
        bar.close()
        _write_summary(outdir / SUMMARY_NAME, result)
    return result


def _save_outputs(scene, fitter, engine, name: str, outdir: Path, render: bool, reports: bool,
                  source_file=None, interrupted: bool = False) -> tuple[float, bool]:
    """Write the scene (atomically, first), then the optional render and report; returns the PSNR
    and whether they were written. An ``interrupted`` fit's scene says so in its meta, and is not
    written over a scene it must keep (:func:`keeps_earlier`)."""
    scene_path = outdir / f"{name}.trifit.json"
    final = engine.render(scene, fitter.width, fitter.height)
    psnr = _psnr(final, fitter.target)
    if interrupted:
        if keeps_earlier(scene_path, int(scene.meta.get("iterations", 0))):
            return psnr, False
        scene.meta["interrupted"] = True
    scene.save(scene_path)  # the result, atomically, before anything optional
    if render:  # a picture at the source image's size (x render when it is a number), crisp edges
        from .export import picture_size, save_render
        from .imageio import source_size

        source_file = source_file or fitter.source
        frame = source_size(source_file) if source_file else (scene.width, scene.height)
        W, H = picture_size(frame, scale=None if render is True else float(render))
        save_render(scene, outdir / f"{name}.trifit.png", W, H, engine=engine, edges="crisp")
    if reports:
        from .report import build_report, write_json_report

        write_json_report(outdir / f"{name}.trifit-report.json",
                          build_report(fitter, engine, fitter.wall_s, final_image=final))
    return psnr, True


def _failure(img_path, scene_path, exc, t0) -> ImageResult:
    err = str(exc) if isinstance(exc, TrifitError) else f"{type(exc).__name__}: {exc}"
    return ImageResult(str(img_path), str(scene_path), "failed", error=err, seconds=time.perf_counter() - t0)


def _fit_sequential(img_path, target, engine, stop, *, triangles, size, seed, loss, strategy, render, reports,
                    progress, bar, record, outdir, names, replicas=0, sharp=False, local_path=None,
                    ctrl_c=None) -> None:
    """The per-image path: a full Fitter (growth, respawn, coarse stage, any stop condition).
    ``local_path``: where the image's bytes are on this machine when that is not ``img_path``
    (a cluster worker's copy, render/cluster.py); ``img_path`` still names it in the scene."""
    from .export import sharp_settings
    from .fitter import Fitter
    from .imageio import load_image
    from .run import FitRun

    name = names[img_path]
    scene_path = outdir / f"{name}.trifit.json"
    bar.set_description_str(f"image {bar.n + 1} of {bar.total}: {img_path.name[:40]}")
    t0 = time.perf_counter()
    try:
        if target is None:
            target = load_image(local_path or img_path, size)
        fitter = Fitter(target, triangles=triangles, size=size, seed=seed, engine=engine,
                        source=str(img_path), loss=loss, strategy=strategy, replicas=replicas, **sharp_settings(sharp))
        try:
            def step(stats, _name=img_path.name):
                bar.set_postfix_str(f"it {stats.iteration} psnr {stats.psnr:.2f}")

            run = FitRun(fitter, stop)
            if ctrl_c is not None:
                ctrl_c.watch(run)
            run.run(step if progress else None)
            psnr, written = _save_outputs(fitter.scene, fitter, engine, name, outdir, render, reports, local_path,
                                          interrupted=bool(ctrl_c))
            r = ImageResult(str(img_path), str(scene_path), "interrupted" if ctrl_c else "done", psnr,
                            fitter.iteration, time.perf_counter() - t0, kept_earlier=not written)
        finally:
            fitter.close()
    except (TrifitError, MemoryError, ValueError, OSError) as exc:
        r = _failure(img_path, scene_path, exc, t0)
    record(r)


def _fit_batched(members, engine, stop, *, triangles, size, seed, loss, strategy, render, reports,
                 progress, bar, record, outdir, names, replicas=0, sharp=False, ctrl_c=None) -> None:
    """Equal-size images through one BatchFitter; each scene is written as soon as the group
    ends. Should the batched fit itself fail, the group's images are fitted one by one instead."""
    import logging

    from .export import sharp_settings
    from .fitter import BatchFitter
    from .history import psnr_from_mse
    from .run import FitRun

    opts = dict(triangles=triangles, size=size, seed=seed, loss=loss, strategy=strategy, replicas=replicas,
                sharp=sharp, render=render, reports=reports, progress=progress, bar=bar, record=record,
                outdir=outdir, names=names, ctrl_c=ctrl_c)
    if len(members) == 1:
        bar.set_description_str(f"image {bar.n + 1} of {bar.total}: {members[0][0].name[:40]}")
    else:
        bar.set_description_str(f"images {bar.n + 1}-{bar.n + len(members)} of {bar.total}, in one batch")
    t0 = time.perf_counter()
    try:
        bf = BatchFitter([t for _, t in members], triangles=triangles, size=size, seeds=seed, engine=engine,
                         sources=[str(p) for p, _ in members], loss=loss, strategy=strategy, replicas=replicas,
                         **sharp_settings(sharp))
        try:
            def step(stats):  # (a group's loss is its images' mean: its PSNR would be no one's; theirs, lowest-highest)
                text = f"it {stats.iteration}"
                if loss == "mse":
                    psnrs = [psnr_from_mse(v) for v in bf.last_losses()]
                    text += f" psnr {min(psnrs):.2f}" + (f"-{max(psnrs):.2f}" if len(psnrs) > 1 else "")
                bar.set_postfix_str(text)

            run = FitRun(bf, stop)
            if ctrl_c is not None:
                ctrl_c.watch(run)
            run.run(step if progress else None)
            scenes = bf.scenes
        finally:
            bf.close()
    except (TrifitError, MemoryError, ValueError) as exc:
        logging.getLogger("trifit").warning("batched fit of %d images failed (%s); fitting them one by one",
                                            len(members), exc)
        for img_path, target in members:
            if ctrl_c:
                break
            _fit_sequential(img_path, target, engine, stop, **opts)
        return
    seconds = (time.perf_counter() - t0) / len(members)  # the group's time, shared evenly
    for b, ((img_path, _), scene) in enumerate(zip(members, scenes)):
        name = names[img_path]
        scene_path = outdir / f"{name}.trifit.json"
        try:
            psnr, written = _save_outputs(scene, bf.member(b, scene), engine, name, outdir, render, reports,
                                          interrupted=bool(ctrl_c))
            r = ImageResult(str(img_path), str(scene_path), "interrupted" if ctrl_c else "done", psnr,
                            bf.iteration, seconds, kept_earlier=not written)
        except (TrifitError, MemoryError, ValueError, OSError) as exc:
            r = _failure(img_path, scene_path, exc, t0)
        record(r)


def _psnr(image, target) -> float:
    import numpy as np

    mse = float(np.mean((np.asarray(image, np.float64) - np.asarray(target, np.float64)) ** 2))
    return float("inf") if mse <= 0 else float(10 * np.log10(1 / mse))


def _write_summary(path: Path, result: BatchResult) -> None:
    from .report import jsonable

    try:
        atomic_write_bytes(path, json.dumps(jsonable(result.as_dict()), indent=1).encode("utf-8"))
    except OSError:
        pass  # the summary is a convenience; the scenes are the results
