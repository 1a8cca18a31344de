#!/usr/bin/env bash
# Build the Qt bundle tools/device_gui_measure.sh carries to a machine without PySide6:
# .qtmini/qtmini.tgz (the PySide6 modules the app imports, from this venv, ~36 MB) and .qtdebs/
# (Debian bookworm runtime libraries Qt links against). Both are git-ignored via .git/info/exclude.
# Usage: bash tools/qt_bundle.sh [path/to/site-packages]
set -euo pipefail
SP=${1:-$(python -c 'import PySide6, os; print(os.path.dirname(os.path.dirname(PySide6.__file__)))')}
for d in /.qtmini/ /.qtdebs/; do grep -qx "$d" .git/info/exclude || echo "$d" >> .git/info/exclude; done
rm -rf .qtmini .qtdebs && mkdir -p .qtmini/site/PySide6/Qt/lib .qtmini/site/PySide6/Qt/plugins/platforms .qtdebs
S=.qtmini/site
cp "$SP"/PySide6/__init__.py "$SP"/PySide6/_config.py "$SP"/PySide6/_git_pyside_version.py $S/PySide6/
cp -r "$SP"/PySide6/support $S/PySide6/
for m in QtCore QtGui QtWidgets QtOpenGL QtOpenGLWidgets QtSvg QtTest; do cp "$SP"/PySide6/$m.abi3.so $S/PySide6/; done
cp "$SP"/PySide6/libpyside6.abi3.so* $S/PySide6/
for l in Core Gui Widgets OpenGL OpenGLWidgets Svg Test DBus; do cp -P "$SP"/PySide6/Qt/lib/libQt6$l.so* $S/PySide6/Qt/lib/; done
cp -P "$SP"/PySide6/Qt/lib/libicu*.so* $S/PySide6/Qt/lib/
cp "$SP"/PySide6/Qt/plugins/platforms/libqoffscreen.so $S/PySide6/Qt/plugins/platforms/
cp -r "$SP"/shiboken6 "$SP"/pyqtgraph "$SP"/qasync $S/
rm -rf $S/pyqtgraph/examples $S/pyqtgraph/opengl
find $S -name __pycache__ -prune -exec rm -rf {} +
tar -czf .qtmini/qtmini.tgz -C .qtmini site && rm -rf $S
o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
mkdir -p /tmp/amd64/partial && apt-get $o update -qq
(cd .qtdebs && apt-get $o download libx11-6 libxcb1 libxau6 libxdmcp6 libbsd0 libmd0 libxkbcommon0 \
  libfontconfig1 fontconfig-config libfreetype6 libpng16-16 libbrotli1 libexpat1 libglib2.0-0 libpcre2-8-0 \
  libffi8 libmount1 libselinux1 libblkid1 libzstd1 libdbus-1-3 libsystemd0 liblzma5 liblz4-1 libgcrypt20 \
  libgpg-error0 libcap2 fonts-dejavu-core libpcre2-16-0 libdouble-conversion3 libb2-1 libgomp1 >/dev/null)
du -sh .qtmini .qtdebs
