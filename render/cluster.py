"""Batch fits on a Dask cluster: ``trifit batch DIR_OR_GLOB -o OUT --dask local[:N] | --dask tcp://HOST:PORT``.

Dask's ``distributed`` (the ``cluster`` extra) schedules the fits; trifit adds no scheduler of
its own. ``local[:N]`` starts a :class:`distributed.LocalCluster` of N worker processes (default:
one per GPU adapter, at least one), each with one thread and the resource ``GPU=1``, and pins
worker k to adapter ``k mod adapters`` (``TRIFIT_ADAPTER``, render/gpu/device.py). An address
connects to a running scheduler whose workers were started with ``--nthreads 1 --resources GPU=1``
(on a host with several GPUs: one ``dask worker`` per GPU, each with its own ``TRIFIT_ADAPTER=K``).

What travels: the driver reads each image's bytes and submits one task per image; the task
(:func:`fit_image`, on a worker) fits it the way ``trifit batch --sequential`` does -- the same
function, render/batch.py's ``_fit_sequential``, with the worker's one engine, kept for every
image it fits -- and sends back the files that fit wrote (the scene; the picture and report
when asked for). The driver writes each atomically as it arrives, under the local batch's names,
skips images whose scene already exists, and writes ``batch-summary.json`` (images in input
order). So a scene depends on the image, the settings and the adapter kind only, never on the
worker or the order: it is byte for byte what the local ``--sequential`` batch writes.

Failures: an image that cannot be read or fitted is recorded as failed, as in the local batch;
a worker that dies mid-fit has its images (the one it was fitting and those waiting on it) run
again on another, up to the scheduler's ``allowed-failures`` deaths (:data:`ALLOWED_FAILURES`
for a local cluster, a scheduler's own setting otherwise; then the image is recorded as
failed), and each result is written once, when its task first completes. A worker that cannot
fit at all (no adapter, another trifit version) ends the batch with one line (exit status 2).
Ctrl+C (KeyboardInterrupt) cancels the tasks still out and keeps every scene already written (a
local cluster's workers are closed with it; a remote worker finishes the fit it is in, and the
result is dropped: Dask does not stop a running task).

The connection (:func:`session`), a worker's engine and checks (:func:`ready_engine`) and why a
task has no result (:func:`task_failure`) serve ``trifit video --segment K --dask`` too
(render/videocluster.py: a task per segment of a clip).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path

from .batch import SUMMARY_NAME, BatchResult, ImageResult, find_images, output_names, still_to_fit, tally
from .errors import TrifitError
from .limits import DEFAULT_ITERATIONS

#: worker deaths a local cluster's scheduler lets an image see (fitting it or holding it next) before
#: it records the image as failed: a dead worker's images go to another that many times
ALLOWED_FAILURES = 3
#: times a fit that raised (not a failure the batch records: an internal error) is run again
RETRIES = 1
#: times a task whose result was lost is submitted again: a worker killed while it held a finished
#: result, or while the result was on its way, can leave the client's future "lost" or
#: "cancelled" instead of recomputed (dask/distributed#1352)
RESUBMITS = 3
#: tasks in flight per GPU slot: the next image's bytes wait on a worker, no more (a batch of
#: thousands of photos is not held in the scheduler's memory at once)
IN_FLIGHT_PER_SLOT = 2
#: seconds to wait for a scheduler, and then for a worker offering the GPU resource
CONNECT_TIMEOUT_S = 10
WORKER_WAIT_S = 30
#: the files a fit may write, in the order the local batch writes them (the scene first)
OUTPUT_SUFFIXES = (".trifit.json", ".trifit.png", ".trifit-report.json")


class ClusterError(TrifitError):
    """The cluster cannot run the batch (no scheduler, no worker with a GPU, a worker that cannot fit)."""


# ---------------------------------------------------------------------- where
def parse_target(text: str) -> tuple[str, int | str | None]:
    """``--dask``'s value: ``("local", N or None)`` or ``("address", "tcp://HOST:PORT")``."""
    text = text.strip()
    if text == "local" or text.startswith("local:"):
        count = text[len("local:"):] if ":" in text else ""
        if count and (not count.isdigit() or int(count) < 1):
            raise ClusterError(f"--dask {text}: expected local or local:N with N a positive whole number")
        most = 2 * (os.cpu_count() or 1)  # (each worker is a process with its own engine)
        if count and int(count) > most:
            raise ClusterError(f"--dask {text}: this machine runs at most {most} local workers (two a core)")
        return "local", int(count) if count else None
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "tcp", text
    host, colon, port = rest.rpartition(":")
    if scheme not in ("tcp", "tls", "ucx", "ws", "wss") or not colon or not host or not port.isdigit():
        raise ClusterError(f"--dask {text}: expected local, local:N or a scheduler's address such as "
                           f"tcp://HOST:8786")
    return "address", f"{scheme}://{rest}"


def check_target(text: str) -> None:
    """Refuse a bad ``--dask`` value, or a missing ``distributed``, before any work (ClusterError)."""
    parse_target(text)
    _distributed()


def _distributed():
    try:
        import distributed
    except ImportError as exc:
        raise ClusterError(f"--dask needs Dask's distributed ({exc}); install it with: pip install 'trifit[cluster]'") \
            from None
    return distributed


def connect(target: tuple[str, int | str | None], backend: str):
    """(client, the local cluster or None); ClusterError when the scheduler cannot be reached or no
    worker offers the ``GPU`` resource in time."""
    distributed = _distributed()
    import logging
    import warnings

    import dask

    verbose = logging.getLogger("trifit").isEnabledFor(logging.INFO)
    if not verbose:  # the cluster's chatter only under -v: what matters to the batch, the batch says
        logging.getLogger("distributed").setLevel(logging.WARNING)

    kind, where = target
    if kind == "local":
        count = 0 if backend == "reference" else len(_gpu_adapters())
        n = where or max(1, count)
        with dask.config.set({"distributed.scheduler.allowed-failures": ALLOWED_FAILURES}), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "port 8787 is in use": another port is taken and printed
            cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                               resources={"GPU": 1}, dashboard_address=":8787",
                                               silence_logs=logging.INFO if verbose else logging.CRITICAL)
        try:
            client = distributed.Client(cluster)
            client.register_plugin(_local_worker_plugin(count if count > 1 else 0), name="trifit-local-worker")
            return client, cluster
        except BaseException:
            cluster.close()
            raise
    try:
        client = distributed.Client(where, timeout=f"{CONNECT_TIMEOUT_S}s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise ClusterError(f"--dask {where}: no scheduler answers there ({_one_line(exc)})") from None
    deadline = time.monotonic() + WORKER_WAIT_S
    while gpu_slots(client) == 0:
        if time.monotonic() > deadline:
            client.close()
            raise ClusterError(f"--dask {where}: no worker with the GPU resource joined in {WORKER_WAIT_S} s; start "
                               f"them with: dask worker {where} --nthreads 1 --resources GPU=1")
        time.sleep(0.5)
    return client, None


@contextlib.contextmanager
def session(target: tuple[str, int | str | None], backend: str, note: Callable[[str], None]):
    """A client of the cluster (:func:`connect`) for the duration of a ``with``, the dashboard's
    address told through ``note``; the client, and a local cluster, closed after it."""
    client, cluster = connect(target, backend)
    try:
        link = _dashboard(client)
        note(f"dashboard: {link}" + ("" if _has_bokeh() else " (its plots need: pip install bokeh)") if link else
             "the scheduler has no dashboard")
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _local_worker_plugin(adapters: int):
    """A local cluster's worker (restarted ones too): pinned to adapter ``name mod adapters`` when
    there are several, and deaf to Ctrl+C -- a terminal sends it to the whole process group, and
    the driver, not each worker, ends the batch (it closes the cluster)."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class LocalWorker(WorkerPlugin):
        def __init__(self, adapters: int):
            self.adapters = adapters

        def setup(self, worker) -> None:
            import signal

            from trifit.engine import ADAPTER_ENV

            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, signal.SIG_IGN)
            if self.adapters:
                os.environ[ADAPTER_ENV] = str(int(worker.name) % self.adapters)

    return LocalWorker(adapters)


def _gpu_adapters() -> list:
    from .engine import gpu_adapters

    return gpu_adapters()


def gpu_slots(client) -> int:
    try:
        info = client.scheduler_info(n_workers=-1)  # newer versions list only a few workers by default
    except TypeError:
        info = client.scheduler_info()
    workers = info.get("workers", {})
    return int(sum(w.get("resources", {}).get("GPU", 0) for w in workers.values()))


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200]


# ---------------------------------------------------------------------- on a worker
_engines: dict[str, object] = {}
_engines_lock = threading.Lock()


def worker_engine(backend: str):
    """The worker process's one engine for ``backend``: its pipelines and buffers serve every image
    it fits (on the adapter ``TRIFIT_ADAPTER`` names, when set)."""
    with _engines_lock:
        engine = _engines.get(backend)
        if engine is None:
            from .engine import Engine

            engine = _engines[backend] = Engine(backend)
        return engine


def ready_engine(options: dict) -> tuple[object, str | None]:
    """(the worker's engine, None), or (None, why this worker cannot fit at all): another trifit
    version than the driver's (``options["version"]``: the scenes would differ), or no adapter."""
    from . import __version__

    if options["version"] != __version__:
        return None, (f"a worker runs trifit {__version__}, this machine {options['version']}: "
                      f"the scenes would differ; install the same version everywhere")
    try:
        return worker_engine(options["backend"]), None
    except TrifitError as exc:
        return None, f"a worker cannot fit: {exc}"


def fit_image(source: str, name: str, data: bytes, options: dict) -> dict:
    """A Dask task: fit one image from its bytes as ``trifit batch --sequential`` does; returns
    ``{"result": ImageResult as a dict, "files": {suffix: bytes}}`` or ``{"fatal": message}``
    when this worker cannot fit at all."""
    from .batch import _fit_sequential

    engine, fatal = ready_engine(options)
    if fatal:
        return {"fatal": fatal}
    with tempfile.TemporaryDirectory(prefix="trifit-worker-") as tmp:
        local = Path(tmp) / Path(source).name  # the name kept: Pillow tells some formats by it
        local.write_bytes(data)
        out = Path(tmp) / "out"
        out.mkdir()
        results: list[ImageResult] = []
        _fit_sequential(Path(source), None, engine, options["stop"], triangles=options["triangles"],
                        size=options["size"], seed=options["seed"], loss=options["loss"], strategy=options["strategy"],
                        replicas=options.get("replicas", 0), sharp=options.get("sharp", False),
                        render=options["render"], reports=options["reports"], progress=False, bar=_NoBar(),
                        record=results.append, outdir=out, names={Path(source): name}, local_path=local)
        (r,) = results
        if r.error:
            r.error = r.error.replace(str(local), source)
        files = {}
        if r.status == "done":
            files = {s: (out / f"{name}{s}").read_bytes() for s in OUTPUT_SUFFIXES if (out / f"{name}{s}").is_file()}
    return {"result": asdict(r), "files": files}


class _NoBar:
    """What _fit_sequential tells a progress bar, on a worker: nothing to show."""

    n, total = 0, 1

    def set_description_str(self, *_):
        pass

    set_postfix_str = set_description_str


# ---------------------------------------------------------------------- the driver
def run_cluster_batch(inputs: Iterable[str] | Iterable[Path], outdir, *, dask: str, triangles: int = 150,
                      size: int = 176, stop=None, seed: int = 0, loss: str = "mse", strategy: str = "default",
                      replicas: int = 0, sharp: bool = False, backend: str = "auto", render: bool | float = False,
                      reports: bool = False,
                      force: bool = False, progress: bool = True, on_result: Callable[[ImageResult], None] | None = None,
                      note: Callable[[str], None] | None = None) -> BatchResult:
    """``trifit batch ... --dask DASK``: what :func:`trifit.batch.run_batch` does with
    ``sequential=True``, the fits spread over a cluster (module doc). ``note``: where the
    dashboard's address is told (default: stderr)."""
    from . import __version__
    from .batch import _write_summary
    from .run import StopConditions

    target = parse_target(dask)
    images = find_images([str(s) for s in inputs])
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    if stop is None or not stop.any():
        stop = StopConditions(iterations=DEFAULT_ITERATIONS)
    names = output_names(images)
    order = {str(p): k for k, p in enumerate(images)}
    result, bar, record = tally(len(images), progress, on_result)
    note = note or (lambda text: bar.write(f"trifit: {text}", file=sys.stderr))

    pending = still_to_fit(images, outdir, names, triangles, size, force, record)
    try:
        if pending:
            with session(target, backend, note) as client:
                options = dict(triangles=triangles, size=size, stop=stop, seed=seed, loss=loss, strategy=strategy,
                               replicas=replicas, sharp=sharp, render=render, reports=reports, backend=backend,
                               version=__version__)
                _drive(client, pending, names, outdir, options, record, bar)
    except KeyboardInterrupt:
        result.interrupted = True
        raise
    finally:
        bar.close()
        result.results.sort(key=lambda r: order.get(r.image, len(order)))
        _write_summary(outdir / SUMMARY_NAME, result)
    return result


def _drive(client, pending: list[Path], names, outdir: Path, options: dict, record, bar) -> None:
    """Submit the images a window at a time; write each result as its task completes."""
    from distributed import as_completed

    run = uuid.uuid4().hex[:8]
    todo = iter(enumerate(pending))
    out: dict = {}  # future -> (k, image path, its bytes): what submitting it again needs
    done = as_completed()
    tries = Submissions()  # per image

    def submit(k: int, img_path: Path, data: bytes) -> None:
        future = client.submit(fit_image, str(img_path), names[img_path], data, options,
                               key=tries.key(f"trifit-fit-{run}-{k}", img_path), resources={"GPU": 1},
                               retries=RETRIES, pure=False)
        out[future] = (k, img_path, data)
        done.add(future)

    def refill() -> None:
        slots = gpu_slots(client)
        bar.set_description_str(f"batch on {slots} GPU(s)")
        window = max(2, IN_FLIGHT_PER_SLOT * slots)
        while len(out) < window:
            item = next(todo, None)
            if item is None:
                return
            k, img_path = item
            scene_path = outdir / f"{names[img_path]}.trifit.json"
            try:
                data = img_path.read_bytes()
            except OSError as exc:
                record(ImageResult(str(img_path), str(scene_path), "failed",
                                   error=f"{img_path}: cannot read: {exc.strerror or exc}"))
                continue
            submit(k, img_path, data)

    try:
        refill()
        for future in done:
            k, img_path, data = out.pop(future)
            if tries.again(future, img_path):
                submit(k, img_path, data)
                continue
            try:
                _collect(future, img_path, outdir / f"{names[img_path]}.trifit.json", outdir, names[img_path], record)
            finally:
                future.release()  # held, a result lost with its worker would be fitted again for nothing
            refill()
    finally:
        if out:
            client.cancel(list(out))


class Submissions:
    """How many times each piece of work (an image, a segment) went to the cluster, and whether a
    done task's work goes again: a lost one (:func:`lost`), up to :data:`RESUBMITS` times."""

    def __init__(self):
        self._count: dict = {}

    def key(self, base: str, work) -> str:
        """The task key of ``work``'s next submission: ``base`` and its number (a task submitted
        again gets a key of its own)."""
        n = self._count[work] = self._count.get(work, 0) + 1
        return f"{base}-{n}"

    def again(self, future, work) -> bool:
        """True, with ``future`` released, when its task was lost and ``work`` may be submitted again."""
        if lost(future) and self._count[work] <= RESUBMITS:
            future.release()
            return True
        return False


def lost(future) -> bool:
    """The task's result went with a worker ("lost"), or the scheduler cancelled the task on its own
    (we cancel only on the way out): submit it again."""
    return future.status in ("lost", "cancelled")


def task_failure(future, what: str) -> str | None:
    """Why a done task has no result (None: it has one); ``what`` names its work in the message."""
    from distributed import KilledWorker

    if future.status == "finished":
        return None
    exc = future.exception() if future.status == "error" else None
    if exc is None:
        return f"its task was {future.status}"
    if isinstance(exc, KilledWorker):
        return (f"the workers holding {what} died more often than the scheduler's allowed-failures "
                f"(a re-run fits {what} again)")
    return f"{type(exc).__name__}: {_one_line(exc)}"


def _collect(future, img_path: Path, scene_path: Path, outdir: Path, name: str, record) -> None:
    """A finished task: its files written (scene first, each atomically) and its result recorded."""
    from .fileutil import atomic_write_bytes

    error = task_failure(future, "it")
    if error is not None:
        record(ImageResult(str(img_path), str(scene_path), "failed", error=f"{img_path}: {error}"))
        return
    reply = future.result()
    if "fatal" in reply:
        raise ClusterError(reply["fatal"])
    r = ImageResult(**reply["result"])
    r.scene = str(scene_path)
    try:
        for suffix in OUTPUT_SUFFIXES:
            if suffix in reply["files"]:
                atomic_write_bytes(outdir / f"{name}{suffix}", reply["files"][suffix])
    except OSError as exc:
        r = ImageResult(str(img_path), str(scene_path), "failed", error=f"{scene_path}: cannot write: {exc.strerror or exc}",
                        seconds=r.seconds)
    record(r)


def _dashboard(client) -> str | None:
    try:
        return client.dashboard_link
    except (KeyError, TypeError, AttributeError):  # a scheduler started without one
        return None


def _has_bokeh() -> bool:
    import importlib.util

    return importlib.util.find_spec("bokeh") is not None
