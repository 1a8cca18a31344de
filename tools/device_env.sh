# Sourced (`. tools/device_env.sh`) from the project's root by the tools/device_*.sh scripts on a lent GPU
# machine, which has no package index: the Vulkan loader from .gl/, the wheels from .whl/ into /tmp/site
# (both filled by ../shared/tools/gpu-prep.sh and carried), the NVIDIA driver's Vulkan ICD, and this
# checkout staged as the installed package trifit, first on PYTHONPATH.
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export PYTHONPATH="/tmp/site:$(bash tools/stage_package.sh /tmp/trifit-pkg)"
export PYTHONUNBUFFERED=1
