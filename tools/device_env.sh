# Sourced (`. tools/device_env.sh`) from the project's root by the tools/device_*.sh scripts on a lent GPU
# machine, which has no package index: the Vulkan loader from .gl/, the wheels from .whl/ into /tmp/site
# (both filled by ../shared/tools/gpu-prep.sh and carried), the NVIDIA driver's Vulkan ICD, and this
# checkout staged as the installed package trifit, first on PYTHONPATH.
#
# Bytecode: these machines set PYTHONDONTWRITEBYTECODE and ship their numpy without it, and the wheels
# go in with --no-compile, so every process would compile each module it imports from source (a
# quarter of a second of a 1 s fit's start-up, docs/PERFORMANCE.md). A pip install compiles its
# packages, so the bytecode of everything a fit imports is compiled once here, into a cache folder
# of its own (PYTHONPYCACHEPREFIX: the system's folders stay untouched). `device_compile DIR...` does
# the same for a tree staged later (a base commit's, say).
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export PYTHONPATH="/tmp/site:$(bash tools/stage_package.sh /tmp/trifit-pkg)"
export PYTHONUNBUFFERED=1
export PYTHONPYCACHEPREFIX=/tmp/pycache
device_compile() { python3 -m compileall -q -j 0 "$@" > /dev/null 2>&1 || true; }
device_compile /tmp/site /tmp/trifit-pkg $(python3 -c "import os, sys, numpy, PIL
print(os.path.dirname(numpy.__file__), os.path.dirname(PIL.__file__), *(p for p in sys.path[1:] if p.endswith(('lib/python3.12', 'lib/python3.12/lib-dynload'))))")
