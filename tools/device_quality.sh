#!/usr/bin/env bash
# Fit quality on the lent H200 (docs/QUALITY.md): the quality bench, the issue-#5 command in fresh
# processes, and photographs we did not tune on (git-ignored .untuned/*.png, carried). Start it
# with gpu-prep.sh's header; results land in $OUT.
set -e
export PYTHONPATH="$(bash tools/stage_package.sh /tmp/trifit-pkg):${PYTHONPATH:-}"  # trifit, as installed
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m trifit.cli bench --quality --time-limit 1 --seeds 3 --json "$OUT/h200-quality.json" 2>&1 | tail -n 20
python3 tools/cli_fits.py --time-limit 1 --runs 3 --json "$OUT/h200-cli.json"
if ls .untuned/*.png >/dev/null 2>&1; then
  python3 tools/cli_fits.py --time-limit 1 --runs 1 --images "$(ls .untuned/*.png | paste -sd,)" --json "$OUT/h200-untuned.json"
fi
