"""`trifit bench` and `trifit bench --quality` run end to end at CI size and write their JSON
(the full tables are measured on the device; docs/PERFORMANCE.md, docs/QUALITY.md)."""

import json

import pytest

from trifit.cli import main

pytestmark = pytest.mark.gpu


def test_bench_quick_writes_every_section(tmp_path, gpu_ctx):
    out = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--repeats", "1", "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["backend"] == "gpu" and d["adapter"]["name"]
    names = [c["name"] for c in d["cells"]]
    assert any(n.startswith("forward ") for n in names) and any(n.startswith("fit iteration") for n in names)
    for c in d["cells"]:
        assert c["min_ms"] <= c["median_ms"] <= c["max_ms"] and c["median_ms"] > 0
    assert d["crossover"] and all(r["winner"] in ("gpu", "reference") for r in d["crossover"])
    b = d["baseline"][0]
    assert b["speedup"] == pytest.approx(b["naive_forward_ms"] / b["tiled_forward_ms"])
    h = d["host"]  # a fixed plan with every event: the same events in every run
    assert h["iterations"] == 300 and h["events"] > 5 and h["size"] == 64 and h["triangles"] == 50
    assert 0 < h["event_cpu_s"] < h["fit_thread_cpu_s"] <= h["wall_s"] + 0.01
    assert h["fit_thread_cpu_us_per_iteration"] == pytest.approx(h["fit_thread_cpu_s"] / 300 * 1e6)
    assert 0 < h["readback_without_snapshots_per_iteration"] <= h["readback_bytes_per_iteration"] < 1024
    assert 0 < h["submissions_per_iteration"] < 1 and h["psnr"] > 10
    st = d["start"]  # fresh processes: the fit's wall holds its time limit, --version none
    assert st["fit"]["time_limit_s"] < st["fit"]["min_s"] <= st["fit"]["median_s"] <= st["fit"]["max_s"]
    assert len(st["fit"]["runs_s"]) == len(st["version"]["runs_s"]) == 2
    assert 0 < st["version"]["min_s"] <= st["version"]["median_s"] < st["fit"]["min_s"]
    # and each process's CPU, all its threads (Linux and macOS count a finished child's)
    cpu = st["fit"]["cpu"]
    assert len(st["fit"]["cpu_runs_s"]) == 2 and 0 < cpu["min_s"] <= cpu["median_s"] <= cpu["max_s"]
    assert 0 < st["version"]["cpu"]["median_s"] < cpu["median_s"]


def test_bench_quality_scores_the_saved_scene(tmp_path, gpu_ctx):
    from trifit.resources import sample_path

    out = tmp_path / "q.json"
    assert main(["bench", "--quality", "--tris", "4", "--seeds", "2", "--iters", "6", "--size", "24",
                 "--images", sample_path("chelsea.png"), "--out", str(tmp_path / "scenes"),
                 "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    assert len(d["rows"]) == 2 and {r["seed"] for r in d["rows"]} == {0, 1}
    assert all(r["iterations"] == 6 and 5 < r["psnr"] < 60 for r in d["rows"])
    s = d["summary"][0]
    assert s["psnr"]["min"] <= s["psnr"]["mean"] <= s["psnr"]["max"] and s["seeds"] == 2
    assert len(list((tmp_path / "scenes").glob("*.json"))) == 2
    # the replicas each fit ran are reported: by default what the adapter's rule chooses, else as asked
    from trifit import Engine, load_image
    from trifit.replicas import auto_replicas

    h, w = load_image(sample_path("chelsea.png"), 24).shape[:2]
    chosen = auto_replicas(Engine("gpu").adapter.get("type", ""), w, h, 4, "default")
    assert {r["replicas"] for r in d["rows"]} == {chosen} and s["replicas"] == [chosen]
    out2 = tmp_path / "q2.json"
    assert main(["bench", "--quality", "--tris", "4", "--seeds", "1", "--iters", "6", "--size", "24",
                 "--images", sample_path("chelsea.png"), "--replicas", "2", "--json", str(out2)]) == 0
    d2 = json.loads(out2.read_text())
    assert d2["rows"][0]["replicas"] == 2 and d2["summary"][0]["replicas"] == [2]
