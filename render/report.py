"""Run reports: a JSON-able dict of a fit (:func:`build_report`) and one self-contained HTML page
(:func:`write_html_report`).

The HTML page embeds everything (images as base64 PNG, plots as inline SVG, the report JSON in a
script block): target, render and error map, loss and PSNR curves, the per-phase GPU timing table
and plot, pool and submission counters, settings, seed, adapter and software versions. Plots are
drawn by :mod:`trifit.svgplot` in pure Python: no Qt, no display, any thread.

Threading: :func:`build_report`, :func:`write_report` and :func:`write_html_report` may run on any
thread, the GUI's fit worker included. If plots cannot be drawn, the page is written without them
and says why.

The GUI calls ``write_report(path, fitter)``; the CLI calls ``build_report`` (through
``trifit.cli.fit_report``) and ``write_html_report``.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import io
import json
import math
import platform
import sys
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__, svgfigure, svgplot
from .fileutil import atomic_write_bytes

REPORT_FORMAT = "trifit-report"
REPORT_VERSION = 1
PHASES_NOTE = ("GPU passes: median ms of one iteration (timestamps on the first iteration of each "
               "submission); host:* phases: median ms per submission")


# ---------------------------------------------------------------------- the dict
def software_versions() -> dict[str, str]:
    """Versions of trifit, Python and the libraries a fit depends on (absent ones left out)."""
    from importlib import metadata

    out = {"trifit": __version__, "python": platform.python_version(),
           "platform": platform.platform(terse=True)}
    for dist in ("numpy", "wgpu", "pillow", "tqdm", "pyqtgraph", "PySide6"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    try:
        from wgpu.backends.wgpu_native import __version__ as native

        out["wgpu-native"] = str(native)
    except Exception:  # noqa: BLE001 - optional detail
        pass
    return out


def psnr_of(mse: float) -> float:
    return float("inf") if mse <= 0 else 10.0 * math.log10(1.0 / mse)


def build_report(fitter, engine=None, wall_s: float | None = None, *, image: str | None = None,
                 final_image: np.ndarray | None = None) -> dict[str, Any]:
    """Everything worth keeping about a fit, as plain JSON-able data.

    ``engine`` defaults to the fitter's, ``wall_s`` to the fitter's own stepping time; ``image``
    names the source (default: the fitter's source); ``final_image`` is the render of the
    fitter's scene at the working size, when the caller already has it (else it is rendered).
    The keys ``final.loss`` / ``final.psnr`` are the MSE and PSNR of the clipped render.
    """
    engine = engine or fitter.engine
    wall = float(fitter.wall_s if wall_s is None else wall_s)
    scene = fitter.scene
    if final_image is None:
        final_image = engine.render(scene, fitter.width, fitter.height)
    diff = np.asarray(final_image, dtype=np.float64) - np.asarray(fitter.target, dtype=np.float64)
    mse = float(np.mean(diff * diff))
    l1 = float(np.mean(np.abs(diff)))
    t = fitter.timings()
    counters, pool = t["counters"], t["pool"]
    phases = {k: float(v) for k, v in t["gpu_ms"].items()}
    phases.update({f"host:{k}": float(v) for k, v in t["host_ms"].items()})
    iterations = int(fitter.iteration)
    settings = fitter.settings.as_dict()
    return {
        "format": REPORT_FORMAT,
        "version": REPORT_VERSION,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "software": f"trifit {__version__}",
        "versions": software_versions(),
        "image": image if image is not None else fitter.source,
        "size": [int(fitter.width), int(fitter.height)],
        "seed": int(settings.get("seed", 0)),
        "settings": settings,
        "n_triangles": int(fitter.n_triangles),
        # iterations before this ran at half the working size (the fitter's coarse stage); their
        # losses are against the half-size target
        "coarse_until": int(getattr(fitter, "coarse_until", 0) or 0),
        "respawned": int(getattr(fitter, "respawned", 0) or 0),
        "sigma_px": float(scene.sigma * min(scene.width, scene.height)),
        "iterations": iterations,
        "wall_s": wall,
        "it_per_s": iterations / wall if wall > 0 else None,
        "submissions": int(counters["submissions"]),
        "readback_bytes": int(counters["readback_bytes"]),
        "upload_bytes": int(counters["upload_bytes"]),
        "pool": {k: int(pool.get(k, 0)) for k in ("hits", "misses", "bytes", "in_use_bytes", "peak_in_use_bytes")},
        "phases_ms": phases,
        "phases_note": PHASES_NOTE,
        "adapter": {k: engine.adapter.get(k) for k in ("name", "backend", "type", "vendor", "driver")},
        "engine_backend": engine.backend,
        "final": {"loss": mse, "psnr": psnr_of(mse), "l1": l1},
        "history": {"iterations": [int(v) for v in fitter.history.iterations],
                    "losses": [float(v) for v in fitter.history.losses]},
    }


def jsonable(value: Any) -> Any:
    """``value`` with non-finite floats replaced by None (strict JSON has no Infinity/NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return jsonable(value.item())
    return value


def report_json(report: dict) -> str:
    return json.dumps(jsonable(report), indent=1, allow_nan=False)


def write_json_report(path, report: dict) -> Path:
    path = Path(path)
    atomic_write_bytes(path, report_json(report).encode("utf-8"))
    return path


# ---------------------------------------------------------------------- images
def _png_bytes(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def _uint8(image: np.ndarray) -> np.ndarray:
    return (np.clip(image, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def error_map(render: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, float]:
    """Per-pixel RMS error over the channels, coloured with viridis.

    Returns uint8 (H, W, 3) and the error value at the top of the scale (the 99.5th percentile,
    so a few outliers do not wash out the rest).
    """
    err = np.sqrt(np.mean((np.asarray(render, np.float64) - np.asarray(target, np.float64)) ** 2, axis=2))
    top = float(np.percentile(err, 99.5)) if err.size else 0.0
    top = max(top, 1e-6)
    return svgfigure.viridis(err / top), top


# ---------------------------------------------------------------------- plots (SVG)
def make_plots(report: dict) -> dict[str, str]:
    """Inline SVG plots of a report: ``loss``, ``psnr`` (mse fits), ``gpu`` and ``host`` phase
    timings (each left out when there is nothing to draw)."""
    plots = _curve_plots(report)
    phases = report.get("phases_ms") or {}
    gpu = {k: v for k, v in phases.items() if not k.startswith("host:")}
    host = {k[5:]: v for k, v in phases.items() if k.startswith("host:")}
    for key, sel, title, colour in (("gpu", gpu, "GPU passes: median ms of one iteration", "#2ca02c"),
                                    ("host", host, "host phases: median ms per submission", "#ff7f0e")):
        items = [(k, float(v)) for k, v in sel.items() if v is not None and math.isfinite(float(v))]
        if items:
            plots[key] = svgplot.bar_plot(items, title=title, xlabel="ms", colour=colour).svg()
    return plots


def _curve_plots(report: dict, width: int = 760, height: int = 300) -> dict[str, str]:
    hist = report.get("history") or {}
    its = np.asarray(hist.get("iterations") or [], dtype=np.float64)
    losses = np.asarray(hist.get("losses") or [], dtype=np.float64)
    n = min(len(its), len(losses))
    its, losses = its[:n], losses[:n]
    ok = np.isfinite(its) & np.isfinite(losses) & (losses > 0)
    its, losses = its[ok], losses[ok]
    out: dict[str, str] = {}
    if len(losses) == 0:
        return out
    loss_name = str((report.get("settings") or {}).get("loss", "mse"))
    coarse = int(report.get("coarse_until") or 0)
    markers = ((svgplot.Marker(coarse, f"full size from iteration {coarse:,} (coarse stage before)"),)
               if 0 < coarse < its[-1] else ())
    out["loss"] = svgplot.line_plot(
        [svgplot.Series(f"{loss_name} loss", its, losses, "#1f77b4")], markers=markers, log_y=True,
        title=f"{loss_name} loss per iteration (log scale)", xlabel="iteration", ylabel=loss_name,
        width=width, height=height).svg()
    if loss_name == "mse":
        out["psnr"] = svgplot.line_plot(
            [svgplot.Series("PSNR of the iteration's loss", its, 10.0 * np.log10(1.0 / losses), "#d62728")],
            markers=markers, title="PSNR per iteration (from the iteration's loss)", xlabel="iteration",
            ylabel="PSNR (dB)", width=width, height=height).svg()
    return out


# ---------------------------------------------------------------------- HTML
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:980px;
color:#222;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.15em;margin-top:1.8em;border-bottom:1px solid #ddd}
.sub{color:#666;margin-top:0}
.imgs{display:grid;grid-template-columns:repeat(3,1fr);gap:12px}
.imgs figure{margin:0} .imgs img{width:100%;height:auto;border:1px solid #ccc}
.pix{image-rendering:pixelated}
figcaption{font-size:.85em;color:#555;margin-top:.3em}
table{border-collapse:collapse;font-size:.9em;margin:.5em 0}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f5f5f5} td.n{text-align:right;font-variant-numeric:tabular-nums}
.plot{max-width:100%;height:auto} svg.plot{display:block;margin:.6em 0}
.cols{display:grid;grid-template-columns:1fr 1fr;gap:18px}
code{background:#f3f3f3;padding:0 3px}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _img(png: bytes, alt: str, cls: str = "") -> str:
    data = base64.b64encode(png).decode("ascii")
    klass = f' class="{cls}"' if cls else ""
    return f'<img{klass} alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def _fmt(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:,.0f}"
    return str(v)


def _table(rows, header: tuple[str, str] | None = None) -> str:
    out = ["<table>"]
    if header:
        out.append(f"<tr><th>{_e(header[0])}</th><th>{_e(header[1])}</th></tr>")
    for k, v in rows:
        num = isinstance(v, (int, float)) and not isinstance(v, bool)
        out.append(f"<tr><th>{_e(k)}</th><td{' class=n' if num else ''}>{_e(_fmt(v))}</td></tr>")
    out.append("</table>")
    return "\n".join(out)


def _mib(n: Any) -> str:
    try:
        return f"{int(n) / 2**20:.2f} MiB"
    except (TypeError, ValueError):
        return "?"


def render_html(report: dict, fitter=None) -> str:
    """The report page as a string (see :func:`write_html_report`)."""
    try:
        plots, plot_error = make_plots(report), None
    except Exception as exc:  # noqa: BLE001 - the numbers still make a useful page
        plots, plot_error = {}, f"{type(exc).__name__}: {exc}"
    r = report
    final = r.get("final") or {}
    adapter = r.get("adapter") or {}
    iters = r.get("iterations") or 0
    wall = r.get("wall_s") or 0.0
    title = f"trifit report: {Path(str(r.get('image') or 'fit')).name}"
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="sub">{_e(r.get("software", ""))} &middot; {_e(r.get("created", ""))} &middot; '
        f'{_e(adapter.get("name", "?"))} ({_e(adapter.get("backend", "?"))}, {_e(adapter.get("type", "?"))})</p>',
        "<p><b>PSNR {psnr:.2f} dB</b> after {iters} iterations with {tris} triangles, in {wall:.2f} s "
        "({rate} it/s); seed {seed}; working size {size}.</p>".format(
            psnr=float(final.get("psnr") if final.get("psnr") is not None else float("nan")), iters=_e(_fmt(iters)),
            tris=_e(_fmt(r.get("n_triangles", (r.get("settings") or {}).get("triangles")))),
            wall=float(wall), rate=_e(_fmt(iters / wall if wall else float("nan"))),
            seed=_e(r.get("seed", (r.get("settings") or {}).get("seed"))),
            size=_e("x".join(str(v) for v in r.get("size") or []) or "?")),
    ]

    # images
    if fitter is not None:
        target = np.asarray(fitter.target)
        render = fitter.engine.render(fitter.scene, fitter.width, fitter.height)
        emap, top = error_map(render, target)
        parts += [
            "<h2>Target, render and error</h2>", '<div class="imgs">',
            f"<figure>{_img(_png_bytes(_uint8(target)), 'target')}<figcaption>target "
            f"({target.shape[1]}x{target.shape[0]} px)</figcaption></figure>",
            f"<figure>{_img(_png_bytes(_uint8(render)), 'render')}<figcaption>render of the scene "
            f"({fitter.n_triangles} triangles)</figcaption></figure>",
            f"<figure>{_img(_png_bytes(emap), 'error map', 'pix')}<figcaption>per-pixel RMS error, "
            f"viridis, 0 to {top:.3g} (99.5th percentile)</figcaption></figure>",
            "</div>",
        ]

    # curves
    if plot_error:
        parts.append(f'<p class="sub">Plots are missing: {_e(plot_error)}</p>')
    if "loss" in plots:
        parts.append("<h2>Convergence</h2>")
        for key in ("loss", "psnr"):
            if key in plots:
                parts.append(plots[key])
        if r.get("coarse_until"):
            parts.append(f'<p class="sub">Iterations before {_e(r["coarse_until"])} ran at half the working '
                         "size (the coarse stage); their loss is against the half-size target, hence the "
                         "step where the fit moves to full size.</p>")

    # timings
    phases = r.get("phases_ms") or {}
    parts.append("<h2>Where the time goes</h2>")
    if phases:
        parts.append(_table([(k, float(v)) for k, v in phases.items()], ("phase", "median ms")))
        parts.append(f'<p class="sub">{_e(r.get("phases_note", PHASES_NOTE))}</p>')
        parts += [plots[key] for key in ("gpu", "host") if key in plots]
    else:
        parts.append("<p>No phase timings were recorded.</p>")

    # counters
    pool = r.get("pool") or {}
    subs = r.get("submissions")
    counters = [
        ("iterations", iters), ("wall s", float(wall)),
        ("submissions", subs),
        ("iterations per submission", (iters / subs) if subs else None),
        ("upload", _mib(r.get("upload_bytes"))), ("readback", _mib(r.get("readback_bytes"))),
        ("pool hits", pool.get("hits")), ("pool misses", pool.get("misses")),
        ("pool bytes allocated", _mib(pool.get("bytes"))),
        ("pool peak in use", _mib(pool.get("peak_in_use_bytes"))),
    ]
    quality = [("PSNR dB", final.get("psnr")), ("MSE", final.get("loss")), ("L1", final.get("l1")),
               ("final sigma px", r.get("sigma_px")), ("triangles", r.get("n_triangles")),
               ("respawned triangles", r.get("respawned"))]
    parts += ['<div class="cols"><div><h2>Counters</h2>', _table(counters), "</div>",
              "<div><h2>Result</h2>", _table(quality), "</div></div>"]

    # settings, adapter, versions
    settings = dict(r.get("settings") or {})
    parts += ['<div class="cols"><div><h2>Settings</h2>',
              _table([("source image", r.get("image"))] + list(settings.items())),
              "</div><div><h2>Adapter</h2>",
              _table([(k, v) for k, v in adapter.items()] + [("engine backend", r.get("engine_backend"))]),
              "<h2>Software</h2>", _table(list((r.get("versions") or {"trifit": r.get("software")}).items())),
              "</div></div>"]

    data = report_json(r).replace("</", "<\\/")
    parts += ['<script type="application/json" id="trifit-report">', data, "</script>",
              "</body></html>"]
    return "\n".join(parts) + "\n"


def write_html_report(path, report: dict, fitter=None) -> Path:
    """Write the report as one self-contained HTML file (atomically); returns the path.

    ``fitter`` (optional) supplies the target and the current scene for the images; without it
    the page has the curves, tables and plots only.
    """
    path = Path(path)
    text = render_html(report, fitter)
    # (a file name that is not UTF-8 arrives with surrogate escapes: shown as \udcXX, not a failed write)
    atomic_write_bytes(path, text.encode("utf-8", "backslashreplace"))
    return path


def write_report(path, fitter, engine=None, wall_s: float | None = None) -> Path:
    """Build the report of ``fitter`` and write it: ``.html``/``.htm`` gives the page plus its JSON
    twin (same name, ``.json``); any other suffix gives the JSON alone. Callable from any thread
    (the GUI's fit worker included). Returns the path."""
    path = Path(path)
    report = build_report(fitter, engine, wall_s)
    if path.suffix.lower() in (".html", ".htm"):
        write_html_report(path, report, fitter)
        write_json_report(path.with_suffix(".json"), report)
    else:
        write_json_report(path, report)
    return path


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - used to regenerate docs
    """``python -m trifit.report OUT.html [IMAGE]``: fit a bundled sample and write a report."""
    import time

    from .engine import Engine
    from .fitter import Fitter
    from .run import StopConditions

    argv = list(sys.argv[1:] if argv is None else argv)
    out = Path(argv[0] if argv else "docs/example-report.html")
    if len(argv) > 1:
        image = argv[1]
    else:
        from .resources import sample_path

        image = sample_path("chelsea.png")
    engine = Engine("auto")
    fitter = Fitter(image, triangles=80, size=128, seed=0, engine=engine, source=Path(image).name)
    t0 = time.perf_counter()
    fitter.run(StopConditions(iterations=400))
    report = build_report(fitter, engine, time.perf_counter() - t0)
    write_html_report(out, report, fitter)
    write_json_report(out.with_suffix(".json"), report)
    fitter.close()
    print(f"{out}: {out.stat().st_size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
