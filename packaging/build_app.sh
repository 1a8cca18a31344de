#!/usr/bin/env bash
# Build the one-folder desktop app with PyInstaller, then smoke-test it headless.
#   usage: packaging/build_app.sh            (from anywhere; uses .venv/bin/python if present,
#                                             else $PYTHON, else python3)
# Output: dist/trifit/trifit (run it; "trifit gui" is the default), plus a tarball
# dist/trifit-<version>-linux-<arch>.tar.gz holding the folder, the .desktop file and the icon.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x .venv/bin/python ]; then PY=.venv/bin/python
else PY=python3; fi

"$PY" -c "import trifit, trifit.app, PySide6, pyqtgraph, wgpu" || {
  echo "build_app: install trifit with its GUI extra first: pip install -e '.[gui]'" >&2; exit 2; }
if ! "$PY" -m PyInstaller --version >/dev/null 2>&1; then
  echo "build_app: installing PyInstaller"
  "$PY" -m pip install -q "pyinstaller>=6.10"
fi

# PyInstaller analyses real folders, not the editable install's name mapping: it bundles trifit as
# the wheel installs it (build/trifit-site), the one import name and its package data included.
SITE="$ROOT/build/trifit-site"
rm -rf "$SITE" "$ROOT/build/wheel"
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$ROOT/build/wheel" "$ROOT"
"$PY" -m pip install -q --no-deps --no-index --target "$SITE" "$ROOT"/build/wheel/trifit-*.whl
PYTHONPATH="$SITE" TRIFIT_SITE="$SITE" "$PY" -m PyInstaller --noconfirm --clean --log-level WARN \
  --distpath "$ROOT/dist" --workpath "$ROOT/build/pyinstaller" packaging/trifit.spec

APP="$ROOT/dist/trifit/trifit"
VERSION=$("$APP" --version | awk '{print $2}')
echo "build_app: built $APP (trifit $VERSION, $(du -sh "$ROOT/dist/trifit" | cut -f1))"

# ---- smoke test: headless, from an empty folder, so nothing can come from the source tree
export QT_QPA_PLATFORM=offscreen
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp resources/chelsea.png "$tmp/in.png"
cd "$tmp"
env -u PYTHONPATH "$APP" --version
env -u PYTHONPATH "$APP" fit in.png --size 24 --tris 5 --iters 5 -o scene.json --report report.html --quiet
env -u PYTHONPATH "$APP" render scene.json --size 96x64 -o out.png
env -u PYTHONPATH "$APP" render scene.json -o out.svg
for f in scene.json report.html report.json out.png out.svg; do
  [ -s "$f" ] || { echo "build_app: smoke test: $f missing" >&2; exit 1; }
done
grep -q '<svg' report.html || { echo "build_app: report has no plots" >&2; exit 1; }
# the window must come up and keep running (killed by timeout: status 124)
set +e
env -u PYTHONPATH timeout 10 "$APP" gui in.png >gui.log 2>&1
rc=$?
set -e
if [ "$rc" != 124 ]; then
  echo "build_app: smoke test: the GUI exited early (status $rc):" >&2; cat gui.log >&2; exit 1
fi
cd "$ROOT"
echo "build_app: smoke test passed (--version, fit + HTML report, PNG and SVG render, GUI starts)"

# ---- a tarball with the desktop entry and icon beside the folder
ARCH=$(uname -m)
stage="$ROOT/build/pyinstaller/stage"
rm -rf "$stage" && mkdir -p "$stage"
cp -a "$ROOT/dist/trifit" "$stage/trifit"
cp packaging/trifit.desktop "$stage/trifit/trifit.desktop"
cp resources/trifit.png "$stage/trifit/trifit.png"
tar -C "$stage" -czf "$ROOT/dist/trifit-$VERSION-linux-$ARCH.tar.gz" trifit
echo "build_app: $ROOT/dist/trifit-$VERSION-linux-$ARCH.tar.gz"
