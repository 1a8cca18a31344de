#!/usr/bin/env bash
# The test suite on a lent GPU machine (docs/bench/h100-tests-*.txt): every module in its own
# pytest process, SHARDS at a time side by side, each stopped after LIMIT seconds (a hang shows as
# a module with no summary line). That machine has no PySide6, pytest-qt, PyAV, Dask or
# scikit-image, so outside CI=true their modules skip. pytest and hypothesis come from .whl/:
#   WHEELS="wgpu==0.32.0 cffi pycparser rendercanvas==2.7.2 sniffio tqdm pytest pluggy iniconfig packaging
#           hypothesis attrs sortedcontainers" bash ../shared/tools/gpu-prep.sh
# Start it with gpu-prep.sh's header (carry .whl and .gl); one file a module lands in $OUT, and a
# line a module on stdout. LOCAL=1 runs it here (.venv's Python); MODULES="tests/test_a.py ..." a few.
set -e
if [ "${LOCAL:-0}" = 1 ]; then
  PY=.venv/bin/python
else
  . tools/device_env.sh > /dev/null 2>&1
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  PY=python3
fi
SHARDS=${SHARDS:-8}
LIMIT=${LIMIT:-240}
run_module() {
  local name; name=$(basename "$1" .py)
  timeout "$LIMIT" "$PY" -P -m pytest -q -p no:cacheprovider -rfE --tb=short --basetemp="/tmp/dt_$name" "$1" \
    > "$OUT/$name.txt" 2>&1 || true
  echo "$name: $(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed|error)' "$OUT/$name.txt" | tail -n 1 || true)"
}
export -f run_module
export LIMIT OUT PY
ls ${MODULES:-tests/test_*.py} | xargs -P "$SHARDS" -I{} bash -c 'run_module {}' | sort
