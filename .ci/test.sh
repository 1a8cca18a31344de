#!/usr/bin/env bash
# The test command of the README: the whole suite under a virtual X server, on whatever wgpu
# adapter exists (lavapipe on a machine without a GPU). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
exec xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python -m pytest -q "$@"
