"""Video fits measured (issue #21): warm-started frames (trifit.videofit.ClipFit) against cold
per-frame fits at equal iterations per frame, over policy variants -- PSNR (on the still clip also
over the disc's path: is the moving content tracked?), flicker on a still background, temporal
error, frames per second.

Clips are made here: ``still`` -- a bundled photograph as a still background with sensor-like
noise (sigma ``--noise`` of 255) and a red disc crossing it; ``pan`` -- a slow pan over the other
photograph with the same disc; ``cut`` -- the still clip's first half, then the pan's second half,
and ``cutback`` the other way round (each row also has the PSNR of the 12 frames after the clip's
largest change between frames); ``fade`` -- the still clip faded in from black over its first
quarter, ``dip`` -- the still clip faded out to black, black, and the pan faded in, each a
sixth of the clip or ``--fade`` frames (their rows also have the PSNR of the frames after the fade in), and
``dissolve`` -- the still clip cross-dissolving into the pan over the clip's third sixth (or
``--fade`` frames; its rows have the PSNR of the frames after the dissolve), ``dim`` -- the still clip's
light dimming to 0.4 over the same frames (its rows likewise), and ``light`` -- the pan as its light
dims to 0.6 and comes back over the clip. Output frames are rendered at
the clip's size with crisp edges, as `trifit video` writes them.

  .venv/bin/python tools/video_measure.py --size 80 --tris 30 --iters 30 --first 150 --frames 24
  .venv/bin/python tools/video_measure.py --size 176 --tris 150 --iters 100 --first 600 --frames 48 \
      --sweep "lr_start=0.2,0.5,1 renew=0,0.02,0.05 sigma_boost=1,1.5"
  .venv/bin/python tools/video_measure.py --size 80 --tris 30 --iters 30 --first 300 --frames 24 \
      --steady 0,1,3,10 --no-cold      # the temporal term (`trifit video --steady W`)
  .venv/bin/python tools/video_measure.py --clips cut --frames 48 --no-cold --sweep "cut_renew=0,0.1,0.5"
  .venv/bin/python tools/video_measure.py --clips still,pan --no-cold --sweep "sigma_px=0" --set sigma_probes=6
  .venv/bin/python tools/video_measure.py --clips fade --no-cold --sweep "fade_restart=0"
  .venv/bin/python tools/video_measure.py --clips dissolve --no-cold --new-shot-at 24   # a restart there, by hand
  .venv/bin/python tools/video_measure.py --write-frames /tmp/clip --frames 120   # a clip for `trifit video`
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
import time

import numpy as np
from PIL import Image

import trifit
from trifit import shots
from trifit.export import render_large, with_edges
from trifit.fitter import Fitter
from trifit.imageio import as_target
from trifit.resources import sample_path
from trifit.run import FitRun, StopConditions
from trifit.shots import TransitionWatch, find_cuts, frame_change, frame_content, measured
from trifit.video import flicker
from trifit.videofit import ClipFit, FramePolicy


def make_clip(kind: str, n: int, W: int, H: int, noise: float, seed: int = 0, fade: int | None = None):
    """(frames uint8 (n, H, W, 3), still mask (H, W) or None). ``cut``: the still clip's first half,
    then a cut to the pan's second half; ``cutback``: the pan's first half, then the still clip's
    second half (no mask); ``fade``: the still clip faded in from black over its first ``fade``
    frames (a quarter of them by default; no mask); ``dip``: a dip to black between the still clip
    and the pan (no mask); ``dissolve``: the still clip cross-dissolving into the pan over ``fade``
    frames (a sixth of them by default) from a third of the clip (no mask)."""
    if kind == "fade":
        still, _ = make_clip("still", n, W, H, noise, seed)
        ramp = np.clip(np.arange(n) / max(fade or n // 4, 1), 0.0, 1.0)[:, None, None, None]
        return np.clip(still * ramp + 0.5, 0, 255).astype(np.uint8), None
    if kind == "dip":  # the still clip fades out, black, the pan fades in (each fade ``fade`` frames, a sixth by default)
        still, _ = make_clip("still", n, W, H, noise, seed)
        pan, _ = make_clip("pan", n, W, H, noise, seed)
        k, f = np.arange(n), max(fade or n // 6, 1)
        out_ramp = np.clip((n // 2 - f - 1 - k) / f + 1.0, 0.0, 1.0)   # 1 until n/2 - f, 0 from n/2
        in_ramp = np.clip((k - (n // 2 + f)) / f, 0.0, 1.0)            # 0 until n/2 + f, 1 from n/2 + 2f
        mix = still * out_ramp[:, None, None, None] + pan * in_ramp[:, None, None, None]
        return np.clip(mix + 0.5, 0, 255).astype(np.uint8), None
    if kind == "dim":  # the still clip's light dims to 0.4 over ``fade`` frames (a sixth by default) from a third of the clip
        still, _ = make_clip("still", n, W, H, noise, seed)
        ramp = np.clip((np.arange(n) - n // 3) / max(fade or n // 6, 1), 0.0, 1.0)[:, None, None, None]
        return np.clip(still * (1.0 - 0.6 * ramp) + 0.5, 0, 255).astype(np.uint8), None
    if kind == "light":  # the pan as its light dims to 0.6 and comes back (an exposure drift over the clip)
        pan, _ = make_clip("pan", n, W, H, noise, seed)
        gain = 1.0 - 0.4 * (1.0 - np.cos(2 * np.pi * np.arange(n) / n)) / 2
        return np.clip(pan * gain[:, None, None, None] + 0.5, 0, 255).astype(np.uint8), None
    if kind == "dissolve":
        still, _ = make_clip("still", n, W, H, noise, seed)
        pan, _ = make_clip("pan", n, W, H, noise, seed)
        ramp = np.clip((np.arange(n) - n // 3) / max(fade or n // 6, 1), 0.0, 1.0)[:, None, None, None]
        return np.clip(still * (1 - ramp) + pan * ramp + 0.5, 0, 255).astype(np.uint8), None
    if kind in ("cut", "cutback"):
        still, _ = make_clip("still", n, W, H, noise, seed)
        pan, _ = make_clip("pan", n, W, H, noise, seed)
        a, b = (still, pan) if kind == "cut" else (pan, still)
        return np.concatenate([a[:n // 2], b[n // 2:]]), None
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:H, 0:W] + 0.5
    r = 0.14 * H
    frames, swept = [], np.zeros((H, W), bool)
    if kind == "still":
        photo = Image.open(sample_path("astronaut.png")).convert("RGB").resize((W, H), Image.Resampling.LANCZOS)
    else:
        big = Image.open(sample_path("chelsea.png")).convert("RGB")
        big = big.resize((int(W * 1.4), int(W * 1.4 * big.height / big.width)), Image.Resampling.LANCZOS)
    for k in range(n):
        if kind == "still":
            bg = np.asarray(photo, np.float64)
        else:  # a pan across, a little down, at a fraction of a pixel a frame
            x0, y0 = (big.width - W) * k / max(n - 1, 1), 0.25 * (big.height - H) * k / max(n - 1, 1)
            bg = np.asarray(big.transform((W, H), Image.Transform.AFFINE, (1, 0, x0, 0, 1, y0),
                                          Image.Resampling.BICUBIC), np.float64)
        cx = r + (W - 2 * r) * k / max(n - 1, 1)
        d = np.hypot(xx - cx, yy - 0.5 * H)
        a = np.clip(r - d + 0.5, 0, 1)[..., None]
        f = bg * (1 - a) + np.array([230, 40, 30]) * a + rng.normal(0, noise, (H, W, 3))
        frames.append(np.clip(f + 0.5, 0, 255).astype(np.uint8))
        swept |= d < r + 0.1 * H
    return np.stack(frames), (~swept if kind == "still" else None)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2) / 255.0 ** 2
    return float(10 * np.log10(1 / mse))


def settles(targets) -> list[bool]:
    """Whether each frame settles a transition by its own window (render/shots.py)."""
    watch = TransitionWatch()
    for m in measured(targets):
        watch.push(m.thumb, m.content)
    return watch.finish()


def fit_clip(frames, engine, mode: str, tris: int, size: int, iters: int, first: int, policy: FramePolicy,
             settings: dict | None = None, new_shots: tuple = ()):
    """(output frames uint8, seconds for the frames after the first); ``new_shots``: frames that
    start a shot besides the cuts found (a rule's upper bound, measured by hand)."""
    H, W = frames.shape[1:3]

    def picture(scene):
        return render_large(with_edges(scene, W, H, "crisp"), W, H, engine, dtype=np.uint8)

    outs, t_first = [], None
    if mode == "warm":
        clip = ClipFit(triangles=tris, size=size, seed=0, engine=engine, first_iters=first, frame_iters=iters,
                       policy=policy, **(settings or {}))
        targets = [as_target(f, size) for f in frames]  # (the cuts as the frame loop finds them: render/shots.py)
        fades, transitions = policy.shot_rules()
        cuts = set(find_cuts([frame_change(a, b) for a, b in zip(targets, targets[1:])],
                             [frame_content(t) for t in targets] if fades else None,
                             settles(targets) if transitions else None)) | set(new_shots)
        for k, f in enumerate(frames):
            clip.start_frame(f, new_shot=k in cuts).run()
            outs.append(picture(clip.end_frame()))
            t_first = t_first or time.perf_counter()
        clip.close()
    else:
        for f in frames:
            fit = Fitter(f, triangles=tris, size=size, seed=0, engine=engine)
            FitRun(fit, StopConditions(iterations=iters)).run()
            outs.append(picture(fit.scene))
            fit.close()
            t_first = t_first or time.perf_counter()
    return np.stack(outs), time.perf_counter() - t_first


def measure(frames, mask, engine, mode, policy, a) -> dict:
    outs, seconds = fit_clip(frames, engine, mode, a.tris, a.size, a.iters, a.first, policy, a.settings,
                             tuple(a.new_shot_at))
    ps = [psnr(o, f) for o, f in zip(outs, frames)]
    d_in, d_out = np.diff(frames.astype(np.float64) / 255, axis=0), np.diff(outs.astype(np.float64) / 255, axis=0)
    row = {"mode": mode, **({"policy": policy.as_dict()} if mode == "warm" else {}),
           "psnr_later": float(np.mean(ps[1:])), "psnr_worst": float(np.min(ps[1:])), "psnr_first": ps[0],
           "temporal_error": float(np.abs(d_out - d_in).mean()),
           "frames_per_s": (len(frames) - 1) / seconds, "psnr_frames": [round(v, 3) for v in ps]}
    if len(frames) > 1:  # the frames after the largest change (a cut clip's new shot: up to 12 of them)
        d = np.abs(d_in).mean(axis=(1, 2, 3))
        k = int(np.argmax(d)) + 1
        row["largest_change"], row["psnr_after_change"] = float(d[k - 1]), float(np.mean(ps[k:k + 12]))
        row["psnr_after_change_frames"] = [round(v, 3) for v in ps[k:k + 12]]
    if mask is not None:
        moving = ~mask  # the disc's path and a margin around it
        row["psnr_moving"] = float(np.mean([psnr(o[moving], f[moving]) for o, f in zip(outs[1:], frames[1:])]))
        row["psnr_still_frames"] = [round(psnr(o[mask], f[mask]), 3) for o, f in zip(outs, frames)]  # each frame's
        row.update(flicker_out=flicker(outs, mask), flicker_in=flicker(frames, mask))
        row["flicker_ratio"] = row["flicker_out"] / row["flicker_in"]
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=176)
    p.add_argument("--tris", type=int, default=150)
    p.add_argument("--iters", type=int, default=100, help="iterations per frame after the first")
    p.add_argument("--first", type=int, default=600, help="iterations of the first frame (warm)")
    p.add_argument("--frames", type=int, default=48)
    p.add_argument("--noise", type=float, default=2.0, help="the clip's noise, sigma in 255ths")
    p.add_argument("--clips", default="still,pan")
    p.add_argument("--clip-seeds", default="0", metavar="S,S,...",
                   help="each clip made with each of these noise seeds (the spread a table quotes)")
    p.add_argument("--sweep", default=None, metavar="FIELD=V,V FIELD=V,V ...",
                   help="policy variants besides the default: every combination of these FramePolicy values")
    p.add_argument("--steady", default=None, metavar="W,W,...",
                   help="each warm variant with each of these temporal-term weights (FramePolicy.steady)")
    p.add_argument("--no-cold", action="store_true", help="leave out the cold per-frame fits")
    p.add_argument("--fade", type=int, default=None,
                   help="the fade clip's frames of fading in (default: a quarter); the dip's fades and black, "
                   "and the dissolve (default: a sixth)")
    p.add_argument("--content-min", type=float, default=None,
                   help="render/shots.py's CONTENT_MIN for this run (where content is said to appear)")
    p.add_argument("--new-shot-at", type=int, action="append", default=[], metavar="K",
                   help="frame K of the warm clips starts a shot besides the cuts found (repeatable)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="a FitSettings value for the warm clips' fits (repeatable), e.g. sigma_probes=0")
    p.add_argument("--json", default=None)
    p.add_argument("--write-frames", default=None, metavar="DIR",
                   help="only write the still clip (--frames frames, 352x264) to DIR as PNGs, for `trifit video`")
    a = p.parse_args(argv)
    a.settings = {k: json.loads(v) for k, v in (item.split("=", 1) for item in a.set)}
    if a.write_frames:
        from pathlib import Path

        frames, _ = make_clip("still", a.frames, 352, 264, a.noise)
        Path(a.write_frames).mkdir(parents=True, exist_ok=True)
        for k, f in enumerate(frames):
            Image.fromarray(f).save(Path(a.write_frames) / f"f{k:03d}.png")
        return 0
    if a.content_min is not None:
        shots.CONTENT_MIN = a.content_min
    engine = trifit.Engine("auto")
    print(f"# {engine.description}", file=sys.stderr)
    W, H = a.size, round(a.size * 3 / 4)
    policies = [FramePolicy()]
    if a.sweep:
        grid = [(name, [float(v) for v in values.split(",")])
                for name, values in (item.split("=") for item in a.sweep.split())]
        for combo in itertools.product(*(values for _, values in grid)):
            q = FramePolicy(**dict(zip((name for name, _ in grid), combo)))
            if q not in policies:
                policies.append(q)
    if a.steady:
        policies = list(dict.fromkeys(dataclasses.replace(q, steady=float(w))
                                      for q in policies for w in a.steady.split(",")))
    rows = []
    for kind, seed in itertools.product(a.clips.split(","), (int(v) for v in a.clip_seeds.split(","))):
        frames, mask = make_clip(kind, a.frames, W, H, a.noise, seed, a.fade)
        for mode, policy in [("cold", FramePolicy())] * (not a.no_cold) + [("warm", q) for q in policies]:
            row = {"clip": kind, "clip_seed": seed, **measure(frames, mask, engine, mode, policy, a)}
            if kind == "fade":  # (the frames once faded in)
                row["psnr_after_fade"] = float(np.mean(row["psnr_frames"][a.fade or a.frames // 4:]))
            if kind in ("dissolve", "dim"):
                row["psnr_after_fade"] = float(np.mean(row["psnr_frames"][a.frames // 3 + (a.fade or max(a.frames // 6, 1)):]))
            if kind == "dip":
                row["psnr_after_fade"] = float(np.mean(row["psnr_frames"][a.frames // 2 + 2 * max(a.fade or a.frames // 6, 1):]))
            rows.append(row)
            print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "adapter": engine.description, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
