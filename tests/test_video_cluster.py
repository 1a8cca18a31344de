"""`trifit video --segment K [--dask ...]` (issue #22): a clip in independent segments, split every
K frames and at scene cuts, each cold at its first frame and warm after it; on a Dask cluster (2
worker processes on lavapipe here) the output is the local segmented run's, byte for byte; a
worker killed mid-segment costs nothing (its segment is fitted again elsewhere, every frame
written once); an interrupted run keeps its frames and resumes; bad input is one line and exit
status 2. The clip (tests/clips.py): two shots of 6 frames joined -- a red disc crossing the sample
photograph, then another crossing it upside down in negative -- 64x48, as a folder of PNGs.
Under CI=true a missing `distributed`, PyAV or adapter is a failure, not a skip."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from clips import av_or_fail, moving_disc, read_video
from conftest import distributed_or_fail, interrupt_when, kill_the_first_to_start
from PIL import Image

from trifit.cli import main

pytestmark = pytest.mark.gpu

W, H, SHOT, K = 64, 48, 6, 4
N = 2 * SHOT
SEED, FIRST, PER = 3, 60, 10
SEGMENTS = [(0, 4), (4, 6), (6, 10), (10, 12)]  # every K = 4 frames of each shot; the cut: frame 6
FIT = ["--tris", "10", "--size", "48", "--iters-per-frame", str(PER), "--first-frame-iters", str(FIRST),
       "--seed", str(SEED), "--backend", "gpu", "--quiet"]
API = dict(triangles=10, size=48, iters_per_frame=PER, first_frame_iters=FIRST, seed=SEED, backend="gpu", segment=K)


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    d = tmp_path_factory.mktemp("segclip")
    first, _ = moving_disc(SHOT, W, H, 0)
    second, _ = moving_disc(SHOT, W, H, 1)
    (d / "frames").mkdir()
    for k, f in enumerate(np.concatenate([first, 255 - second[:, ::-1]])):
        Image.fromarray(f).save(d / "frames" / f"f{k}.png")
    return d


def _names(suffix: str) -> list[str]:
    return [f"frame_{k:04d}{suffix}" for k in range(N)]


def _files(folder, suffix: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob(f"*{suffix}"))}


@pytest.fixture(scope="module")
def local(clip, gpu_ctx):
    """The local segmented run (`--segment 4`, no cluster): output frames and scenes."""
    d = clip
    assert main(["video", str(d / "frames"), "-o", str(d / "local"), *FIT, "--segment", str(K),
                 "--scenes", str(d / "local-scenes"), "--svg-dir", str(d / "local-svg")]) == 0
    frames, scenes = _files(d / "local", ".png"), _files(d / "local-scenes", ".trifit.json")
    assert list(frames) == _names(".png") and list(scenes) == _names(".trifit.json")
    return {"frames": frames, "scenes": scenes, "svg": _files(d / "local-svg", ".svg")}


# ---------------------------------------------------------------------- where segments start
def test_the_cut_rule():
    from trifit.shots import CUT_MIN_CHANGE, find_cuts
    from trifit.videoseg import split

    calm = np.full(12, 0.01)
    assert find_cuts(calm) == []
    spike = calm.copy()
    spike[5] = 0.3
    assert find_cuts(spike) == [6]  # changes[k - 1] is frame k's
    assert find_cuts(spike * 0.2) == []  # relatively as large, but under the absolute floor: noise, not a shot
    assert 0.3 * 0.2 < CUT_MIN_CHANGE
    assert find_cuts(np.full(12, 0.3)) == []  # steady fast motion: large, but no larger than its neighbours'
    two = calm.copy()
    two[[3, 5]] = 0.4
    assert find_cuts(two) == [4, 6]  # a cut near another still counts (the neighbours' median)
    assert find_cuts([0.5]) == [1] and find_cuts([0.05]) == []  # two frames: the absolute test alone
    assert split(12, 4) == [(0, 4), (4, 8), (8, 12)]
    assert split(12, 4, [6]) == SEGMENTS  # a cut restarts the count of K
    assert split(12, 100, [6, 6, 0, 12]) == [(0, 6), (6, 12)]
    assert split(12, 1, [6]) == [(k, k + 1) for k in range(12)]
    assert split(1, 4) == [(0, 1)]


def test_segment_seeds_depend_on_the_seed_and_the_start_only():
    from trifit.shots import shot_seed as segment_seed

    assert segment_seed(SEED, 0) == SEED  # one segment over the clip is the whole-clip run
    seeds = {segment_seed(SEED, s) for s in range(1, 50)}
    assert len(seeds) == 49 and segment_seed(SEED, 6) == segment_seed(SEED, 6) != segment_seed(SEED + 1, 6)
    assert all(0 <= s < 2 ** 32 for s in seeds) and segment_seed(-1, 6) >= 0


def test_the_joined_clip_is_cut_at_the_join(clip):
    from trifit.shots import find_cuts
    from trifit.video import open_clip
    from trifit.videoseg import frame_measures

    changes, contents, settles = frame_measures(open_clip(clip / "frames"), 48)
    assert changes.shape == (N - 1,) and contents.shape == settles.shape == (N,)
    # (photographs: content throughout; a cut, no transition that ends)
    assert find_cuts(changes, contents, settles) == find_cuts(changes) == [SHOT]


def test_each_segment_is_cold_at_its_start_and_warm_after(clip, local):
    from trifit.shots import shot_seed as segment_seed

    for s, e in SEGMENTS:
        for k in range(s, e):
            meta = json.loads(local["scenes"][f"frame_{k:04d}.trifit.json"])["meta"]
            assert meta["video"]["frame"] == k and meta["video"]["segment"] == s
            assert meta["seed"] == segment_seed(SEED, s)
            assert meta["iterations"] == FIRST + (k - s) * PER, (k, meta["iterations"])


def test_the_first_segment_is_the_whole_clip_runs_start(clip, local, tmp_path):
    """Without --segment nothing changes; the first segment's frames are its frames (the scene
    says which segment a frame is of, nothing else differs)."""
    assert main(["video", str(clip / "frames"), "-o", str(tmp_path / "whole"), *FIT,
                 "--scenes", str(tmp_path / "scenes")]) == 0
    whole = _files(tmp_path / "scenes", ".trifit.json")
    assert all("segment" not in json.loads(b)["meta"]["video"] for b in whole.values())
    for k in range(SEGMENTS[0][1]):
        name = f"frame_{k:04d}.trifit.json"
        seg = json.loads(local["scenes"][name])
        assert seg["meta"]["video"].pop("segment") == 0
        assert seg == json.loads(whole[name]), name
    later = f"frame_{SEGMENTS[1][0]:04d}.trifit.json"
    assert json.loads(local["scenes"][later])["meta"]["iterations"] != json.loads(whole[later])["meta"]["iterations"]


def test_a_local_segmented_run_stops_and_resumes(clip, local, tmp_path):
    """Without a cluster, cancelled as Ctrl+C does, inside a segment: the re-run keeps the whole
    segments whose scenes are all there and refits the rest from their first frame, to the same bytes."""
    from trifit.videorun import run_video, work_folder

    out, controls = tmp_path / "out", []

    def stop_at_frame_7(k, scene, stats):  # the second frame of segment (6, 10)
        if k == 7:
            controls[0].cancel()

    first = run_video(clip / "frames", out, on_clip=controls.append, on_frame=stop_at_frame_7, **API)
    assert first.interrupted and first.done == first.written == 8 and len(first.psnr) == 8
    assert list(_files(out, ".png")) == _names(".png")[:8]
    assert len(list((work_folder(out) / "scenes").iterdir())) == 8
    fitted = []
    again = run_video(clip / "frames", out, on_frame=lambda k, s, t: fitted.append(k), **API)
    assert again.resumed_from == 6 and fitted == list(range(6, N)) and again.written == N
    assert _files(out, ".png") == local["frames"]


# ---------------------------------------------------------------------- on a cluster
def test_a_cluster_writes_the_local_bytes(clip, local, cluster, tmp_path, capfd, monkeypatch):
    """Scenes, output frames and SVGs, byte for byte; the driver makes no engine (it needs no GPU)."""
    import trifit.engine

    def no_engine(*args, **kwargs):
        raise AssertionError("the driver made an engine")

    monkeypatch.setattr(trifit.engine, "Engine", no_engine)
    out = tmp_path / "out"
    assert main(["video", str(clip / "frames"), "-o", str(out), *FIT, "--segment", str(K), "--dask", cluster[0],
                 "--scenes", str(tmp_path / "scenes"), "--svg-dir", str(tmp_path / "svg")]) == 0
    assert _files(out, ".png") == local["frames"]
    assert _files(tmp_path / "scenes", ".trifit.json") == local["scenes"]
    assert _files(tmp_path / "svg", ".svg") == local["svg"] and len(local["svg"]) == N
    assert not (tmp_path / ".out.trifit-video").exists() and not list(tmp_path.rglob(".*.part"))
    assert "dashboard: " in capfd.readouterr().err


def test_many_segments_through_a_small_window(clip, cluster, tmp_path, monkeypatch):
    """Two frames a segment (seven segments, with the cut) and two tasks out at a time, counting
    the segments that came back early and wait: all of them flow through, to the local bytes."""
    import trifit.videocluster
    from trifit.videorun import run_video

    monkeypatch.setattr(trifit.videocluster, "IN_FLIGHT_PER_SLOT", 1)
    small = {**API, "segment": 2}
    run_video(clip / "frames", tmp_path / "here", scenes_dir=tmp_path / "here-scenes", **small)
    result = run_video(clip / "frames", tmp_path / "there", dask=cluster[0], scenes_dir=tmp_path / "there-scenes",
                       **small)
    assert (result.done, result.written) == (N, N)
    starts = sorted({json.loads(b)["meta"]["video"]["segment"] for b in _files(tmp_path / "there-scenes", ".json").values()})
    assert starts == [0, 2, 4, 6, 8, 10]  # (the cut at 6 falls on a boundary of two)
    assert _files(tmp_path / "there", ".png") == _files(tmp_path / "here", ".png")
    assert _files(tmp_path / "there-scenes", ".json") == _files(tmp_path / "here-scenes", ".json")


def _count_scene_writes(monkeypatch) -> dict[str, int]:
    import trifit.videorun

    writes: dict[str, int] = {}
    real = trifit.videorun.atomic_write_bytes

    def counting(path, data, **kw):
        if str(path).endswith(".trifit.json"):
            key = f"{os.path.basename(os.path.dirname(path))}/{os.path.basename(path)}"
            writes[key] = writes.get(key, 0) + 1
        return real(path, data, **kw)

    monkeypatch.setattr(trifit.videorun, "atomic_write_bytes", counting)
    return writes


def test_a_killed_worker_costs_nothing(clip, local, cluster, tmp_path, monkeypatch):
    from trifit.videorun import run_video

    address, client = cluster
    writes = _count_scene_writes(monkeypatch)
    with kill_the_first_to_start(client, tmp_path / "killed") as killed:  # at its segment's start
        result = run_video(clip / "frames", tmp_path / "out", dask=address, scenes_dir=tmp_path / "asked", **API)
    assert killed(), "no worker was killed: nothing was tested"
    assert (result.done, result.written, result.interrupted) == (N, N, False)
    assert _files(tmp_path / "out", ".png") == local["frames"]
    assert _files(tmp_path / "asked", ".trifit.json") == local["scenes"]
    assert writes == {f"{d}/{n}": 1 for d in ("scenes", "asked") for n in _names(".trifit.json")}  # (work folder's, asked)
    deadline = time.monotonic() + 60  # the nanny restarts the worker: later tests have two again
    while len(client.scheduler_info()["workers"]) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)


def test_a_segment_the_scheduler_cancels_is_submitted_again(clip, local, cluster, tmp_path, monkeypatch):
    from test_cluster import _lose_the_first, _submitted_again

    from trifit.videorun import run_video

    writes = _count_scene_writes(monkeypatch)
    lost, submitted = _lose_the_first(monkeypatch)
    result = run_video(clip / "frames", tmp_path / "out", dask=cluster[0], scenes_dir=tmp_path / "asked", **API)
    _submitted_again(lost, submitted)
    assert (result.done, result.written, result.interrupted) == (N, N, False)
    assert _files(tmp_path / "out", ".png") == local["frames"]
    assert _files(tmp_path / "asked", ".trifit.json") == local["scenes"]
    assert writes == {f"{d}/{n}": 1 for d in ("scenes", "asked") for n in _names(".trifit.json")}


def _stop_at_once(controls):
    """on_frame: cancel the run (as Ctrl+C does) at the first frame back: the segment it is of
    is the only one taken (which one that is depends on the workers' timing)."""
    def on_frame(k, scene, stats):
        controls[0].cancel()
    return on_frame


def test_an_interrupted_run_keeps_its_frames_and_resumes(clip, local, cluster, tmp_path):
    """Cancelled once the first segment is back: the frames written (if that segment was the
    first) are in order from the first and the work folder holds its scenes; the re-run fits only
    the other segments, renders the kept one's output (gone) from its scenes on a worker, and
    writes the local bytes."""
    from trifit.videorun import run_video, work_folder

    out, controls = tmp_path / "out", []
    result = run_video(clip / "frames", out, dask=cluster[0], on_clip=controls.append,
                       on_frame=_stop_at_once(controls), **API)
    assert result.interrupted and (result.done - result.resumed_from) in {e - s for s, e in SEGMENTS}
    assert result.written in (0, result.done)
    assert list(_files(out, ".png")) == _names(".png")[:result.written]
    kept = sorted((work_folder(out) / "scenes").glob("*.trifit.json"))
    assert len(kept) == result.done and all(p.read_bytes() == local["scenes"][p.name] for p in kept)
    for png in out.glob("*.png"):
        png.unlink()
    fitted = []
    again = run_video(clip / "frames", out, dask=cluster[0], on_frame=lambda k, s, t: fitted.append(k), **API)
    assert again.resumed_from == result.done and (again.done, again.written) == (N, N) and not again.interrupted
    assert sorted(fitted) == sorted(set(range(N)) - {int(p.name[6:10]) for p in kept})
    assert _files(out, ".png") == local["frames"]
    assert not work_folder(out).exists()


def test_an_interrupted_mp4_is_playable_and_finished_by_a_rerun(clip, local, cluster, tmp_path):
    """Into a video file: stopped here (no cluster) inside the third segment, the file holds the
    frames written; the re-run on the cluster renders the two kept segments from their scenes on
    workers and fits the rest. Compared by picture, not bytes: libx264 in FFmpeg does not always
    give the same bytes for the same frames here (two local runs differed)."""
    from trifit.videorun import run_video

    av = av_or_fail()
    out, controls = tmp_path / "o.mp4", []

    def stop_at_frame_7(k, scene, stats):
        if k == 7:
            controls[0].cancel()

    result = run_video(clip / "frames", out, on_clip=controls.append, on_frame=stop_at_frame_7, **API)
    assert result.interrupted and len(read_video(av, out)[0]) == result.written == result.done == 8
    again = run_video(clip / "frames", out, dask=cluster[0], **API)
    assert again.resumed_from == SEGMENTS[2][0] and again.written == N
    frames, rate, _ = read_video(av, out)
    want = [np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in local["frames"].values()]
    assert len(frames) == N and rate == 25
    for k, f in enumerate(frames):  # each frame nearest its own (H.264 at crf 18 is close, not exact)
        err = [np.mean((f.astype(np.float64) - w) ** 2) for w in want]
        assert int(np.argmin(err)) == k and 10 * np.log10(255 ** 2 / max(err[k], 1e-9)) > 30, (k, err)


def test_a_local_run_resumes_a_cluster_runs_work(clip, local, cluster, tmp_path):
    """The work folder is the same whichever front end fitted it: a cluster's interrupted run
    finished here (kept segments rendered on this engine) gives the local bytes."""
    from trifit.videorun import run_video

    controls = []
    first = run_video(clip / "frames", tmp_path / "out", dask=cluster[0], on_clip=controls.append,
                      on_frame=lambda k, s, t: controls[0].cancel(), **API)
    assert first.interrupted
    for png in (tmp_path / "out").glob("*.png"):  # the kept frames' output gone: rendered again from their scenes
        png.unlink()
    again = run_video(clip / "frames", tmp_path / "out", **API)
    assert again.resumed_from == first.done and again.done == N
    assert _files(tmp_path / "out", ".png") == local["frames"]


def test_cli_local_cluster_and_ctrl_c(clip, tmp_path):
    """`--dask local:2` from the command line: Ctrl+C (to the whole process group, as a terminal
    sends it) ends the run with status 130 and no worker traceback; the frames written are in
    order from the first, their scenes kept for a re-run. (A segment a frame: twelve cold fits,
    so that the signal comes well before the end.)"""
    from trifit.videorun import work_folder

    distributed_or_fail()
    out = tmp_path / "out"
    cmd = [sys.executable, "-P", "-m", "trifit.cli", "video", str(clip / "frames"), "-o", str(out), *FIT,
           "--segment", "1", "--dask", "local:2"]
    status, err = interrupt_when(cmd, lambda: list(out.glob("*.png")))
    assert status == 130, err[-2000:]
    assert "Traceback" not in err and "interrupted" in err and "dashboard: http" in err, err[-2000:]
    kept = _files(out, ".png")
    assert 1 <= len(kept) < N and list(kept) == _names(".png")[:len(kept)]
    scenes = sorted(p.name for p in (work_folder(out) / "scenes").iterdir())
    assert len(scenes) >= len(kept) and set(_names(".trifit.json")[:len(kept)]) <= set(scenes)
    assert f"{len(scenes)} of {N} frames" in err, err[-2000:]


# ---------------------------------------------------------------------- bad input
@pytest.mark.parametrize("extra, says", [
    (["--dask", "local:2"], "--dask needs --segment K"),
    (["--segment", "4", "--dask", "nowhere"], "a scheduler's address"),
    (["--segment", "4", "--dask", "local:0"], "local:N with N a positive"),
    (["--segment", "0"], "expected a positive number"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(clip, tmp_path, capsys, extra, says):
    out = tmp_path / "out"
    assert main(["video", str(clip / "frames"), "-o", str(out), *FIT, *extra]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


def test_no_scheduler_at_the_address_is_exit_2(clip, tmp_path, capsys, monkeypatch):
    distributed_or_fail()
    import socket

    import trifit.cluster

    monkeypatch.setattr(trifit.cluster, "CONNECT_TIMEOUT_S", 1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    out = tmp_path / "out"
    assert main(["video", str(clip / "frames"), "-o", str(out), *FIT, "--segment", str(K), "--dask", address]) == 2
    err = capsys.readouterr().err
    assert f"--dask {address}: no scheduler answers there" in err and len(err.strip().splitlines()) == 1, err
    assert not list(out.glob("*.png")) and not (tmp_path / ".out.trifit-video").exists()  # said before any work


def test_a_worker_with_another_trifit_version_ends_the_run(clip, cluster, tmp_path, capsys, monkeypatch):
    import trifit

    monkeypatch.setattr(trifit, "__version__", "0.0.0-other")
    out = tmp_path / "out"
    assert main(["video", str(clip / "frames"), "-o", str(out), *FIT, "--segment", str(K), "--dask", cluster[0]]) == 2
    err = capsys.readouterr().err
    assert "trifit: error: a worker runs trifit" in err and "install the same version everywhere" in err, err
    assert "Traceback" not in err and not list(out.glob("*.png"))


def test_the_cli_loads_dask_only_for_dask(clip, tmp_path, gpu_ctx):
    """`video --help` and a local segmented run never import dask (a cluster's start is slow)."""
    quick = ["--tris", "4", "--size", "16", "--iters-per-frame", "1", "--first-frame-iters", "2", "--quiet"]
    code = ("import sys\nfrom trifit.cli import main\n"
            "for args in (['video', '--help'], "
            f"['video', {str(clip / 'frames')!r}, '-o', {str(tmp_path / 'o')!r}, '--segment', '6', *{quick!r}]):\n"
            "    try:\n        print('STATUS', main(args))\n    except SystemExit:\n        pass\n"
            "print('LOADED', sorted(m for m in ('dask', 'distributed', 'trifit.cluster', 'trifit.videocluster') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120)
    assert "STATUS 0" in out.stdout and "LOADED []" in out.stdout, out.stdout[-500:] + out.stderr[-500:]
    assert len(list((tmp_path / "o").glob("*.png"))) == N
