"""`trifit video` (issue #21): a clip fitted frame by frame with triangles that persist and move.

The clip is made here (tests/clips.py): a still photograph (the bundled sample) with sensor-like
noise and a red disc crossing it, 24 frames of 80x60 at 25 frames/s, written with PyAV as lossless
H.264 (with an AAC sound track) and as a folder of PNGs. Tests that need PyAV fail under CI=true when it is missing."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from clips import assert_same_video, av_or_fail, moving_disc, read_video, write_video
from PIL import Image

from trifit.cli import main

W, H, N, RATE = 80, 60, 24, 25
FIT = ["--tris", "30", "--size", "80", "--iters-per-frame", "30", "--first-frame-iters", "300"]


@pytest.fixture(scope="module")
def av():
    return av_or_fail()


def _clip(n: int = N, seed: int = 0):
    return moving_disc(n, W, H, seed)


def _psnr(a, b) -> float:
    return float(10 * np.log10(255.0 ** 2 / np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)))


def _flicker(frames, mask):
    from trifit.video import flicker

    return flicker(frames, mask)


@pytest.fixture(scope="module")
def clip(tmp_path_factory, av):
    d = tmp_path_factory.mktemp("clip")
    frames, still = _clip()
    write_video(av, d / "clip.mp4", frames, RATE)
    (d / "frames").mkdir()
    for k, f in enumerate(frames):
        Image.fromarray(f).save(d / "frames" / f"f{k}.png")  # natural order: f2 before f10
    return {"dir": d, "mp4": d / "clip.mp4", "folder": d / "frames", "frames": frames, "still": still,
            "decoded": read_video(av, d / "clip.mp4")[0]}


@pytest.fixture(scope="module")
def mp4_run(clip, gpu_ctx):
    """The clip fitted straight through, MP4 in and out, with its scenes."""
    d = clip["dir"]
    assert main(["video", str(clip["mp4"]), "-o", str(d / "a.mp4"), *FIT, "--scenes", str(d / "scenes_a"), "--quiet"]) == 0
    return d / "a.mp4", d / "scenes_a"


# ---------------------------------------------------------------------- the output
def test_mp4_frames_rate_sound_quality_and_flicker(clip, mp4_run, av):
    out, scenes = mp4_run
    frames, rate, audio = read_video(av, out)
    assert frames.shape == (N, H, W, 3) and rate == RATE and audio == ["aac"]
    assert sorted(p.name for p in scenes.iterdir()) == [f"frame_{k:04d}.trifit.json" for k in range(N)]
    src = clip["decoded"]
    flat = [_psnr(np.broadcast_to(f.mean(axis=(0, 1)), f.shape), f) for f in src]
    fitted = [_psnr(o, f) for o, f in zip(frames, src)]
    assert min(np.subtract(fitted, flat)) > 4.0, (fitted, flat)  # every frame well above a flat fill
    assert _flicker(frames, clip["still"]) <= 1.5 * _flicker(src, clip["still"])
    assert not (out.parent / ".a.mp4.trifit-video").exists()  # done: no progress left behind


@pytest.fixture(scope="module")
def folder_run(clip, gpu_ctx):
    """The folder of frames fitted into a folder of frames, with SVGs: (output folder, SVG folder)."""
    d = clip["dir"]
    out, svgs = d / "out", d / "svg"
    assert main(["video", str(clip["folder"]), "-o", str(out), *FIT, "--svg-dir", str(svgs), "--quiet"]) == 0
    return out, svgs


def _pngs(folder):
    names = sorted(p.name for p in folder.iterdir())
    assert names == [f"frame_{k:04d}.png" for k in range(N)]
    return np.stack([np.asarray(Image.open(folder / n).convert("RGB")) for n in names])


def test_folder_in_folder_and_svgs_out(clip, folder_run):
    out, svgs = folder_run
    frames = _pngs(out)
    assert frames.shape == (N, H, W, 3)
    assert len(list(svgs.glob("frame_*.svg"))) == N
    assert _flicker(frames, clip["still"]) <= 1.5 * _flicker(clip["frames"], clip["still"])


@pytest.mark.parametrize("suffix, note", [(".gif", "no sound"), (".webm", "no sound")])
def test_gif_and_webm_keep_the_count_and_rate(clip, gpu_ctx, av, tmp_path, capfd, suffix, note):
    out = tmp_path / f"o{suffix}"
    quick = ["--tris", "10", "--size", "40", "--iters-per-frame", "2", "--first-frame-iters", "10"]
    assert main(["video", str(clip["mp4"]), "-o", str(out), *quick, "--quiet"]) == 0
    frames, rate, audio = read_video(av, out)
    assert len(frames) == N and abs(float(rate) - RATE) < 0.01 and audio == []
    assert frames.shape[1:3] == (H, W)  # at the source size, whatever the working size
    assert note in capfd.readouterr().err  # the AAC track cannot go into it: said, not silently dropped


# ---------------------------------------------------------------------- host work beside the fit
def test_writing_behind_and_decoding_ahead_change_no_byte(clip, mp4_run, gpu_engine, av, monkeypatch):
    """The threaded run (mp4_run) against every call in line, with the checkpoint written once
    (after the first frame): the same video and scenes, to the byte."""
    import trifit.checkpoint
    from trifit import videorun

    saved = []
    save = trifit.checkpoint.save_checkpoint
    monkeypatch.setattr(trifit.checkpoint, "save_checkpoint", lambda ck, path: saved.append(ck.iteration) or save(ck, path))
    monkeypatch.setattr(videorun, "CHECKPOINT_EVERY_S", 1e9)
    d = clip["dir"]
    result = videorun.run_video(clip["mp4"], d / "seq.mp4", triangles=30, size=80, iters_per_frame=30,
                                first_frame_iters=300, scenes_dir=d / "scenes_seq", engine=gpu_engine, overlap=False)
    assert result.done == N and not result.interrupted
    assert saved == [300]  # one checkpoint, after the first frame: not one a frame
    want_out, want_scenes = mp4_run
    assert_same_video(av, d / "seq.mp4", want_out)
    for k in range(N):
        name = f"frame_{k:04d}.trifit.json"
        assert (d / "scenes_seq" / name).read_bytes() == (want_scenes / name).read_bytes(), name


def test_the_same_frames_encode_to_the_same_bytes(av, tmp_path):
    # x264's AVX-512 code gave another file now and then for the same frames (render/video.py
    # x264_cpu): most encodes of this clip differed from the first before, none after
    from fractions import Fraction

    from trifit.video import Clip, ClipOutput, output_kind

    frames = moving_disc(120, 352, 264)[0]
    clip = Clip(tmp_path / "in.mp4", len(frames), (352, 264), Fraction(25))
    files = []
    for k in range(4):
        out = tmp_path / f"again{k}.mp4"
        writer = ClipOutput(output_kind(out), clip, (352, 264), lambda line: None)
        for i, f in enumerate(frames):
            writer.write(i, np.ascontiguousarray(f))
        assert writer.close(True)
        files.append(out)
    for other in files[1:]:
        assert_same_video(av, other, files[0])


def test_background_threads_hand_errors_over_and_end():
    import threading

    from trifit.background import Behind, Prefetch

    def items():
        yield from range(3)
        raise ValueError("frame 3 is damaged")

    for threaded in (True, False):
        got, ahead = [], Prefetch(items, 2, threaded=threaded)
        with pytest.raises(ValueError, match="frame 3"):
            for item in ahead:
                got.append(item)
        assert got == [0, 1, 2]
        ahead.close()
        endless = Prefetch(lambda: iter(int, 1), 2, threaded=threaded)  # stopped while the producer waits
        assert next(endless) == 0
        endless.close()

        done, behind = [], Behind(2, threaded=threaded)
        behind.call(done.append, 1)
        with pytest.raises(OSError, match="disk full"):  # in line at once; threaded at a later call or close
            behind.call(_fail)
            for k in range(10):
                behind.call(done.append, k)
            behind.close()
        with pytest.raises(OSError, match="disk full"):  # and every call after it is refused
            behind.call(done.append, 99)
        behind.close(abort=True)
        assert done == [1]
    assert not [t for t in threading.enumerate() if t.name.startswith("trifit-")]


def _fail():
    raise OSError("disk full")


# ---------------------------------------------------------------------- warm against cold
def test_warm_start_beats_cold_fits_at_equal_iterations(clip, folder_run, gpu_engine, capsys):
    """The same iterations per frame (over the clip's first half): warm-started frames (the first
    frame's full fit carried on, as `trifit video` wrote them) against each frame fitted from
    nothing -- higher PSNR, and a fraction of the flicker."""
    from trifit.export import render_large, with_edges
    from trifit.fitter import Fitter
    from trifit.run import FitRun, StopConditions

    n = N // 2
    frames, still = clip["frames"][:n], clip["still"]
    warm = _pngs(folder_run[0])[:n]
    cold = []
    for f in frames:
        fit = Fitter(f, triangles=30, size=80, engine=gpu_engine)
        FitRun(fit, StopConditions(iterations=30)).run()
        cold.append(render_large(with_edges(fit.scene, W, H), W, H, gpu_engine, dtype=np.uint8))
        fit.close()
    cold = np.stack(cold)
    psnr_warm = np.mean([_psnr(o, f) for o, f in zip(warm[1:], frames[1:])])
    psnr_cold = np.mean([_psnr(o, f) for o, f in zip(cold[1:], frames[1:])])
    fl_in, fl_warm, fl_cold = (_flicker(x, still) for x in (frames, warm, cold))
    with capsys.disabled():
        print(f"\nwarm {psnr_warm:.2f} dB, flicker {fl_warm:.4f}; cold {psnr_cold:.2f} dB, flicker {fl_cold:.4f}; "
              f"input flicker {fl_in:.4f}")
    assert psnr_warm > psnr_cold + 1.5
    assert fl_warm < fl_cold / 3 and fl_warm <= 1.5 * fl_in


# ---------------------------------------------------------------------- Ctrl+C and resumption
def test_ctrl_c_keeps_a_playable_clip_and_a_rerun_finishes_it_exactly(clip, mp4_run, av, capfd):
    d = clip["dir"]
    out, scenes, work = d / "b.mp4", d / "scenes_b", d / ".b.mp4.trifit-video"
    args = ["video", str(clip["mp4"]), "-o", str(out), *FIT, "--scenes", str(scenes), "--quiet"]
    p = subprocess.Popen([sys.executable, "-m", "trifit.cli", *args], stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    while not (work / "checkpoint.npz").exists() and p.poll() is None and time.monotonic() - t0 < 120:
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)  # after the first frame: the fit stops at its next chunk
    err = p.communicate(timeout=120)[1]
    assert p.returncode == 130, err
    assert "interrupted" in err.strip().splitlines()[-1]
    kept, rate, audio = read_video(av, out)  # playable, with every finished frame
    k = len(kept)
    assert 1 <= k < N and rate == RATE and audio == ["aac"]
    assert len(list(scenes.iterdir())) == k and work.is_dir()

    capfd.readouterr()
    assert main(args[:-1]) == 0  # the same arguments (the bar aside): goes on from the last checkpoint
    resumed = re.search(r"\((\d+) from an earlier run\)", capfd.readouterr().err)
    assert resumed and 1 <= int(resumed[1]) <= k  # checkpoints come every second or so: frames after one are refitted
    want_out, want_scenes = mp4_run
    for n in range(N):  # as if never interrupted: the same scenes and the same video, to the byte
        name = f"frame_{n:04d}.trifit.json"
        assert (scenes / name).read_bytes() == (want_scenes / name).read_bytes(), name
    assert_same_video(av, out, want_out)
    assert not work.exists()


# ---------------------------------------------------------------------- bad input
def _bad_inputs(d, av):
    mp4 = d / "clip.mp4"
    (d / "junk.mp4").write_bytes(np.random.default_rng(1).bytes(4000))
    fast = d / "fast.mp4"
    write_video(av, fast, _clip(8)[0], RATE, audio=False, options={"movflags": "faststart"})
    data = fast.read_bytes()
    (d / "cut.mp4").write_bytes(data[: len(data) * 2 // 3])  # the index at the front promises frames that are gone
    (d / "nomoov.mp4").write_bytes(mp4.read_bytes()[:6000])  # cut before its index
    with av.open(str(d / "empty.mkv"), "w") as c:
        s = c.add_stream("libx264", rate=RATE)
        s.width, s.height, s.pix_fmt = W, H, "yuv420p"
        c.start_encoding()
    (d / "nothing").mkdir()
    (d / "nothing" / "notes.txt").write_text("no frames here")
    (d / "mixed").mkdir()
    for k in range(3):
        Image.new("RGB", (W, H) if k != 2 else (W, H + 2)).save(d / "mixed" / f"f{k}.png")


@pytest.mark.parametrize("source, output, words", [
    ("junk.mp4", "o.mp4", "not a readable video"),
    ("cut.mp4", "o.mp4", "truncated"),
    ("nomoov.mp4", "o.mp4", "not a readable video, or truncated"),
    ("empty.mkv", "o.mp4", "no video frames"),
    ("nothing", "o.mp4", "no frames"),
    ("mixed", "o.gif", "f2.png: frame is 80x62, the first frame (f0.png) is 80x60"),
    ("missing.mp4", "o.mp4", "no such file"),
    ("clip.mp4", "o.xyz", "no bundled encoder"),
    ("clip.mp4", "o.avi", "no bundled encoder"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(clip, av, tmp_path, capfd, source, output, words):
    d = tmp_path
    for name in ("clip.mp4",):
        (d / name).write_bytes((clip["dir"] / name).read_bytes())
    _bad_inputs(d, av)
    before = sorted(p.name for p in d.iterdir())
    capfd.readouterr()
    assert main(["video", str(d / source), "-o", str(d / output), "--quiet"]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and err.startswith("trifit: error: ") and words in err, err
    assert sorted(p.name for p in d.iterdir()) == before  # nothing written, not even a folder


def _refusal_inputs(d, clip):
    (d / "clip.mp4").write_bytes((clip["dir"] / "clip.mp4").read_bytes())
    for name, size in (("frames", (W, H)), ("tall", (1, 200))):
        (d / name).mkdir()
        for k in range(3):
            Image.new("RGB", size, (40 * k, 90, 200)).save(d / name / f"f{k}.png")
    (d / "trunc").mkdir()
    for k in range(3):
        Image.new("RGB", (W, H), (40 * k, 90, 200)).save(d / "trunc" / f"f{k}.jpg")
    whole = (d / "trunc" / "f2.jpg").read_bytes()
    (d / "trunc" / "f2.jpg").write_bytes(whole[: len(whole) // 2])  # its header and verify() pass


@pytest.mark.parametrize("source, output, extra, words", [
    ("clip.mp4", "clip.mp4", [], "is an input of this command"),
    ("frames", "frames", [], "is an input of this command"),
    ("clip.mp4", "o.mp4", ["--scenes", "@o.mp4"], "would be both the output and the scenes"),
    ("clip.mp4", "nodir/o.mp4", ["--scenes", "@sc", "--svg-dir", "@svg"], "does not exist"),
    ("trunc", "o.mp4", [], "f2.jpg: not a readable frame"),
    ("tall", "o.mp4", ["--width", "100"], "cannot take 100x20000 frames"),
    ("clip.mp4", "o.mp4", ["--scale", "1e308"], "gives no render size"),
    ("clip.mp4", "o.mp4", ["--size", "5000"], "at most 4096"),
    ("clip.mp4", "o.mp4", ["--tris", "70000"], "at most 20000"),
    ("clip.mp4", "o.mp4", ["--segment", "2", "--dask", "local:100000"], "local workers"),
])
def test_refused_before_any_work_and_nothing_made(clip, av, tmp_path, capfd, source, output, extra, words):
    """Outputs that would overwrite the input or each other, frames the fit would refuse later,
    sizes an encoder will not open, options out of range: one line and exit 2, before any folder
    or file is made (the input's bytes unchanged)."""
    d = tmp_path
    _refusal_inputs(d, clip)
    extra = [str(d / a[1:]) if a.startswith("@") else a for a in extra]  # (@name: a path in the test's folder)
    names = sorted(q.name for q in d.iterdir())
    before = {q: q.read_bytes() for q in sorted(d.rglob("*")) if q.is_file()}
    capfd.readouterr()
    assert main(["video", str(d / source), "-o", str(d / output), "--tris", "3", "--size", "16",
                 "--first-frame-iters", "2", "--iters-per-frame", "2", "--quiet", *extra]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and err.startswith("trifit: error: ") and words in err, err
    assert sorted(q.name for q in d.iterdir()) == names  # no folder made, no work folder left
    assert {q: q.read_bytes() for q in sorted(d.rglob("*")) if q.is_file()} == before


# ---------------------------------------------------------------------- the mechanism
def test_use_targets_keeps_parameters_moments_and_iteration(gpu_engine):
    from trifit import Fitter, TrifitError

    frames, _ = _clip(3)
    fit = Fitter(frames[0], triangles=12, size=64, engine=gpu_engine, coarse_min_size=16)
    fit.plan(200)
    fit.step(20)
    assert fit.coarse
    before = fit.checkpoint()
    fit.use_targets([frames[2]])
    after = fit.checkpoint()
    assert not fit.coarse and not fit.has_coarse_stage and fit.iteration == before.iteration
    for a, b in zip((before.raw, before.m, before.v), (after.raw, after.m, after.v)):
        assert np.array_equal(a, b)
    assert np.abs(fit.target - np.asarray(Image.fromarray(frames[2]).resize((64, 48)), np.float32) / 255).max() < 0.2
    fit.step(5)  # and it fits the new target from there
    with pytest.raises(TrifitError, match="keep their working size"):
        fit.use_targets([frames[0][:, :40]])
    fit.close()
