"""`trifit batch --dask`: a batch on a Dask cluster (2 worker processes on lavapipe here) writes
the scenes the local `batch --sequential` writes, byte for byte; a worker killed mid-fit costs
nothing (its image is fitted again elsewhere, every image written once); an interrupted run
keeps its finished scenes and resumes; bad input is one line and exit status 2. Under CI=true a
missing `distributed` is a failure, not a skip."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import distributed_or_fail, interrupt_when, kill_the_first_to_start
from PIL import Image

from trifit import Scene
from trifit.batch import SUMMARY_NAME, run_batch
from trifit.cli import main
from trifit.run import StopConditions

pytestmark = pytest.mark.gpu


SETTINGS = dict(triangles=10, size=24, seed=3, backend="gpu")
ITERS = 80
CLI_FIT = ["--tris", "10", "--size", "24", "--seed", "3", "--backend", "gpu", "--iters", str(ITERS), "--quiet"]


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """Six small pictures (two share a stem) and one broken file."""
    from trifit.resources import sample_path

    d = tmp_path_factory.mktemp("cluster-in")
    photo = Image.open(sample_path("astronaut.png")).convert("RGB")
    for k in range(5):
        photo.rotate(40 * k).resize((28 + 4 * k, 24)).save(d / f"p{k}.png")
    photo.resize((24, 30)).save(d / "p0.jpg")
    (d / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    return d


@pytest.fixture(scope="module")
def sequential(images, tmp_path_factory, gpu_engine):
    """What the local `batch --sequential` writes for these images: scenes {name: bytes}, and the
    broken file's error."""
    out = tmp_path_factory.mktemp("cluster-seq")
    result = run_batch([str(images)], out, stop=StopConditions(iterations=ITERS), sequential=True, engine=gpu_engine,
                       progress=False, render=True, reports=True, **SETTINGS)
    assert result.done == 6 and len(result.failed) == 1
    return SimpleNamespace(scenes=_scenes(out), error=result.failed[0].error,
                           pictures={p.name: p.read_bytes() for p in out.glob("*.trifit.png")},
                           reports=sorted(p.name for p in out.glob("*.trifit-report.json")))


def _run(images, out, address, **kw):
    from trifit.cluster import run_cluster_batch

    return run_cluster_batch([str(images)], out, dask=address, stop=StopConditions(iterations=ITERS), progress=False,
                             **SETTINGS, **kw)


def _scenes(out) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.glob("*.trifit.json")}


def _count_writes(monkeypatch) -> dict[str, int]:
    import trifit.fileutil

    writes: dict[str, int] = {}
    real = trifit.fileutil.atomic_write_bytes

    def counting(path, data, **kw):
        writes[os.path.basename(path)] = writes.get(os.path.basename(path), 0) + 1
        return real(path, data, **kw)

    monkeypatch.setattr(trifit.fileutil, "atomic_write_bytes", counting)
    return writes


def test_scenes_are_the_sequential_batch_bytes(images, sequential, cluster, tmp_path):
    out = tmp_path / "out"
    seen = []
    result = _run(images, out, cluster[0], on_result=seen.append, render=True, reports=True)
    assert _scenes(out) == sequential.scenes  # same names, same bytes, whichever worker fitted which image
    assert {p.name: p.read_bytes() for p in out.glob("*.trifit.png")} == sequential.pictures  # at the source size
    assert sorted(p.name for p in out.glob("*.trifit-report.json")) == sequential.reports and len(sequential.reports) == 6
    assert sorted(r.image for r in seen) == sorted({r.image for r in seen})  # each image recorded once
    assert (result.done, result.skipped, len(result.failed)) == (6, 0, 1)
    assert result.failed[0].error == sequential.error  # the driver's path named, not the worker's copy
    assert result.failed[0].error.startswith(f"{images / 'broken.png'}: ")
    summary = json.loads((out / SUMMARY_NAME).read_text())
    assert [r["image"] for r in summary["images"]] == sorted(str(p) for p in images.iterdir())  # input order
    assert all(r["scene"].startswith(str(out)) for r in summary["images"])
    assert not list(out.glob(".*.part"))


def test_sharp_scenes_are_the_sequential_sharp_batch_bytes(images, cluster, tmp_path, gpu_engine):
    """batch --sharp --dask: the fit settings travel with each task (the scenes a local --sharp
    --sequential run writes, to the byte, and not the default's)."""
    from trifit.export import SHARP_SETTINGS

    seq, out = tmp_path / "seq", tmp_path / "out"
    run_batch([str(images)], seq, stop=StopConditions(iterations=ITERS), sequential=True, engine=gpu_engine,
              progress=False, sharp=True, **SETTINGS)
    result = _run(images, out, cluster[0], sharp=True)
    assert (result.done, len(result.failed)) == (6, 1)
    assert _scenes(out) == _scenes(seq) and len(_scenes(out)) == 6
    for blob in _scenes(out).values():
        settings = json.loads(blob)["meta"]["settings"]
        assert {k: settings[k] for k in SHARP_SETTINGS} == SHARP_SETTINGS


def test_a_killed_worker_costs_nothing(images, sequential, cluster, tmp_path, monkeypatch):
    address, client = cluster
    out = tmp_path / "out"
    writes = _count_writes(monkeypatch)
    with kill_the_first_to_start(client, tmp_path / "killed") as killed:  # at its image's start
        result = _run(images, out, address)
    assert killed(), "no worker was killed: nothing was tested"
    assert (result.done, len(result.failed)) == (6, 1)
    assert _scenes(out) == sequential.scenes
    assert {n: c for n, c in writes.items() if n.endswith(".trifit.json")} == {n: 1 for n in sequential.scenes}
    deadline = time.monotonic() + 60  # the nanny restarts the worker: later tests have two again
    while len(client.scheduler_info()["workers"]) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)


def _lose_the_first(monkeypatch) -> list:
    """Make a Dask driver (the batch's, the video's: both ask trifit.cluster.lost through
    Submissions) see its first completed task as one the scheduler cancelled on its own (what a
    worker killed while it held a finished result can leave, dask/distributed#1352); returns
    [that task's key] and then the keys of every task submitted."""
    import distributed

    import trifit.cluster
    from trifit.cluster import lost as really_lost

    lost, submitted = [], []
    real_submit = distributed.Client.submit

    def submit(self, *args, **kw):
        submitted.append(kw["key"])
        return real_submit(self, *args, **kw)

    monkeypatch.setattr(distributed.Client, "submit", submit)

    def lost_once(future):
        if not lost and future.status == "finished":
            lost.append(future.key)
            return True
        return really_lost(future)

    monkeypatch.setattr(trifit.cluster, "lost", lost_once)
    return lost, submitted


def _submitted_again(lost, submitted) -> None:
    """The lost task's work was submitted once more (key ...-2), and nothing else was."""
    (key,) = lost
    assert key.endswith("-1") and key in submitted
    assert [k for k in submitted if not k.endswith("-1")] == [key[:-1] + "2"]


def test_what_counts_as_a_lost_task():
    from types import SimpleNamespace

    from trifit.cluster import lost

    # "lost": its result went with a worker (seen as a race with done() in the killed-worker tests)
    assert [lost(SimpleNamespace(status=s)) for s in ("lost", "cancelled", "finished", "error", "pending")] == \
        [True, True, False, False, False]


def test_a_task_the_scheduler_cancels_is_submitted_again(images, sequential, cluster, tmp_path, monkeypatch):

    out = tmp_path / "out"
    writes = _count_writes(monkeypatch)
    lost, submitted = _lose_the_first(monkeypatch)
    result = _run(images, out, cluster[0])
    _submitted_again(lost, submitted)
    assert (result.done, len(result.failed)) == (6, 1)
    assert _scenes(out) == sequential.scenes
    assert {n: c for n, c in writes.items() if n.endswith(".trifit.json")} == {n: 1 for n in sequential.scenes}


def test_an_interrupted_run_keeps_its_scenes_and_resumes(images, sequential, cluster, tmp_path):
    out = tmp_path / "out"
    done = []

    def stop_after_two(r):
        done.append(r)
        if len([d for d in done if d.status == "done"]) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _run(images, out, cluster[0], on_result=stop_after_two)
    kept = _scenes(out)
    assert len(kept) == 2 and all(sequential.scenes[n] == b for n, b in kept.items())
    summary = json.loads((out / SUMMARY_NAME).read_text())
    assert summary["interrupted"] is True and summary["done"] == 2
    assert not list(out.glob(".*.part"))
    result = _run(images, out, cluster[0])
    assert (result.done, result.skipped, len(result.failed)) == (4, 2, 1)
    assert _scenes(out) == sequential.scenes


def test_an_image_that_kills_every_worker_is_a_failure_not_a_hang(images, sequential, tmp_path, gpu_ctx):
    """With the scheduler's allowed-failures spent, the images the dead worker held (running or
    queued there) are recorded as failed, one line each, and the batch goes on."""
    import logging

    distributed = distributed_or_fail()  # (first: it brings dask, and its absence is a skip outside CI)
    import dask
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), \
            distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, resources={"GPU": 1},
                                     dashboard_address=":0", silence_logs=logging.CRITICAL) as cluster, \
            distributed.Client(cluster) as client:
        killed = []

        def kill_the_worker(r):
            busy = [w for w, keys in client.processing().items() if keys]
            if not killed and busy:
                killed.append(busy[0])
                os.kill(client.run(os.getpid, workers=busy)[busy[0]], signal.SIGKILL)

        result = _run(images, tmp_path / "out", cluster.scheduler_address, on_result=kill_the_worker)
    assert killed
    lost = [r for r in result.failed if "broken" not in r.image]
    assert lost and result.done + len(lost) == 6 and result.done >= 1
    for r in lost:
        assert r.error.startswith(f"{r.image}: the workers holding it died more often than")
        assert not os.path.exists(r.scene)
    kept = _scenes(tmp_path / "out")
    assert len(kept) == result.done and all(sequential.scenes[n] == b for n, b in kept.items())


def test_a_worker_with_another_trifit_version_ends_the_batch(images, cluster, tmp_path, capsys, monkeypatch):
    import trifit

    monkeypatch.setattr(trifit, "__version__", "0.0.0-other")
    out = tmp_path / "out"
    assert main(["batch", str(images), "-o", str(out), "--dask", cluster[0], *CLI_FIT]) == 2
    err = capsys.readouterr().err
    assert "trifit: error: a worker runs trifit" in err and "install the same version everywhere" in err, err
    assert "Traceback" not in err and not list(out.glob("*.trifit.json"))


def test_cli_local_cluster_and_ctrl_c(images, sequential, tmp_path):
    """`--dask local:2` from the command line: Ctrl+C (to the whole process group, as a terminal
    sends it) ends the batch with status 130, no worker traceback, the finished scenes kept (the
    resumption after it: test_an_interrupted_run_keeps_its_scenes_and_resumes)."""
    distributed_or_fail()
    # the six pictures and 24 more, so that the batch is still running when Ctrl+C arrives
    many = tmp_path / "many"
    shutil.copytree(images, many)
    for k in range(24):
        Image.open(images / f"p{k % 5}.png").rotate(7 * k + 3).save(many / f"q{k}.png")
    out = tmp_path / "out"
    cmd = [sys.executable, "-P", "-m", "trifit.cli", "batch", str(many), "-o", str(out), "--dask", "local:2", *CLI_FIT]
    status, err = interrupt_when(cmd, lambda: list(out.glob("*.trifit.json")))
    assert status == 130, err[-2000:]
    assert "Traceback" not in err and "trifit: interrupted" in err and "dashboard: http" in err, err[-2000:]
    kept = _scenes(out)
    assert 1 <= len(kept) < 30
    for name, raw in kept.items():  # each whole: the local batch's triangles where it fitted the picture too
        scene = Scene.from_json(raw)
        assert scene.meta["iterations"] == ITERS, name
        if name in sequential.scenes:  # (its bytes differ in the source's folder)
            assert np.array_equal(scene.triangles, Scene.from_json(sequential.scenes[name]).triangles), name
    summary = json.loads((out / SUMMARY_NAME).read_text())
    assert summary["interrupted"] is True and summary["done"] == len(kept)
    assert not list(out.glob(".*.part"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("value, says", [("local:0", "local:N with N a positive"), ("nowhere", "a scheduler's address"),
                                         ("tcp://127.0.0.1:", "a scheduler's address")])
def test_bad_dask_values_are_one_line_and_exit_2(value, says, images, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["batch", str(images), "-o", str(out), "--dask", value, *CLI_FIT]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1 and not out.exists(), err


def test_without_distributed_dask_is_one_line_and_exit_2(images, tmp_path):
    code = ("import sys\nsys.modules['distributed'] = None  # as if not installed\nfrom trifit.cli import main\n"
            f"sys.exit(main(['batch', {str(images)!r}, '-o', {str(tmp_path / 'out')!r}, '--dask', 'local:2']))")
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60)
    (line,) = out.stderr.strip().splitlines()
    assert out.returncode == 2 and line.startswith("trifit: error: --dask needs Dask's distributed (") \
        and line.endswith("; install it with: pip install 'trifit[cluster]'"), out.stderr[-1000:]
    assert not (tmp_path / "out").exists()


def test_no_scheduler_at_the_address_is_exit_2(images, tmp_path, capsys, monkeypatch):
    distributed_or_fail()
    import trifit.cluster

    monkeypatch.setattr(trifit.cluster, "CONNECT_TIMEOUT_S", 1)
    address = f"tcp://127.0.0.1:{_free_port()}"
    assert main(["batch", str(images), "-o", str(tmp_path / "out"), "--dask", address, *CLI_FIT]) == 2
    err = capsys.readouterr().err
    assert f"--dask {address}: no scheduler answers there" in err and "Traceback" not in err, err
    assert not list((tmp_path / "out").glob("*.trifit.json"))


def test_a_scheduler_without_gpu_workers_is_exit_2(images, tmp_path, capsys, monkeypatch):
    distributed = distributed_or_fail()
    import trifit.cluster

    monkeypatch.setattr(trifit.cluster, "WORKER_WAIT_S", 1)
    with distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=":0") as bare:
        assert main(["batch", str(images), "-o", str(tmp_path / "out"), "--dask", bare.scheduler_address,
                     *CLI_FIT]) == 2
    err = capsys.readouterr().err
    assert "no worker with the GPU resource joined" in err and "--resources GPU=1" in err, err


def test_the_local_worker_plugin_pins_adapters_and_ignores_ctrl_c(monkeypatch):
    distributed_or_fail()
    from trifit.cluster import _local_worker_plugin
    from trifit.gpu.device import ADAPTER_ENV

    handlers = []
    monkeypatch.setattr(signal, "signal", lambda sig, handler: handlers.append((sig, handler)))
    monkeypatch.setenv(ADAPTER_ENV, "")  # recorded first, so that teardown restores what was there
    monkeypatch.delenv(ADAPTER_ENV)
    _local_worker_plugin(3).setup(SimpleNamespace(name=4))
    assert os.environ[ADAPTER_ENV] == "1" and handlers == [(signal.SIGINT, signal.SIG_IGN)]
    monkeypatch.delenv(ADAPTER_ENV)
    _local_worker_plugin(0).setup(SimpleNamespace(name=4))  # one adapter: the default one, as a local fit
    assert ADAPTER_ENV not in os.environ


def test_trifit_adapter_picks_an_adapter_by_index(gpu_ctx, tmp_path):
    """TRIFIT_ADAPTER=K: the K-th of Engine's gpu_adapters(); out of range, one clear error."""
    code = ("from trifit.engine import Engine, gpu_adapters\n"
            "from trifit.errors import AdapterError\n"
            "names = [a['name'] for a in gpu_adapters()]\n"
            "print('FIRST', Engine('gpu').adapter['name'] == names[0])\n")
    env = {**os.environ, "TRIFIT_ADAPTER": "0"}
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert "FIRST True" in out.stdout, out.stdout + out.stderr[-1000:]
    env["TRIFIT_ADAPTER"] = "99"
    Image.new("RGB", (8, 8), "red").save(tmp_path / "a.png")
    out = subprocess.run([sys.executable, "-P", "-m", "trifit.cli", "fit", str(tmp_path / "a.png"), "--backend", "gpu",
                          "--iters", "1", "--quiet"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2 and out.stderr.startswith("trifit: error: TRIFIT_ADAPTER=99: expected an adapter index"), \
        out.stderr[-1000:]
    assert len(out.stderr.strip().splitlines()) == 1


def test_the_cli_loads_dask_only_for_dask(tmp_path):
    """`trifit --version`, `batch --help` and a plain batch never import dask (a cluster's start is slow)."""
    rng = np.random.default_rng(0)
    Image.fromarray((rng.uniform(0, 1, (8, 8, 3)) * 255).astype(np.uint8)).save(tmp_path / "a.png")
    code = ("import sys\nfrom trifit.cli import main\n"
            "for args in (['--version'], ['batch', '--help'], "
            f"['batch', {str(tmp_path / 'a.png')!r}, '-o', {str(tmp_path / 'o')!r}, '--iters', '2', '--size', '8', "
            "'--tris', '2', '--quiet']):\n"
            "    try:\n        main(args)\n    except SystemExit:\n        pass\n"
            "print('LOADED', sorted(m for m in ('dask', 'distributed', 'trifit.cluster') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120)
    assert "LOADED []" in out.stdout, out.stdout[-500:] + out.stderr[-500:]
