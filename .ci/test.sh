#!/usr/bin/env bash
# The test command of the README: the linters (ruff; import-linter's layer contracts from
# pyproject.toml), then the whole suite under a virtual X server, on whatever wgpu adapter exists
# (lavapipe on a machine without a GPU). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check --quiet .
.venv/bin/lint-imports --no-cache >/dev/null || { .venv/bin/lint-imports --no-cache; exit 1; }
echo "lint: ruff and import-linter contracts clean"
exec xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python -P -m pytest -q "$@"  # -P: the installed trifit, never the folders as top-level packages
