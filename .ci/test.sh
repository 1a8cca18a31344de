#!/usr/bin/env bash
# The test command of the README: the linters (ruff; import-linter's layer contracts from
# pyproject.toml), then the whole suite under a virtual X server, on whatever wgpu adapter exists
# (lavapipe on a machine without a GPU), then the modules whose fits run replicas once more with
# tools/replicas_as_gpu.py. Extra arguments go to pytest (and skip the second pass).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check --quiet .
.venv/bin/lint-imports --no-cache >/dev/null || { .venv/bin/lint-imports --no-cache; exit 1; }
echo "lint: ruff and import-linter contracts clean"
xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python -P -m pytest -q "$@"  # -P: the installed trifit, never the folders as top-level packages
[ $# -eq 0 ] || exit 0
# The modules whose fits run replicas, again with a CPU adapter's fits choosing them as a GPU's do
# (two for small default fits, where lavapipe chooses one): what holds here then holds on a GPU.
echo "again, with fits choosing replicas as a GPU would (tools/replicas_as_gpu.py):"
PYTHONPATH=tools xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python -P -m pytest -q -p replicas_as_gpu \
  tests/test_fitter.py tests/test_events.py tests/test_locks.py tests/test_edits.py tests/test_focus.py \
  tests/test_batch_fit.py tests/test_faults.py tests/test_gui_edit.py
