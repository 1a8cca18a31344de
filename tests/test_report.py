"""Run reports: the dict, the self-contained HTML page (from the main thread and from a worker
thread), its SVG plots (well-formed, tick labels apart, drawn without Qt), the CLI's --report
(also where Qt cannot start), and the example in docs/."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from trifit import svgfigure, svgplot
from trifit.cli import main
from trifit.report import build_report, error_map, jsonable, report_json, write_html_report, write_report

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SVG_NS = "{http://www.w3.org/2000/svg}"
QT_MODULES = ("PySide6", "pyqtgraph", "shiboken6", "PyQt5", "PyQt6")


@pytest.fixture(scope="module")
def fitter(gpu_engine):
    from trifit import Fitter, StopConditions

    rng = np.random.default_rng(4)
    img = (rng.uniform(0, 1, (24, 32, 3)) * 255).astype(np.uint8)
    f = Fitter(img, triangles=6, size=32, seed=5, engine=gpu_engine, source="noise.png")
    f.run(StopConditions(iterations=30))
    yield f
    f.close()


def _embedded(html_text: str) -> dict:
    m = re.search(r'<script type="application/json" id="trifit-report">\n(.*?)\n</script>', html_text, re.S)
    assert m, "no embedded report JSON"
    return json.loads(m.group(1).replace("<\\/", "</"))


def _check_self_contained(text: str) -> None:
    # no external resource of any kind: every src is a data URI, no links, no remote scripts
    for attr in re.findall(r'\b(?:src|href)="([^"]*)"', text):
        assert attr.startswith("data:image/png;base64,"), attr[:60]
    assert "<link" not in text and "http://" not in text.replace("http://www.w3.org", "")


def _svgs(html_text: str) -> list[str]:
    return re.findall(r"<svg\b.*?</svg>", html_text, re.S)


def _label_boxes(root: ET.Element) -> list[tuple[str, str, tuple[float, float, float, float]]]:
    """(class, text, box) of every <text> in a parsed SVG, boxes from svgplot's font estimate."""
    out = []
    for el in root.iter(f"{SVG_NS}text"):
        rot = re.match(r"rotate\((-?[\d.]+)", el.get("transform", ""))
        box = svgfigure.text_box(el.text or "", float(el.get("x")), float(el.get("y")), float(el.get("font-size")),
                               el.get("text-anchor", "start"), float(rot.group(1)) if rot else 0.0)
        out.append((el.get("class", ""), el.text or "", box))
    return out


def _overlaps(boxes) -> list[tuple[str, str]]:
    return [(a[1], b[1]) for a, b in itertools.combinations(boxes, 2) if svgfigure.boxes_overlap(a[2], b[2])]


def _check_svg(svg: str) -> ET.Element:
    """Parse an SVG plot (it must be well-formed XML) and check that no two labels overlap and
    that every label lies on the canvas."""
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG_NS}svg"
    w, h = float(root.get("width")), float(root.get("height"))
    assert root.get("viewBox") == f"0 0 {root.get('width')} {root.get('height')}"
    boxes = _label_boxes(root)
    assert boxes and not _overlaps(boxes), _overlaps(boxes)
    for _, text, (x0, y0, x1, y1) in boxes:
        assert 0 <= x0 and x1 <= w and 0 <= y0 and y1 <= h, (text, (x0, y0, x1, y1), (w, h))
    return root


@pytest.mark.gpu
def test_build_report_has_everything(fitter, gpu_engine):
    r = build_report(fitter, gpu_engine, 1.5)
    for key in ("versions", "settings", "seed", "iterations", "wall_s", "submissions", "upload_bytes",
                "readback_bytes", "pool", "phases_ms", "adapter", "final", "history", "image", "size"):
        assert key in r, key
    assert r["seed"] == 5 and r["iterations"] == 30 and r["image"] == "noise.png" and r["size"] == [32, 24]
    assert {"trifit", "python", "numpy", "wgpu"} <= set(r["versions"])
    assert {"hits", "misses", "bytes"} <= set(r["pool"]) and r["submissions"] >= 2
    assert len(r["history"]["losses"]) == 30 and r["final"]["psnr"] > 5
    final = gpu_engine.render(fitter.scene).astype(np.float64)
    assert r["final"]["loss"] == pytest.approx(float(np.mean((final - fitter.target) ** 2)), rel=1e-6)
    json.loads(report_json(r))  # strict JSON


def test_jsonable_has_no_infinities():
    text = report_json({"a": float("inf"), "b": [1.0, float("nan")], "c": np.float32(2.0)})
    assert json.loads(text) == {"a": None, "b": [1.0, None], "c": 2.0}
    assert jsonable({"x": (1, 2)}) == {"x": [1, 2]}


@pytest.mark.gpu
def test_html_report_is_self_contained(tmp_path, fitter, gpu_engine):
    r = build_report(fitter, gpu_engine, 1.0)
    path = write_html_report(tmp_path / "r.html", r, fitter)
    text = path.read_text(encoding="utf-8")
    _check_self_contained(text)
    pngs = re.findall(r'src="data:image/png;base64,([^"]+)"', text)
    assert len(pngs) == 3  # target, render, error map
    import base64
    import io

    sizes = [Image.open(io.BytesIO(base64.b64decode(p))).size for p in pngs]
    assert sizes == [(32, 24)] * 3
    svgs = _svgs(text)
    assert len(svgs) == 4  # loss, PSNR, GPU phases, host phases
    titles = [_check_svg(svg).findtext(f"{SVG_NS}title") for svg in svgs]
    assert [t.split()[0] for t in titles] == ["mse", "PSNR", "GPU", "host"], titles
    assert all(int(ET.fromstring(svg).get("width")) >= 300 for svg in svgs)
    for words in ("submissions", "pool hits", "seed", "wgpu", r["adapter"]["name"], "backward"):
        assert words in text, words
    assert _embedded(text) == json.loads(report_json(r))
    assert "Plots are missing" not in text


@pytest.mark.gpu
def test_write_report_from_a_worker_thread(tmp_path, fitter):
    """The GUI's fit worker calls write_report: the plots are plain SVG text, drawn right there on
    the worker thread; the page and its JSON twin are written."""
    box = {}

    def work():
        try:
            box["path"] = write_report(tmp_path / "w.html", fitter)
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc

    t = threading.Thread(target=work)
    t.start()
    t.join(120)
    assert not t.is_alive() and "error" not in box, box.get("error")
    text = (tmp_path / "w.html").read_text(encoding="utf-8")
    assert text.count("data:image/png;base64,") == 3 and len(_svgs(text)) == 4
    assert "Plots are missing" not in text
    assert json.loads((tmp_path / "w.json").read_text())["iterations"] == 30
    write_report(tmp_path / "only.json", fitter)
    assert json.loads((tmp_path / "only.json").read_text())["seed"] == 5


def test_html_report_without_fitter_or_history(tmp_path):
    r = {"software": "trifit test", "iterations": 0, "wall_s": 0.0, "final": {"psnr": float("inf")},
         "history": {"iterations": [], "losses": []}, "phases_ms": {}, "settings": {"loss": "l1"}}
    text = write_html_report(tmp_path / "r.html", r).read_text()
    _check_self_contained(text)
    assert "No phase timings" in text and _embedded(text)["final"]["psnr"] is None


@pytest.mark.gpu
def test_cli_fit_html_report(tmp_path, gpu_ctx):
    img = (np.random.default_rng(2).uniform(0, 1, (18, 24, 3)) * 255).astype(np.uint8)
    Image.fromarray(img).save(tmp_path / "in.png")
    code = main(["fit", str(tmp_path / "in.png"), "--size", "24", "--tris", "4", "--iters", "10", "--seed", "7",
                 "-o", str(tmp_path / "s.json"), "--report", str(tmp_path / "rep.html"), "--quiet"])
    assert code == 0
    text = (tmp_path / "rep.html").read_text(encoding="utf-8")
    twin = json.loads((tmp_path / "rep.json").read_text())
    assert _embedded(text) == twin and twin["seed"] == 7 and twin["image"].endswith("in.png")
    assert text.count("data:image/png;base64,") == 3 and len(_svgs(text)) == 4


def test_example_report_in_docs():
    html_path, json_path = DOCS / "example-report.html", DOCS / "example-report.json"
    assert html_path.exists() and json_path.exists(), "regenerate with: python -m trifit.report"
    assert html_path.stat().st_size < 300 * 1024
    text = html_path.read_text(encoding="utf-8")
    _check_self_contained(text)
    r = json.loads(json_path.read_text())
    assert _embedded(text) == r and r["image"] == "chelsea.png" and r["iterations"] > 0


# ---------------------------------------------------------------------- drawn without Qt
@pytest.mark.gpu
def test_cli_html_report_when_qt_cannot_start(tmp_path, gpu_ctx):
    """With a Qt platform that does not exist, Qt aborts the process as soon as an application
    is made: the report must not need one."""
    img = (np.random.default_rng(3).uniform(0, 1, (24, 32, 3)) * 255).astype(np.uint8)
    Image.fromarray(img).save(tmp_path / "tiny.png")
    out = tmp_path / "out.html"
    env = dict(os.environ, QT_QPA_PLATFORM="no-such-platform")
    p = subprocess.run([sys.executable, "-m", "trifit.cli", "fit", str(tmp_path / "tiny.png"), "--iters", "30",
                        "--size", "32", "--tris", "8", "--backend", "gpu", "--report", str(out), "--quiet"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert out.exists() and out.with_suffix(".json").exists()
    text = out.read_text(encoding="utf-8")
    assert "<svg" in text and "Plots are missing" not in text
    svgs = _svgs(text)
    assert len(svgs) == 4
    for svg in svgs:
        _check_svg(svg)
    assert _embedded(text) == json.loads(out.with_suffix(".json").read_text())


def test_report_module_needs_no_qt():
    """Importing trifit.report and drawing a whole page (in a fresh interpreter) loads no Qt
    binding, no pyqtgraph and nothing from the GUI package."""
    code = """
import json, sys
import trifit.report as rr
r = {"software": "trifit test", "iterations": 3, "wall_s": 0.5, "settings": {"loss": "mse"},
     "coarse_until": 2, "history": {"iterations": [1, 2, 3], "losses": [0.5, 0.1, 0.05]},
     "phases_ms": {"forward": 1.5, "host:readback": 0.25}, "final": {"psnr": 13.0}}
page = rr.render_html(r)
bad = sorted(m for m in sys.modules if m.split(".")[0] in QT or m == "trifit.app" or m.startswith("trifit.app."))
print(json.dumps({"bad": bad, "svgs": page.count("<svg"), "missing": "Plots are missing" in page}))
""".replace("QT", repr(QT_MODULES))
    env = dict(os.environ, QT_QPA_PLATFORM="no-such-platform")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got == {"bad": [], "svgs": 4, "missing": False}


_ITS = np.arange(0, 120_001)
_WIDE = 0.3 * np.exp(-_ITS / 3000.0) + 1e-9


@pytest.mark.parametrize("case", ["log-wide", "log-crowded", "log-narrow", "log-2-5", "psnr", "one-point",
                                  "small", "bars", "bars-narrow", "escaping"])
def test_svg_plot_is_wellformed_with_labels_apart(case):
    S, M = svgplot.Series, svgplot.Marker
    fig = {
        "log-wide": lambda: svgplot.line_plot([S("mse loss", _ITS, _WIDE)], title="loss", xlabel="iteration",
                                              ylabel="mse", log_y=True, markers=(M(5000, "full size from 5,000"),)),
        "log-crowded": lambda: svgplot.line_plot([S("mse loss", _ITS, _WIDE)], title="loss", xlabel="iteration",
                                                 ylabel="mse", log_y=True, width=320, height=150),
        "log-narrow": lambda: svgplot.line_plot([S("l1", [1, 2, 3], [0.0123, 0.0121, 0.0119])], title="l1",
                                                xlabel="iteration", ylabel="l1", log_y=True),
        "log-2-5": lambda: svgplot.line_plot([S("mse", [0, 400], [0.09, 0.011])], title="mse", xlabel="iteration",
                                             ylabel="mse", log_y=True),
        "psnr": lambda: svgplot.line_plot([S("PSNR", _ITS[:5000], 10 + np.log1p(_ITS[:5000]))], title="PSNR",
                                          xlabel="iteration", ylabel="PSNR (dB)"),
        "one-point": lambda: svgplot.line_plot([S("PSNR", [3], [20.0])], title="one", xlabel="it", ylabel="dB"),
        "small": lambda: svgplot.line_plot([S("a much longer legend entry than fits", _ITS[:900], 1 / (1 + _ITS[:900])),
                                            S("second series", _ITS[:900], 2 / (1 + _ITS[:900]), "#d62728")],
                                           title="small", xlabel="iteration", ylabel="loss", log_y=True,
                                           width=240, height=220),
        "bars": lambda: svgplot.bar_plot([(f"phase {i}", 0.37 * 1.9 ** i) for i in range(9)], title="GPU passes",
                                         xlabel="ms"),
        "bars-narrow": lambda: svgplot.bar_plot([("a very long phase name that goes on and on and on", 1e-5),
                                                 ("b", 12345.6)], title="host", xlabel="ms", width=300),
        "escaping": lambda: svgplot.line_plot([S("<loss> & 'more'", [0, 10], [1.0, 2.0])], title='a<b & "c"',
                                              xlabel="x</text>", ylabel="y&y"),
    }[case]()
    svg = fig.svg()
    root = _check_svg(svg)
    texts = [el.text for el in root.iter(f"{SVG_NS}text")]
    assert texts == [lab.text for lab in fig.labels]  # every laid-out label made it, unmangled
    roles = [lab.role for lab in fig.labels]
    assert roles.count("xtick") >= 2 and roles.count("ytick") >= 2, roles
    yticks = [lab.text for lab in fig.labels if lab.role == "ytick"]
    if case in ("log-wide", "log-crowded"):  # crowded log axes label decades only
        assert all(t.startswith("10") for t in yticks) and len(yticks) < 12, yticks
    if case == "log-crowded":
        assert len(yticks) <= 4, yticks  # thinned: every few decades
    if case == "escaping":
        assert root.findtext(f"{SVG_NS}title") == 'a<b & "c"' and "x</text>" in texts and "<loss> & 'more'" in texts
    if case == "log-wide":  # 120k points are drawn as at most a few per pixel column
        assert len(svg) < 80_000


def test_overlap_check_can_fail():
    fig = svgfigure.Figure(200, 100, "t")
    fig.label("0.0125", 50, 50, anchor="middle", role="xtick")
    fig.label("0.0130", 70, 50, anchor="middle", role="xtick")
    assert _overlaps(_label_boxes(ET.fromstring(fig.svg())))
    fig.labels[1].x = 120
    assert not _overlaps(_label_boxes(ET.fromstring(fig.svg())))
    with pytest.raises(AssertionError):
        _check_svg(svgfigure.Figure(40, 40, "t").svg().replace("</svg>", '<text x="30" y="20" font-size="11">wide'
                                                                         ' text</text></svg>'))


def test_tick_formatting():
    assert [svgplot.fmt_linear(v, 20000, 120000) for v in (0, 20000, 120000)] == ["0", "20k", "120k"]
    assert [svgplot.fmt_linear(v, 250, 1000) for v in (0, 250, 1000)] == ["0", "250", "1,000"]
    assert [svgplot.fmt_linear(v, 0.25) for v in (10.5, 10.75)] == ["10.50", "10.75"]
    assert svgplot.fmt_linear(-1e-17, 0.1) == "0"
    assert [svgplot.fmt_log(1, k) for k in (-3, -1, 0, 2)] == ["0.001", "0.1", "1", "100"]
    assert svgplot.fmt_log(1, -5) == "10\u207b\u2075" and svgplot.fmt_log(1, -1, powers=True) == "10\u207b\u00b9"
    assert svgplot.fmt_log(2, -6) == "2\u00d710\u207b\u2076"
    assert [svgplot.fmt_sig(v) for v in (0.138, 10.5, 72.71, 12345.6, 0.00684)] == \
        ["0.138", "10.5", "72.7", "12,346", "0.00684"]
    ticks, step = svgplot.linear_ticks(0, 7, 7, integer=True)
    assert step == 1 and ticks == list(range(8))
    assert svgplot.linear_ticks(0, 10, 4, integer=True)[1] != 2.5  # no fractional iterations


def test_error_map_uses_viridis():
    target = np.zeros((2, 2, 3))
    render = np.zeros((2, 2, 3))
    render[0, 0] = 1.0
    rgb, top = error_map(render, target)
    assert rgb.dtype == np.uint8 and rgb.shape == (2, 2, 3) and top == pytest.approx(1.0, rel=0.02)
    assert tuple(rgb[0, 0]) == (253, 231, 37) and tuple(rgb[1, 1]) == (68, 1, 84)
