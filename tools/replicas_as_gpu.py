"""A pytest plugin for this machine's lavapipe: fits on the GPU backend choose their replicas as a
discrete GPU would (render/replicas.py ``auto_replicas``: two for a small default-strategy fit),
where a CPU adapter chooses one. CI runs lavapipe, so a test that assumes one slot an image passes
there and fails on a lent GPU; this finds such tests without one.

    PYTHONPATH=tools CI=true xvfb-run -a .venv/bin/python -m pytest -q -p replicas_as_gpu tests

.ci/test.sh runs the fit's modules so after the suite. On a GPU adapter it changes nothing.

Known differences that are not faults (9 of the suite's tests on 2026-12-05): the Dask workers of
tests/test_cluster.py run in processes without the plugin (one replica), so their scenes differ
from the in-process batch's (two); and tests that expect what ``auto_replicas`` says for this
adapter (tests/test_replicas.py, test_bench.py's quality rows, test_gui.py's replicas box) see the
plugin's choice instead.
"""

import sys

import trifit.fitter as fitter_mod
import trifit.replicas as replicas_mod

_chosen = replicas_mod.auto_replicas


def _as_gpu(adapter_type, width, height, triangles, strategy):
    fitter = sys._getframe(1).f_locals.get("self")  # (the Fitter choosing: its engine's backend)
    if getattr(getattr(fitter, "engine", None), "backend", None) == "gpu" and adapter_type == "CPU":
        adapter_type = "DiscreteGPU"
    return _chosen(adapter_type, width, height, triangles, strategy)


fitter_mod.auto_replicas = _as_gpu
