"""The ``trifit`` command line.

Exit status: 0 ok, 2 bad input (one line on stderr saying what is wrong), 1 internal error.
Subcommands: fit, render, bench, gui (also the default with no subcommand).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

from . import __version__
from .errors import TrifitError

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT = 0, 1, 2


class UsageError(TrifitError):
    pass


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {v}")
    return v


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not v > 0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive finite number, got {text}")
    return v


def _size_wxh(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WxH such as 800x600, got {text!r}") from None
    if w <= 0 or h <= 0 or w > 65536 or h > 65536:
        raise argparse.ArgumentTypeError(f"size must be between 1x1 and 65536x65536, got {text}")
    return w, h


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="trifit", description="Turn a picture into semi-transparent triangles on the GPU.")
    p.add_argument("--version", action="version", version=f"trifit {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log engine decisions (adapter, backend)")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)

    f = sub.add_parser("fit", help="fit triangles to an image", description="Fit soft triangles to IMAGE.")
    f.add_argument("image", help="any image Pillow reads")
    f.add_argument("--tris", type=_positive_int, default=150, help="triangle count (default 150)")
    f.add_argument("--size", type=_positive_int, default=176, help="working size: longer side in px (default 176)")
    f.add_argument("--iters", type=_positive_int, default=None, help="stop after this many iterations")
    f.add_argument("--time-limit", type=_positive_float, default=None, metavar="SEC", help="stop after SEC seconds")
    f.add_argument("--target-psnr", type=_positive_float, default=None, metavar="DB", help="stop at this PSNR")
    f.add_argument("--plateau", type=_positive_int, default=None, metavar="N",
                   help="stop when the loss has not improved by 0.1%% in N iterations")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--loss", choices=["mse", "l1"], default="mse")
    f.add_argument("--backend", choices=["auto", "gpu", "reference"], default="auto")
    f.add_argument("--resume", metavar="SCENE.json", help="start from this scene instead of a fresh one")
    f.add_argument("-o", "--output", default=None, metavar="OUT.json", help="scene file (default IMAGE.trifit.json)")
    f.add_argument("--report", default=None, metavar="REPORT.json|.html", help="write a run report")
    f.add_argument("--quiet", action="store_true", help="no progress bar")

    r = sub.add_parser("render", help="render a scene file to an image",
                       description="Render SCENE.json; the output format follows the suffix (.png, .npy).")
    r.add_argument("scene")
    r.add_argument("--size", type=_size_wxh, default=None, metavar="WxH", help="output size (default: the scene's frame)")
    r.add_argument("--backend", choices=["auto", "gpu", "reference"], default="auto")
    r.add_argument("-o", "--output", required=True, metavar="OUT.png|OUT.npy")

    b = sub.add_parser("bench", help="measure the engine (see docs/PERFORMANCE.md)")
    b.add_argument("--quick", action="store_true", help="small CI-sized cells")
    b.add_argument("--repeats", type=_positive_int, default=None, help="timed repeats per cell")
    b.add_argument("--json", default=None, metavar="OUT.json", help="also write the results as JSON")
    b.add_argument("--backend", choices=["auto", "gpu", "reference"], default="auto")

    g = sub.add_parser("gui", help="open the desktop application (the default)")
    g.add_argument("image", nargs="?", default=None)
    g.add_argument("--start", action="store_true", help="start fitting at once")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                            format="trifit: %(message)s")
        command = args.command or "gui"
        if command == "gui" and not hasattr(args, "start"):
            args.image, args.start = None, False
        return {"fit": cmd_fit, "render": cmd_render, "bench": cmd_bench, "gui": cmd_gui}[command](args)
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
def cmd_fit(args) -> int:
    from tqdm import tqdm

    from .engine import Engine
    from .fitter import Fitter, StopConditions
    from .imageio import load_image
    from .scene import Scene

    target = load_image(args.image, args.size)  # validates before any GPU work
    init = Scene.load(args.resume) if args.resume else None
    out = Path(args.output) if args.output else Path(args.image).with_suffix(".trifit.json")
    _check_writable(out)
    if args.report:
        _check_writable(Path(args.report))
    stop = StopConditions(args.iters, args.time_limit, args.target_psnr, args.plateau)
    if not stop.any():
        stop.iterations = 600
    engine = Engine(args.backend)
    fitter = Fitter(target, triangles=args.tris, size=args.size, seed=args.seed, engine=engine,
                    init_scene=init, source=str(args.image), loss=args.loss)
    t0 = time.perf_counter()
    total = stop.iterations if stop.iterations else None
    bar = tqdm(total=total, unit="it", disable=args.quiet, desc="fit", dynamic_ncols=True,
               bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]"
               if total else "{desc}: {n_fmt} it [{elapsed}, {rate_fmt}{postfix}]")

    def progress(stats):
        bar.update(stats.iterations)
        bar.set_postfix_str(f"psnr {stats.psnr:.2f} dB, sigma {stats.sigma_px:.2f} px")

    try:
        fitter.run(stop, callback=progress)
    finally:
        bar.close()
    wall = time.perf_counter() - t0
    scene = fitter.scene
    scene.save(out)
    final = engine.render(scene)
    mse = float(np.mean((final.astype(np.float64) - fitter.target) ** 2))
    psnr = 10 * np.log10(1 / mse) if mse > 0 else float("inf")
    if not args.quiet:
        print(f"trifit: {fitter.iteration} iterations in {wall:.1f} s on {engine.description}; "
              f"PSNR {psnr:.2f} dB; scene -> {out}", file=sys.stderr)
    if args.report:
        report = fit_report(fitter, engine, wall, mse, psnr, args)
        _write_report(Path(args.report), report, fitter)
    fitter.close()
    return EXIT_OK


def fit_report(fitter, engine, wall: float, mse: float, psnr: float, args) -> dict:
    t = fitter.timings()
    counters = t["counters"]
    pool = t["pool"]
    phases = dict(t["gpu_ms"])
    phases.update({f"host:{k}": v for k, v in t["host_ms"].items()})
    return {
        "software": f"trifit {__version__}",
        "image": str(args.image),
        "settings": fitter.settings.as_dict(),
        "iterations": fitter.iteration,
        "wall_s": wall,
        "submissions": counters["submissions"],
        "readback_bytes": counters["readback_bytes"],
        "upload_bytes": counters["upload_bytes"],
        "pool": {"hits": pool["hits"], "misses": pool["misses"], "bytes": pool["bytes"]},
        "phases_ms": phases,
        "phases_note": "GPU passes: median ms of one iteration (timestamps on the first iteration of "
                       "each submission); host:* phases: median ms per submission",
        "adapter": {k: engine.adapter.get(k) for k in ("name", "backend", "type")},
        "engine_backend": engine.backend,
        "final": {"loss": mse, "psnr": psnr},
        "history": {"iterations": fitter.history.iterations, "losses": fitter.history.losses},
    }


def _write_report(path: Path, report: dict, fitter) -> None:
    from .fileutil import atomic_write_bytes

    if path.suffix.lower() in (".html", ".htm"):
        try:
            from .report import write_html_report
        except ImportError:
            raise TrifitError("HTML reports are not available in this build; use a .json report") from None
        write_html_report(path, report, fitter)
        atomic_write_bytes(path.with_suffix(".json"), json.dumps(report, indent=1).encode())
    else:
        atomic_write_bytes(path, json.dumps(report, indent=1).encode())


def _check_writable(path: Path) -> None:
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise TrifitError(f"{path}: folder {folder} does not exist")
    if path.is_dir():
        raise TrifitError(f"{path}: is a folder")


# ---------------------------------------------------------------------- render
def cmd_render(args) -> int:
    from .engine import Engine
    from .scene import Scene

    scene = Scene.load(args.scene)
    out = Path(args.output)
    _check_writable(out)
    W, H = args.size if args.size else (scene.width, scene.height)
    suffix = out.suffix.lower()
    if suffix not in (".png", ".npy", ".svg", ".jpg", ".jpeg", ".webp", ".tif", ".tiff", ".bmp"):
        raise TrifitError(f"{out}: unknown output format {suffix or '(none)'}; use .png, .npy or .svg")
    try:
        from . import export
    except ImportError:
        export = None
    if export is not None:
        export.save_render(scene, out, W, H, backend=args.backend)
        return EXIT_OK
    if suffix == ".svg":
        raise TrifitError("SVG export is not available in this build")
    from .fileutil import atomic_write

    img = Engine(args.backend).render(scene, W, H)
    if suffix == ".npy":
        atomic_write(out, lambda f: np.save(f, img.astype(np.float32)))
    else:
        from PIL import Image

        pil = Image.fromarray((np.clip(img, 0, 1) * 255 + 0.5).astype(np.uint8), "RGB")
        atomic_write(out, lambda f: pil.save(f, format=_pil_format(suffix)))
    return EXIT_OK


def _pil_format(suffix: str) -> str:
    return {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".webp": "WEBP", ".tif": "TIFF",
            ".tiff": "TIFF", ".bmp": "BMP"}[suffix]


# ---------------------------------------------------------------------- bench / gui
def cmd_bench(args) -> int:
    from .bench import run_bench

    return run_bench(args)


def cmd_gui(args) -> int:
    try:
        from app.main import run_gui
    except ImportError as exc:
        raise TrifitError(f"the desktop app is not available ({exc}); install with: pip install 'trifit[gui]'") from None
    return run_gui(args.image, start=args.start)


if __name__ == "__main__":
    sys.exit(main())
