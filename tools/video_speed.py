"""`trifit video` end to end (issue #21's speed target): frames per second of the whole command's
work -- decoding and resizing, the fit, the output picture, its encoding, the scenes and the
checkpoints -- with every call in line and with the host work beside the fit (render/videorun.py
``overlap``). "steady" counts the frames after the first (the first frame's full fit and the
engine's start aside), which is what the >= 25 frames/s target is about.

The clip is made here unless ``--input`` names one (a folder of frames needs no PyAV):
tools/video_measure.py's ``still`` clip at twice the working size.

  .venv/bin/python tools/video_speed.py --size 64 --tris 30 --iters 10 --first 50 --frames 96
  python3 tools/video_speed.py --size 176 --tris 150 --iters 100 --first 600 --frames 120 --out-kind folder
"""

from __future__ import annotations

import argparse
import inspect
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image

from trifit.engine import Engine
from trifit.video import run_video

OVERLAP = "overlap" in inspect.signature(run_video).parameters


def make_folder(folder: Path, frames: int, size: int) -> Path:
    sys.path.insert(0, str(Path(__file__).parent))
    from video_measure import make_clip

    w, h = 2 * size, 2 * size * 3 // 4
    clip, _ = make_clip("still", frames, w, h, 2.0)
    folder.mkdir(parents=True, exist_ok=True)
    for k, f in enumerate(clip):
        Image.fromarray(f).save(folder / f"f{k:04d}.png")
    return folder


def measure(source: Path, out: Path, engine, args, overlap: bool) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    out.unlink(missing_ok=True)
    stamps = []
    t0 = time.perf_counter()
    ways = {"overlap": overlap} if OVERLAP else {}  # (a checkout from before the option: its one way)
    result = run_video(source, out, triangles=args.tris, size=args.size, iters_per_frame=args.iters,
                       first_frame_iters=args.first, engine=engine, **ways,
                       scenes_dir=out.parent / f"{out.name}-scenes" if args.scenes else None,
                       on_frame=lambda k, scene, stats: stamps.append(time.perf_counter()))
    wall = time.perf_counter() - t0
    steady = (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else float("nan")
    return {"overlap": overlap, "frames": result.done, "wall_s": round(wall, 3),
            "frames_per_s": round(result.done / wall, 2), "steady_frames_per_s": round(steady, 2)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input", default=None, help="a video or a folder of frames (default: a clip made here)")
    p.add_argument("--size", type=int, default=176)
    p.add_argument("--tris", type=int, default=150)
    p.add_argument("--iters", type=int, default=100, help="iterations per frame after the first")
    p.add_argument("--first", type=int, default=600, help="iterations of the first frame")
    p.add_argument("--frames", type=int, default=120, help="frames of the clip made here")
    p.add_argument("--out-kind", choices=["folder", "mp4", "gif", "webm"], default="folder")
    p.add_argument("--scenes", action="store_true", help="also write every frame's scene (--scenes DIR)")
    p.add_argument("--repeats", type=int, default=2, help="runs of each way (the first also warms up)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="trifit-video-speed-"))
    try:
        source = Path(args.input) if args.input else make_folder(work / "clip", args.frames, args.size)
        out = work / ("out" if args.out_kind == "folder" else f"out.{args.out_kind}")
        engine = Engine("auto")
        rows = []
        for _ in range(args.repeats):
            for overlap in (False, True) if OVERLAP else (False,):
                row = measure(source, out, engine, args, overlap)
                rows.append(row)
                print(f"{'overlapped' if overlap else 'in line   '}: {row['frames']} frames in {row['wall_s']:.1f} s, "
                      f"{row['frames_per_s']:.2f} frames/s; after the first frame {row['steady_frames_per_s']:.2f} "
                      f"frames/s", flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps({"adapter": engine.adapter, "settings": vars(args), "runs": rows},
                                                  indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
