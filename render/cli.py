"""The ``trifit`` command line.

Exit status: 0 ok, 2 bad input (one line on stderr saying what is wrong), 1 internal error.
Subcommands: fit, render, batch, video, bench, gui (also the default with no subcommand).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import threading
import time
from pathlib import Path

from . import __version__
from .errors import TrifitError
from .limits import DEFAULT_ITERATIONS, MAX_REPLICAS, MAX_TRIANGLES_FIT, MAX_WORKING_SIZE

_IMPORTED = time.perf_counter()  # (the start-up timeline that fit logs under --verbose counts from here)
log = logging.getLogger("trifit.cli")

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
#: commands whose every output is written and closed when they return: after one, :func:`entry`
#: leaves the process without Python's teardown (see there)
FAST_EXIT = ("fit", "render")
_HTML = (".html", ".htm")  # report suffixes written as HTML, with a JSON twin (_json_twin)
_finished: str | None = None  # the command main() last ran to its end
_started: str | None = None   # ... and the one it last began


class UsageError(TrifitError):
    pass


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _positive_int(text: str) -> int:
    v = _whole_number(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {v}")
    return v


def _triangles(text: str) -> int:
    v = _positive_int(text)
    if v > MAX_TRIANGLES_FIT:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_TRIANGLES_FIT} triangles, got {v}")
    return v


def _working_size(text: str) -> int:
    v = _positive_int(text)
    if v > MAX_WORKING_SIZE:
        raise argparse.ArgumentTypeError(f"expected a working size of at most {MAX_WORKING_SIZE} px, got {v}")
    return v


def _replicas(text: str) -> int:
    v = _whole_number(text)
    if not 0 <= v <= MAX_REPLICAS:
        raise argparse.ArgumentTypeError(f"expected 0 (chosen for the adapter) to {MAX_REPLICAS}, got {v}")
    return v


def _seed(text: str) -> int:
    v = _whole_number(text)
    if not 0 <= v < 2**63:
        raise argparse.ArgumentTypeError(f"expected a seed from 0 to 2**63 - 1, got {v}")
    return v


def _count_list(text: str) -> list[int]:
    """N,N,..: positive whole numbers."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers separated by commas, got {text!r}") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive counts, got {text!r}")
    if max(values) > MAX_TRIANGLES_FIT:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_TRIANGLES_FIT} triangles, got {max(values)}")
    return values


def _fps(text: str) -> float:
    v = _positive_float(text)
    if not 0.01 <= v <= 1000:
        raise argparse.ArgumentTypeError(f"expected a frame rate from 0.01 to 1000, got {text}")
    return v


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not v > 0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive finite number, got {text}")
    return v


def _nonnegative_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return 0.0 if v == 0 else v  # (-0 is 0: the same settings, for resuming)


def _size_wxh(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WxH such as 800x600, got {text!r}") from None
    if w <= 0 or h <= 0 or w > 65536 or h > 65536:
        raise argparse.ArgumentTypeError(f"size must be between 1x1 and 65536x65536, got {text}")
    return w, h


def _path(text: str) -> str:
    if not text.strip():  # Path("") is the current folder: never what an empty -o meant
        raise argparse.ArgumentTypeError("expected a file name, got an empty one")
    return text


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2: "trifit: error: fit: argument ..."
        command = self.prog.removeprefix("trifit").strip()
        raise UsageError(f"{command}: {message}" if command else message)


_ITERS_HELP = f"stop after this many iterations (default {DEFAULT_ITERATIONS} when no other stop is given)"
_SEED_HELP = ("random seed of the placement (default 0): the same image, settings, seed and adapter "
              "give the same scene")
_LOSS_HELP = "per-pixel loss: mse (default; what PSNR scores) or l1"


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="trifit", description="Turn a picture into semi-transparent triangles on the GPU.")
    p.add_argument("--version", action="version", version=f"trifit {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log engine decisions (adapter, backend)")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)

    f = sub.add_parser("fit", help="fit triangles to an image", description="Fit soft triangles to IMAGE.")
    f.add_argument("image", help="any image Pillow reads")
    f.add_argument("--tris", type=_triangles, default=150, help="triangle count (default 150)")
    f.add_argument("--size", type=_working_size, default=176, help="working size: longer side in px (default 176)")
    f.add_argument("--iters", type=_positive_int, default=None, help=_ITERS_HELP)
    f.add_argument("--time-limit", type=_positive_float, default=None, metavar="SEC", help="fit for at most SEC seconds")
    f.add_argument("--target-psnr", type=_positive_float, default=None, metavar="DB", help="stop at this PSNR")
    f.add_argument("--plateau", type=_positive_int, default=None, metavar="N",
                   help="stop when the loss has not improved by 0.1%% in N iterations")
    f.add_argument("--seed", type=_seed, default=0, help=_SEED_HELP)
    f.add_argument("--loss", choices=["mse", "l1"], default="mse", help=_LOSS_HELP)
    _backend_option(f)
    f.add_argument("--strategy", choices=["default", "fixed"], default="default",
                   help="fit policy: default (coarse stage, growth, pruning, respawn, sigma probes) "
                        "or fixed (the count from the start, plain schedules)")
    f.add_argument("--replicas", type=_replicas, default=0, metavar="R",
                   help="fit R copies of the image side by side, each growing with its own random stream; at each "
                        "pruning cycle's start all go on from the best (default 0: two on a GPU for small "
                        "fits -- at most 256 tiles of 16 x 16 px and 20000 tiles x triangles --, else one)")
    f.add_argument("--sharp", action=argparse.BooleanOptionalAction, default=None,
                   help="fit for crisp pictures: the edges end as soft as a crisp picture's at the working size "
                        "(0.25 px), not as soft as the sigma probes choose; crisp pictures score higher, the fit's "
                        "own render (the PSNR reported) can score lower (docs/QUALITY.md, \"Crisp pictures\"). "
                        "Default: on where -o names a crisp picture (a raster picture with --edges crisp, or SVG), "
                        "off for a scene (.json)")
    f.add_argument("--resume", type=_path, metavar="SCENE.json",
                   help="start from this scene instead of a fresh one (the triangles its \"locked\" key names stay as "
                        "they are)")
    f.add_argument("--weights", type=_path, metavar="MASK.png",
                   help="focus map: a grey image of the picture's aspect ratio (white = 1, black = 0) weighing each "
                        "pixel's loss, resized to the working size: the fit spends its triangles where it is bright")
    f.add_argument("--replay", type=_path, metavar="SCENE.json",
                   help="re-run the fit that wrote SCENE.json exactly: its settings, iterations, plans and "
                        "live changes (the same adapter writes the same triangles)")
    f.add_argument("-o", "--output", type=_path, default=None, metavar="OUT.json|OUT.png|OUT.svg",
                   help="what the extension names: a scene (.json, default IMAGE.trifit.json), a picture "
                        "(.png .jpg .webp .tif .bmp, at the source image's size) or a vector file (.svg); "
                        "a picture or .svg keeps the scene beside it as OUT.trifit.json")
    _picture_options(f)
    f.add_argument("--report", type=_path, default=None, metavar="REPORT.json|.html", help="write a run report")
    f.add_argument("--animation", type=_path, default=None, metavar="OUT.gif",
                   help="record the fit as an animation (.gif, .webp or .png)")
    f.add_argument("--quiet", action="store_true", help="no progress bar")

    r = sub.add_parser("render", help="render a scene file to an image",
                       description="Render SCENE.json at any size; the output format follows the suffix "
                                   "(.png .jpg .webp .tif .bmp; .npy float32; .svg vector). "
                                   "Large sizes are rendered in tiles.")
    r.add_argument("scene", help="a scene file trifit wrote (.json)")
    _picture_options(r)
    r.add_argument("--size", type=_size_wxh, default=None, metavar="WxH",
                   help="output size (default: the scene's frame); another aspect needs --stretch")
    r.add_argument("--stretch", action="store_true", help="allow a --size of another aspect than the scene's")
    _backend_option(r)
    r.add_argument("-o", "--output", type=_path, required=True, metavar="OUT.png|OUT.npy|OUT.svg",
                   help="what the extension names: a picture, float32 pixels (.npy) or a vector file")

    bt = sub.add_parser("batch", help="fit every image of a folder or glob",
                        description="Fit soft triangles to every image of DIR_OR_GLOB (resumable: images "
                                    "whose scene already exists in OUTDIR are skipped). Exit status 2 "
                                    "when any image failed.")
    bt.add_argument("inputs", nargs="+", metavar="DIR_OR_GLOB", help="folders, globs (quote them) or image files")
    bt.add_argument("-o", "--output", type=_path, required=True, metavar="OUTDIR", help="folder for the scenes (created)")
    bt.add_argument("--tris", type=_triangles, default=150, help="triangle count (default 150)")
    bt.add_argument("--size", type=_working_size, default=176, help="working size: longer side in px (default 176)")
    bt.add_argument("--iters", type=_positive_int, default=None, help=_ITERS_HELP)
    bt.add_argument("--time-limit", type=_positive_float, default=None, metavar="SEC",
                    help="stop each fit after SEC seconds")
    bt.add_argument("--target-psnr", type=_positive_float, default=None, metavar="DB", help="stop at this PSNR")
    bt.add_argument("--plateau", type=_positive_int, default=None, metavar="N",
                    help="stop when the loss has not improved by 0.1%% in N iterations")
    bt.add_argument("--seed", type=_seed, default=0, help=_SEED_HELP)
    bt.add_argument("--loss", choices=["mse", "l1"], default="mse", help=_LOSS_HELP)
    _backend_option(bt)
    bt.add_argument("--strategy", choices=["default", "fixed"], default="default", help="fit policy (see fit)")
    bt.add_argument("--replicas", type=_replicas, default=0, metavar="R", help="replicas of each image (see fit)")
    bt.add_argument("--sharp", action="store_true", help="fit for crisp pictures (see fit)")
    bt.add_argument("--png", action="store_true",
                    help="also write a picture of each scene (NAME.trifit.png) at its source image's size")
    bt.add_argument("--scale", type=_positive_float, default=None, metavar="K",
                    help="with --png: K times the source image's size")
    bt.add_argument("--reports", action="store_true",
                    help="also write a JSON report per image (NAME.trifit-report.json)")
    bt.add_argument("--force", action="store_true", help="refit images that already have a scene")
    bt.add_argument("--sequential", action="store_true",
                    help="fit the images one by one with the full fitter (growth, respawn, coarse stage) "
                         "instead of batching equal-size images on the GPU when --iters is the only stop")
    bt.add_argument("--dask", default=None, metavar="local[:N]|tcp://HOST:PORT",
                    help="fit on a Dask cluster (pip install 'trifit[cluster]'): local:N starts N worker processes "
                         "(default one per GPU), an address joins a running scheduler whose workers were started with "
                         "--nthreads 1 --resources GPU=1; each scene is what --sequential writes")
    bt.add_argument("--quiet", action="store_true", help="no progress bar")

    v = sub.add_parser("video", help="fit a clip frame by frame: triangles that persist and move",
                       description="Fit soft triangles to every frame of INPUT, each frame starting from the "
                                   "previous frame's triangles and optimiser state (the first gets a full fit), "
                                   "and write the clip of triangles. Resumable: re-running with the same "
                                   "arguments continues after the last finished frame.")
    v.add_argument("input", help="a video file (MP4, MOV, MKV, WebM, GIF, ...) or a folder of frames")
    v.add_argument("-o", "--output", type=_path, required=True, metavar="OUT.mp4|OUT.webm|OUT.gif|FOLDER",
                   help="a video (.mp4 .m4v .mov .mkv: H.264; .webm: VP9; .gif) at the input's frame rate, or a "
                        "folder of frame_0000.png, ...")
    v.add_argument("--tris", type=_triangles, default=150, help="triangle count (default 150)")
    v.add_argument("--size", type=_working_size, default=176, help="working size: longer side in px (default 176)")
    v.add_argument("--iters-per-frame", type=_positive_int, default=100, metavar="K",
                   help="iterations for each frame after the first (default 100)")
    v.add_argument("--first-frame-iters", type=_positive_int, default=600, metavar="M",
                   help="iterations of the first frame's full fit (default 600)")
    v.add_argument("--seed", type=_seed, default=0, help=_SEED_HELP)
    v.add_argument("--steady", type=_nonnegative_float, default=0.0, metavar="W",
                   help="the temporal term: pull each triangle towards where the previous frame left it, W times "
                        "how still the picture is around it, so still regions stop flickering and moving content "
                        "stays free (default 0: off; README, 'Video', for a value)")
    v.add_argument("--fps", type=_fps, default=None,
                   help="frame rate of a folder of frames (default 25); overrides a video's own")
    v.add_argument("--scenes", default=None, metavar="DIR", help="also write each frame's scene (frame_0000.trifit.json)")
    v.add_argument("--svg-dir", default=None, metavar="DIR", help="also write each frame as SVG (frame_0000.svg)")
    _picture_options(v)
    v.add_argument("--segment", type=_positive_int, default=None, metavar="K",
                   help="fit independent segments of at most K frames, also split at new shots (scene cuts, fades "
                        "in, dissolves' ends), each cold at its first frame and warm after it, and join them in "
                        "order (README, 'Video')")
    v.add_argument("--dask", default=None, metavar="local[:N]|tcp://HOST:PORT",
                   help="with --segment: fit the segments in parallel on a Dask cluster (pip install "
                        "'trifit[cluster]'), as batch --dask; the output is what --segment K writes here")
    _backend_option(v)
    v.add_argument("--quiet", action="store_true", help="no progress bar")

    b = sub.add_parser("bench", help="measure the engine (see docs/PERFORMANCE.md)")
    b.add_argument("--quick", action="store_true", help="small CI-sized cells")
    b.add_argument("--repeats", type=_positive_int, default=None, help="timed repeats per cell")
    b.add_argument("--json", type=_path, default=None, metavar="OUT.json", help="also write the results as JSON")
    _backend_option(b)
    b.add_argument("--quality", action="store_true",
                   help="fit quality over the bundled samples (PSNR/SSIM by the reference engine)")
    b.add_argument("--tris", type=_count_list, default=None, metavar="N,N,..",
                   help="--quality: triangle counts (default 50,150,500)")
    b.add_argument("--seeds", type=_positive_int, default=None, help="--quality: seeds per cell (default 3)")
    b.add_argument("--size", type=_working_size, default=None, help="--quality: working size (default 176)")
    b.add_argument("--iters", type=_positive_int, default=None, help="--quality: iterations per fit")
    b.add_argument("--time-limit", type=_positive_float, default=None, metavar="SEC",
                   help="--quality: seconds per fit (default 12 when --iters is not given)")
    b.add_argument("--images", nargs="*", default=None, help="--quality: images instead of the samples")
    b.add_argument("--out", type=_path, default=None, metavar="DIR", help="--quality: keep the fitted scenes here")
    b.add_argument("--replicas", type=_replicas, default=None, metavar="R",
                   help="--quality: replicas of each image (see fit; default 0: chosen for the adapter)")

    g = sub.add_parser("gui", help="open the desktop application (the default)")
    g.add_argument("image", nargs="?", default=None,
                   help="image, video or folder of frames to fit (default: the astronaut sample)")
    g.add_argument("--start", action="store_true", help="start fitting at once")
    _backend_option(g)
    return p


def _backend_option(p) -> None:
    p.add_argument("--backend", choices=["auto", "gpu", "reference"], default="auto",
                   help="auto (default): the GPU adapter wgpu finds (lavapipe counts), else the float64 "
                        "reference; gpu: that adapter or an error; reference: the float64 CPU engine (slow)")


def _picture_options(p) -> None:
    """--scale / --width / --edges: the size and edges of a picture written from a scene."""
    p.add_argument("--scale", type=_positive_float, default=None, metavar="K",
                   help="picture size: K times the frame (render) or the source image (fit)")
    p.add_argument("--width", type=_positive_int, default=None, metavar="W", help="picture width, aspect kept")
    p.add_argument("--edges", choices=["crisp", "fit"], default="crisp",
                   help="crisp (default): edges antialiased over about one output pixel, at any size; "
                        "fit: the softness the fit optimised, scaled with the picture")


class LogLines(logging.Formatter):
    """What the libraries log, as the command's lines: "trifit: message", and an exception logged
    with it as one line of its type and message -- its traceback only under --verbose (a
    library's callback that fails while Ctrl+C stops a cluster logs one; the user sees no
    traceback)."""

    def __init__(self, verbose: bool = False):
        super().__init__("trifit: %(message)s")
        self.verbose = verbose

    def format(self, record: logging.LogRecord) -> str:
        if self.verbose or not record.exc_info:
            return super().format(record)
        exc = record.exc_info[1]
        line = f"trifit: {record.getMessage()}"
        return f"{line} ({type(exc).__name__}: {exc})" if exc is not None else line


def main(argv: list[str] | None = None) -> int:
    global _finished, _started
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:  # a bare `trifit` (its global options only) is `trifit gui`, every default included
            args = parser.parse_args([*argv, "gui"])
        handler = logging.StreamHandler()
        handler.setFormatter(LogLines(args.verbose))
        logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, handlers=[handler])
        command = _started = args.command
        code = {"fit": cmd_fit, "render": cmd_render, "batch": cmd_batch, "video": cmd_video, "bench": cmd_bench,
                "gui": cmd_gui}[command](args)
        _finished = command
        return code
    except TrifitError as exc:
        print(f"trifit: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("trifit: interrupted", file=sys.stderr)
        return 130
    except SystemExit as exc:  # argparse -h / --version
        return int(exc.code or 0)
    except Exception as exc:  # an internal error: one line, and the details under -v
        if "-v" in argv or "--verbose" in argv:
            raise
        print(f"trifit: internal error: {type(exc).__name__}: {exc} (run with -v for details)", file=sys.stderr)
        return EXIT_INTERNAL


# ---------------------------------------------------------------------- fit
def _warm_up_gpu(args) -> None:
    """Bring the GPU up in the background while the command imports the engine and reads its input
    (the driver's start is a good part of a short fit's start-up: docs/PERFORMANCE.md)."""
    if getattr(args, "backend", "auto") != "reference":
        from .gpu.device import warm_up

        warm_up()


def cmd_fit(args) -> int:
    marks = [("command", time.perf_counter())]  # the start-up timeline (logged under --verbose)
    _warm_up_gpu(args)
    marks.append(("wgpu-py imported", time.perf_counter()))
    from .engine import Engine
    from .fitter import Fitter
    from .imageio import load_image
    from .run import FitRun, StopConditions, replay_run
    from .scene import Scene

    marks.append(("engine imported", time.perf_counter()))

    settings = {"triangles": args.tris, "size": args.size, "seed": args.seed, "loss": args.loss,
                "strategy": args.strategy, "replicas": args.replicas}
    from . import export

    out = Path(args.output) if args.output else Path(args.image).with_suffix(".trifit.json")
    picture = out.suffix.lower() != ".json"
    # (fitted for what is written: a crisp picture's edges, unless --sharp says otherwise)
    settings.update(export.sharp_settings(export.crisp_picture(out.suffix, args.edges) if args.sharp is None
                                          else args.sharp))
    if picture and out.suffix.lower() not in export.SUFFIXES:
        raise TrifitError(f"{out}: unknown output format {out.suffix or '(none)'}; use .json or one of "
                          f"{', '.join(export.SUFFIXES)}")
    scene_path = out.with_suffix(".trifit.json") if picture else out
    if not picture and (args.scale is not None or args.width is not None):
        raise UsageError("fit: --scale and --width size a picture output; -o names a scene (.json)")
    if args.report and Path(args.report).suffix.lower() not in (".json", *_HTML):
        raise TrifitError(f"{args.report}: unknown report format {Path(args.report).suffix or '(none)'}; "
                          "use .json or .html")
    roles = {"the scene": scene_path, "the picture": out if picture else None,
             "the report": Path(args.report) if args.report else None,
             "the animation": Path(args.animation) if args.animation else None}
    if args.report:
        roles["the report's JSON"] = _json_twin(Path(args.report))
    roles = {role: path for role, path in roles.items() if path is not None}
    _check_distinct(roles, [Path(p) for p in (args.image, args.resume, args.replay, args.weights) if p])
    for path in roles.values():
        _check_writable(path)  # every output, before any work: a fit is never lost to a bad path
    replay = _replay_settings(args) if args.replay else None
    if replay is not None:
        settings = replay["settings"]
    target = load_image(args.image, settings["size"])  # validates before any GPU work
    if picture:  # the picture's size too, before the fit
        from .imageio import source_size

        picture_wh = export.picture_size(source_size(args.image), scale=args.scale, width=args.width,
                                         suffix=out.suffix)
    weights = _fit_weights(args, target, replay)
    init = Scene.load(args.resume) if args.resume else None
    stop = StopConditions(args.iters, args.time_limit, args.target_psnr, args.plateau)
    if not stop.any():
        stop.iterations = DEFAULT_ITERATIONS
    if replay is not None:
        stop = StopConditions(iterations=replay["iterations"])
    recorder = None
    if args.animation:
        from .export import AnimationRecorder

        # frames spaced over the planned iterations; with none planned (a time limit) the gaps grow as it goes
        recorder = AnimationRecorder(args.animation, total=stop.iterations)
    marks.append(("input read", time.perf_counter()))
    # (deferred: the fitter prepares its targets and first triangles while the GPU comes up, and
    # waits for it only where it makes its first loop)
    engine = Engine(args.backend, deferred=True)
    fitter = Fitter(target, engine=engine, init_scene=init, source=str(args.image), weights=weights, **settings)
    t0 = time.perf_counter()
    ctx = getattr(engine.impl, "ctx", None)  # (the GPU backend's context; none for the reference)
    marks += [("GPU ready", ctx.ready_at)] if ctx is not None else []
    marks.append(("fitter made", t0))
    marks.sort(key=lambda mark: mark[1])
    log.info("start-up, seconds since trifit.cli was imported: %s",
             ", ".join(f"{name} {t - _IMPORTED:.3f}" for name, t in marks))
    total = stop.iterations if stop.iterations else None
    timed = total is None and stop.time_limit is not None  # the bar counts seconds: it shows the time left
    if args.quiet:
        bar = _NoBar()  # (and tqdm not imported: a quiet fit's start-up is shorter by its import)
    elif timed:
        from tqdm import tqdm

        bar = tqdm(total=stop.time_limit, desc="fit", dynamic_ncols=True,
                   bar_format="{l_bar}{bar}| {elapsed} of " + f"{stop.time_limit:g} s" + " [{remaining} left{postfix}]")
    else:
        from tqdm import tqdm

        bar = tqdm(total=total, unit="it", desc="fit", dynamic_ncols=True,
                   bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]"
                   if total else "{desc}: {n_fmt} it [{elapsed}, {rate_fmt}{postfix}]")

    def progress(stats):
        if timed:
            bar.update(min(time.perf_counter() - t0, stop.time_limit) - bar.n)
            bar.set_postfix_str(f"{stats.iteration} it, psnr {stats.psnr:.2f} dB")
        else:
            bar.update(stats.iterations)
            bar.set_postfix_str(f"psnr {stats.psnr:.2f} dB, sigma {stats.sigma_px:.2f} px")
        if recorder is not None:
            recorder.capture(fitter)
            run.chunk = min(recorder.until_due(fitter.iteration), fitter.settings.chunk)

    if recorder is not None:
        recorder.capture(fitter)  # the starting state
    # chunks end where the next frame is due, so frames land on their iterations (a fit's result
    # does not depend on its chunks)
    chunk = min(recorder.until_due(fitter.iteration), fitter.settings.chunk) if recorder else None
    run = replay_run(fitter, replay) if replay is not None else FitRun(fitter, stop, chunk=chunk)
    run.chunk = chunk
    interrupted = _stop_on_ctrl_c(run)
    try:
        run.run(progress)
    finally:
        interrupted.restore()
        bar.close()
    if recorder is not None:
        recorder.capture(fitter, force=True)
        recorder.save()
    wall = time.perf_counter() - t0
    scene = fitter.scene
    if interrupted:
        scene.meta["interrupted"] = True  # (a batch into this folder fits it again)
    scene.save(scene_path)  # the fit itself first, whatever else is asked for
    written = [scene_path]
    if picture:
        export.save_render(scene, out, *picture_wh, engine=engine, edges=args.edges)
        written.insert(0, out)
    told = not args.quiet or interrupted  # (the summary line; quiet and no report: no render of the result)
    if told or args.report:
        final = engine.render(scene)
        mse = float(((final.astype("float64") - fitter.target) ** 2).mean())
        psnr = 10 * math.log10(1 / mse) if mse > 0 else float("inf")
    if args.report:
        report = fit_report(fitter, engine, wall, mse, psnr, args)
        _write_report(Path(args.report), report, fitter)
        written += [p for p in (Path(args.report), _json_twin(Path(args.report))) if p is not None]
    if recorder is not None:
        written.append(Path(args.animation))
    if told:
        print(f"trifit: {'interrupted after ' if interrupted else ''}{fitter.iteration} iterations in "
              f"{wall:.1f} s on {engine.description}; PSNR {psnr:.2f} dB{_focus_note(fitter, final)}; wrote "
              f"{', '.join(str(p) for p in written)}", file=sys.stderr)
    fitter.close()
    return EXIT_INTERRUPTED if interrupted else EXIT_OK


class _NoBar:
    """The progress bar of a --quiet fit: counts, shows nothing."""

    n = 0

    def update(self, n=1) -> None:
        self.n += n

    def set_postfix_str(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


def _focus_note(fitter, final) -> str:
    """With a focus map: the PSNR of the weighted mean squared error, what the fit minimised."""
    if fitter.focus is None:
        return ""
    from .reference import loss_value

    mse = loss_value(final.astype("float64"), fitter.target, "mse", fitter.focus[0])
    return f" ({10 * math.log10(1 / mse):.2f} dB weighted by the focus map)" if mse > 0 else ""


class _stop_on_ctrl_c:
    """While a fit runs, Ctrl+C ends it at the next chunk (the scene so far is then written and
    the command exits 130); a second Ctrl+C stops at once. True once Ctrl+C was pressed. A command
    of several runs (batch) tells it each as it starts: ``watch(run)``."""

    def __init__(self, run=None):
        import signal
        import threading

        self.pressed = False
        self._previous = None
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        self._run = run

    def _handle(self, signum, frame):
        if self.pressed:
            raise KeyboardInterrupt
        self.pressed = True
        if self._run is not None:
            self._run.cancel()

    def watch(self, run) -> None:
        """``run`` is the one to end now (at once, at its first chunk, where Ctrl+C came before it)."""
        self._run = run
        if self.pressed:
            run.cancel()

    def restore(self) -> None:
        import signal

        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def __bool__(self) -> bool:
        return self.pressed


def _replay_settings(args) -> dict:
    """What --replay re-runs: the scene's recorded settings, iterations and changes."""
    from .fitloop import FitSettings, check_settings, recorded_settings
    from .run import check_script
    from .scene import Scene

    if args.resume or any(v is not None for v in (args.iters, args.time_limit, args.target_psnr, args.plateau)):
        raise UsageError("fit: --replay takes its settings and iterations from the scene; "
                         "drop --resume, --iters, --time-limit, --target-psnr and --plateau")
    d = FitSettings()  # (the options' defaults, and the settings this version knows)
    defaults = {"tris": d.triangles, "size": d.size, "seed": d.seed, "loss": d.loss, "strategy": d.strategy,
                "replicas": d.replicas}
    given = [f"--{k}" for k, v in defaults.items() if getattr(args, k) != v]
    if given:
        raise UsageError(f"fit: --replay takes its settings from the scene; drop {', '.join(given)}")
    meta = Scene.load(args.replay).extra.get("meta")
    known = set(d.as_dict())
    if not isinstance(meta, dict) or not isinstance(meta.get("settings"), dict) \
            or not isinstance(meta.get("iterations"), int) or not isinstance(meta.get("changes", []), list):
        raise TrifitError(f"{args.replay}: no record of the fit to replay (meta.settings, meta.iterations, "
                          f"meta.changes); it was not written by this version of trifit's fit")
    unknown = sorted(set(meta["settings"]) - known)
    if unknown:
        raise TrifitError(f"{args.replay}: meta.settings has settings this version does not know: {', '.join(unknown)}")
    settings = recorded_settings(dict(meta["settings"]))
    try:
        check_settings(settings)
    except ValueError as exc:
        raise TrifitError(f"{args.replay}: meta.settings: {exc}") from None
    if meta["iterations"] < 0:
        raise TrifitError(f"{args.replay}: meta.iterations is {meta['iterations']}, not a count of iterations")
    changes = meta.get("changes", [])  # (a list: checked with the record above)
    try:
        check_script(changes)
    except TrifitError as exc:
        raise TrifitError(f"{args.replay}: meta.changes: {exc}") from None
    return {"settings": settings, "iterations": meta["iterations"], "changes": changes,
            "weights": meta.get("weights")}


def _fit_weights(args, target, replay) -> str | None:
    """--weights, checked against the target before any GPU work (a bad mask is exit 2, one
    line); a replay needs the focus map its fit had (the scene's meta names it by digest)."""
    from .focus import digest, focus_map

    had = (replay or {}).get("weights")
    if args.weights is None:
        if had:
            raise UsageError(f"fit: the fit to replay was weighted by a focus map ({had.get('source')}): "
                             "give it with --weights")
        return None
    weights = focus_map(args.weights, target.shape[:2])
    if replay is not None and (not isinstance(had, dict) or had.get("sha256") != digest(weights)):
        raise UsageError(f"fit: {args.weights} is not the focus map of the fit to replay")
    return args.weights


def fit_report(fitter, engine, wall: float, mse: float, psnr: float, args) -> dict:
    """The run report (one implementation: trifit.report.build_report)."""
    from .report import build_report

    report = build_report(fitter, engine, wall, image=str(args.image))
    report["final"].update({"loss": mse, "psnr": psnr})
    return report


def _json_twin(report: Path) -> Path | None:
    """The JSON file an HTML report is written with (None for a JSON report)."""
    return report.with_suffix(".json") if report.suffix.lower() in _HTML else None


def _write_report(path: Path, report: dict, fitter) -> None:
    from .fileutil import atomic_write_bytes

    twin = _json_twin(path)
    if twin is not None:
        try:
            from .report import write_html_report
        except ImportError:
            raise TrifitError("HTML reports are not available in this build; use a .json report") from None
        write_html_report(path, report, fitter)
        atomic_write_bytes(twin, _report_json(report))
    else:
        atomic_write_bytes(path, _report_json(report))


def _report_json(report: dict) -> bytes:
    try:
        from .report import report_json
    except ImportError:
        return json.dumps(report, indent=1).encode()
    return report_json(report).encode()


def _check_distinct(outputs: dict[str, Path], inputs: list[Path], command: str = "fit") -> None:
    from .fileutil import check_distinct

    check_distinct(outputs, inputs, command)


def _check_writable(path: Path) -> None:
    from .fileutil import check_writable

    check_writable(path)


# ---------------------------------------------------------------------- render
def cmd_render(args) -> int:
    _warm_up_gpu(args)
    from . import export
    from .engine import Engine
    from .scene import Scene

    out = Path(args.output)
    suffix = out.suffix.lower()
    if suffix not in export.SUFFIXES:  # before any file or GPU work
        raise TrifitError(f"{out}: unknown output format {suffix or '(none)'}; use one of {', '.join(export.SUFFIXES)}")
    _check_distinct({"the picture": out}, [Path(args.scene)], "render")
    _check_writable(out)
    scene = Scene.load(args.scene)
    W, H = export.picture_size((scene.width, scene.height), size=args.size, scale=args.scale, width=args.width,
                               stretch=args.stretch, suffix=suffix)
    # SVG needs no engine; raster formats are rendered (tiled when large) on the chosen backend
    engine = None if suffix == ".svg" else Engine(args.backend)
    export.save_render(scene, out, W, H, backend=args.backend, engine=engine, edges=args.edges)
    return EXIT_OK


# ---------------------------------------------------------------------- batch
def cmd_batch(args) -> int:
    if args.dask is None:  # (with --dask the workers fit; this process needs no GPU)
        _warm_up_gpu(args)
    from .batch import run_batch
    from .run import StopConditions

    if args.dask is not None:  # a bad value, or no distributed installed: exit 2 before any file is touched
        from .cluster import check_target

        check_target(args.dask)
    if args.scale is not None and not args.png:
        raise UsageError("batch: --scale sizes the pictures of --png; give --png too")
    out = Path(args.output)
    from .fileutil import make_folder

    make_folder(out)  # the output folder takes files, before any image is fitted
    _check_writable(out / "batch-summary.json")
    stop = StopConditions(args.iters, args.time_limit, args.target_psnr, args.plateau)
    if not stop.any():
        stop.iterations = DEFAULT_ITERATIONS
    common = dict(triangles=args.tris, size=args.size, stop=stop, seed=args.seed, loss=args.loss,
                  strategy=args.strategy, replicas=args.replicas, sharp=args.sharp, backend=args.backend,
                  render=(args.scale or True) if args.png else False, reports=args.reports, force=args.force,
                  progress=not args.quiet)
    if args.dask is not None:
        from .cluster import run_cluster_batch

        result = run_cluster_batch(args.inputs, out, dask=args.dask, **common)
    else:
        ctrl_c = _stop_on_ctrl_c()
        try:  # batching needs an iteration count the user chose (see render/batch.py)
            result = run_batch(args.inputs, out, sequential=args.sequential or args.iters is None, ctrl_c=ctrl_c,
                               **common)
        finally:
            ctrl_c.restore()
    if not args.quiet or result.failed or result.interrupted:
        kept = sum(r.kept_earlier for r in result.stopped)
        stopped = (f", {len(result.stopped)} stopped early (their scenes hold what they ran"
                   f"{f', or the earlier scene where it was further: {kept}' if kept else ''}; "
                   "a re-run fits them again)") if result.stopped else ""
        print(f"trifit: batch: {'interrupted: ' if result.interrupted else ''}{result.done} fitted{stopped}, "
              f"{result.skipped} skipped (already done), {len(result.failed)} failed; scenes -> {out}", file=sys.stderr)
    for r in result.failed:
        print(f"trifit: failed: {r.message()}", file=sys.stderr)
    return result.exit_status


# ---------------------------------------------------------------------- video
def cmd_video(args) -> int:
    if args.dask is None:  # while the clip is opened and checked (with --dask: no GPU here)
        _warm_up_gpu(args)
    from tqdm import tqdm

    from .video import open_clip, output_kind, run_video
    from .videofit import FramePolicy

    if args.scale is not None and args.width is not None:
        raise UsageError("video: give one of --scale and --width")
    if args.dask is not None:  # before anything is read: a segment length is the user's (it changes the result)
        if args.segment is None:
            raise UsageError("video: --dask needs --segment K (a task fits one segment of at most K frames)")
        from .cluster import check_target

        check_target(args.dask)
    spec = output_kind(args.output)        # an encoder for the output, before anything is read
    clip = open_clip(args.input, args.fps)  # every frame checked, before any fit
    bar = tqdm(total=clip.count, unit="frame", disable=args.quiet, desc="video", dynamic_ncols=True,
               bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]")
    interrupted = None

    def started(fit):
        nonlocal interrupted
        interrupted = _stop_on_ctrl_c(fit)
        bar.reset(total=clip.count)
        bar.update(fit.frames)

    def frame_done(k, scene, stats):
        bar.update(1)
        bar.set_postfix_str(f"psnr {stats.psnr:.2f} dB")

    def note(text):
        bar.write(f"trifit: note: {text}", file=sys.stderr)

    try:
        result = run_video(args.input, args.output, triangles=args.tris, size=args.size,
                           iters_per_frame=args.iters_per_frame, first_frame_iters=args.first_frame_iters,
                           seed=args.seed, scale=args.scale, width=args.width, edges=args.edges,
                           scenes_dir=args.scenes, svg_dir=args.svg_dir, backend=args.backend, clip=clip, spec=spec,
                           policy=FramePolicy(steady=args.steady), segment=args.segment, dask=args.dask,
                           on_frame=frame_done, on_clip=started, note=note)
    finally:
        if interrupted is not None:
            interrupted.restore()
        bar.close()
    fitted = result.done - result.resumed_from
    rate = fitted / result.seconds if result.seconds > 0 else 0.0
    psnr = f"; mean PSNR {sum(result.psnr) / len(result.psnr):.2f} dB" if result.psnr else ""
    wrote = f"wrote {result.output}" if result.output else "no frame finished, nothing written"
    shown = ", ".join(str(k) for k in result.shots[:8]) + (", ..." if len(result.shots) > 8 else "")
    shots = f"; {len(result.shots)} new shot{'s' * (len(result.shots) != 1)} (at frame {shown})" if result.shots else ""
    if not args.quiet or result.interrupted:
        print(f"trifit: {'interrupted: ' if result.interrupted else ''}{result.done} of {clip.count} frames"
              f"{f' ({result.resumed_from} from an earlier run)' if result.resumed_from else ''}, "
              f"{fitted} fitted in {result.seconds:.1f} s ({rate:.2f} frames/s){psnr}{shots}; {wrote}", file=sys.stderr)
    return EXIT_INTERRUPTED if result.interrupted else EXIT_OK


# ---------------------------------------------------------------------- bench / gui
def cmd_bench(args) -> int:
    quality_only = {"--tris": args.tris, "--images": args.images, "--out": args.out, "--iters": args.iters,
                    "--time-limit": args.time_limit, "--seeds": args.seeds, "--size": args.size,
                    "--replicas": args.replicas}
    given = [name for name, value in quality_only.items() if value is not None]
    if given and not args.quality:
        raise UsageError(f"bench: {', '.join(given)} {'is' if len(given) == 1 else 'are'} for --quality")
    outputs = {"the JSON": args.json, "the scenes' folder": args.out}  # (--out: with --quality only, above)
    _check_distinct({role: Path(path) for role, path in outputs.items() if path is not None},
                    [Path(p) for p in args.images or ()], "bench")
    if args.json:  # every output, before any work: a long measurement is never lost to a bad path
        _check_writable(Path(args.json))
    if args.quality:
        from .fileutil import make_folder
        from .imageio import load_image
        from .quality import run_quality

        args.seeds = args.seeds or 3
        args.size = args.size or 176
        for image in args.images or ():  # every image, before the first fit (one bad one would end the run)
            load_image(image, args.size)
        if args.out:
            make_folder(Path(args.out))
        return run_quality(args)
    from .bench import run_bench

    return run_bench(args)


def cmd_gui(args) -> int:
    env = os.environ
    if sys.platform.startswith("linux") and not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")
                                                 or env.get("QT_QPA_PLATFORM")):
        raise TrifitError("no display to open the desktop app on (neither DISPLAY nor WAYLAND_DISPLAY is set); "
                          "the other commands (trifit fit ...) need none")
    if args.image is not None:  # a bad picture is one line here, before Qt starts
        from .video import is_clip

        if not is_clip(args.image):
            from .imageio import load_image

            load_image(args.image, 64)
        elif not os.path.exists(args.image):  # a clip is decoded by the window, which shows its errors
            raise TrifitError(f"{args.image}: no such file or folder")
    _warm_up_gpu(args)  # while Qt and the window's modules load
    try:
        from .app.main import run_gui
    except ImportError as exc:
        raise TrifitError(f"the desktop app is not available ({exc}); install with: pip install 'trifit[gui]'") from None
    return run_gui(args.image, start=args.start, backend=args.backend)


def one_blas_thread() -> None:
    """Before numpy loads: one OpenBLAS thread unless the user set a count. Its loader starts a
    thread for each core, and they spin for a while, so on a many-core host a short fit's process
    burned more CPU in them than in the fit (docs/PERFORMANCE.md, "Start-up of a 1 s fit"), while
    trifit's own arithmetic on the host is on arrays too small for BLAS threads. Child processes
    (a local Dask cluster's workers) inherit the setting."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def entry() -> None:
    """The ``trifit`` console script (and ``python -m trifit.cli``): :func:`main`, then exit.

    After a command of FAST_EXIT the process leaves at once (``os._exit``) rather than through
    Python's teardown, where the driver releases each GPU object in turn and the modules are
    finalised -- a noticeable part of a short fit's process (docs/PERFORMANCE.md, "Start-up of a
    1 s fit"). Its files are written and closed by then (atomic writes), and the standard streams and log
    handlers are flushed first; a thread still running that Python would wait for keeps the
    ordinary exit. A fit or render refused on bad input has written nothing: it leaves the same way,
    once the GPU's warm-up thread is done, rather than tear the driver down under Python's own
    teardown."""
    global _finished, _started
    _finished = _started = None
    one_blas_thread()
    code = main()
    fast = _finished in FAST_EXIT or (code == EXIT_BAD_INPUT and _started in FAST_EXIT)
    device = sys.modules.get(f"{__package__}.gpu.device")
    if fast and device is not None:
        device.wait_warm_up()
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if fast and not others:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe: nothing more can reach it anyway
                pass
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
