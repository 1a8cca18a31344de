#!/usr/bin/env bash
# Installs what trifit needs on a fresh Debian/Ubuntu machine, then the project into .venv.
#   system: Mesa's lavapipe (software Vulkan, so wgpu has an adapter with no GPU), Xvfb and the
#           X/xcb libraries a PySide6 window needs;
#   python: a virtual environment in .venv with trifit installed editable, with its GUI, test, video and cluster extras.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
PKGS="mesa-vulkan-drivers libvulkan1 xvfb xauth libxcb-cursor0 libxkbcommon-x11-0 libxcb-icccm4
  libxcb-keysyms1 libxcb-image0 libxcb-render-util0 libxcb-xinerama0 libxcb-shape0 libxcb-randr0
  libxcb-xkb1 libegl1 libgl1 libfontconfig1 libdbus-1-3 libglib2.0-0 libxrender1 libxi6"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "setup: installing system packages:$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[gui,test,video,cluster]'
echo "setup: done ($(.venv/bin/python --version), trifit $(.venv/bin/python -c 'import trifit; print(trifit.__version__)'))"
