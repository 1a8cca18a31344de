"""Run reports: the dict, the self-contained HTML page (from the main thread and from a worker
thread while the GUI thread runs its loop), the CLI's --report, and the example in docs/."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

# Qt (pytest-qt's qapp, the SVG rasteriser, report plots) needs a display: offscreen without one
if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from render.cli import main
from render.report import build_report, jsonable, report_json, write_html_report, write_report

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.fixture(scope="module")
def fitter(gpu_engine):
    from render import Fitter, StopConditions

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
    assert len(pngs) == 7  # target, render, error map, loss, PSNR, GPU phases, host phases
    import base64
    import io

    sizes = [Image.open(io.BytesIO(base64.b64decode(p))).size for p in pngs]
    assert sizes[:3] == [(32, 24)] * 3 and all(w >= 300 for w, _ in sizes[3:])
    for words in ("submissions", "pool hits", "seed", "wgpu", r["adapter"]["name"], "backward"):
        assert words in text, words
    assert _embedded(text) == json.loads(report_json(r))
    assert "Plots are missing" not in text


@pytest.mark.gpu
def test_write_report_from_a_worker_thread(tmp_path, fitter, qapp):
    """The GUI's fit worker calls write_report: plots are drawn on the GUI thread, which runs its
    event loop meanwhile; the page and its JSON twin are written."""
    box = {}

    def work():
        try:
            box["path"] = write_report(tmp_path / "w.html", fitter)
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc

    t = threading.Thread(target=work)
    t.start()
    while t.is_alive():
        qapp.processEvents()
        t.join(0.01)
    assert "error" not in box, box.get("error")
    text = (tmp_path / "w.html").read_text(encoding="utf-8")
    assert text.count("data:image/png;base64,") == 7
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
    assert text.count("data:image/png;base64,") == 7


def test_example_report_in_docs():
    html_path, json_path = DOCS / "example-report.html", DOCS / "example-report.json"
    assert html_path.exists() and json_path.exists(), "regenerate with: python -m render.report"
    assert html_path.stat().st_size < 300 * 1024
    text = html_path.read_text(encoding="utf-8")
    _check_self_contained(text)
    r = json.loads(json_path.read_text())
    assert _embedded(text) == r and r["image"] == "chelsea.png" and r["iterations"] > 0
