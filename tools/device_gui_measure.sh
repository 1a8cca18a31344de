#!/usr/bin/env bash
# Measure the desktop app (python -m trifit.app.measure) on a machine that has Python, numpy, pillow and a
# GPU driver but no PySide6, no X server and no package index (the lent H200): Qt runs on its
# offscreen platform and the canvas presents through a bitmap. Needs, in the checkout:
#   .whl/ .gl/    from ../shared/tools/gpu-prep.sh (wgpu, rendercanvas, the Vulkan loader)
#   .qtmini/qtmini.tgz  PySide6's QtCore/Gui/Widgets/OpenGL/Svg/Test + pyqtgraph + qasync (tools/qt_bundle.sh)
#   .qtdebs/      the Debian runtime libraries Qt links against (tools/qt_bundle.sh)
# Libraries the machine already has are left alone; only missing ones are supplied.
# Usage: bash tools/device_gui_measure.sh [app.measure arguments]
set -euo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
mkdir -p /tmp/qt /tmp/qtroot /tmp/qtlibs
tar -xzf .qtmini/qtmini.tgz -C /tmp/qt
for f in .qtdebs/*.deb; do dpkg -x "$f" /tmp/qtroot; done
have=$(ldconfig -p | awk '{print $1}')
for so in /tmp/qtroot/usr/lib/x86_64-linux-gnu/*.so.* /tmp/qtroot/lib/x86_64-linux-gnu/*.so.*; do
    [ -e "$so" ] || continue
    name=$(basename "$so")
    grep -qx "$name" <<<"$have" || ln -sf "$so" /tmp/qtlibs/"$name"
done
echo "supplied: $(ls /tmp/qtlibs | tr '\n' ' ')"
export LD_LIBRARY_PATH=/tmp/qtlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=/tmp/site:/tmp/qt/site:$(bash tools/stage_package.sh /tmp/trifit-pkg)
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json PYTHONUNBUFFERED=1
export QT_QPA_PLATFORM=offscreen QT_QPA_FONTDIR=/tmp/qtroot/usr/share/fonts/truetype/dejavu
export XDG_RUNTIME_DIR=/tmp/xdg; mkdir -p -m 700 "$XDG_RUNTIME_DIR"
python3 -m trifit.app.measure "$@"
