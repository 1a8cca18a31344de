#!/usr/bin/env bash
# Lay the checkout out as the installed package trifit (render/ -> trifit, app/ -> trifit.app,
# shaders/ and resources/ -> trifit.shaders, trifit.resources) under DEST, for a machine where it
# cannot be pip-installed (the lent GPU machines): then PYTHONPATH=DEST imports trifit.
# Usage: bash tools/stage_package.sh [DEST=/tmp/trifit-pkg]
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-/tmp/trifit-pkg}
rm -rf "$DEST/trifit" && mkdir -p "$DEST/trifit"
cp -r render/. "$DEST/trifit/"
for folder in app shaders resources; do cp -r "$folder" "$DEST/trifit/$folder"; done
find "$DEST/trifit" -name __pycache__ -prune -exec rm -rf {} +
echo "$DEST"
