#!/usr/bin/env bash
# Batch on a Dask cluster (issue #22): tools/cluster_measure.py -- images/s of `trifit batch --dask local:N` for N = 1, 2
# and 4 GPUs (one worker each, pinned by TRIFIT_ADAPTER) at 176 px, 150 triangles, 800 iterations (32 images, 3 repeats),
# the scaling efficiency, whether the scenes are the same bytes for every N, and the one-process batch (sequential and
# batched) beside them. Run it on nvidia-h200-x4 (on nvidia-h200-x2 the 4-GPU row is skipped and says so).
# Needs .whl/ and .gl/ carried (wgpu and the Vulkan loader, as tools/device_quality.sh) and Dask's wheels in .whl/ too --
# the device has no package index. Fill .whl/ with (from the project's root):
#   WHEELS="wgpu==0.32.0 cffi pycparser rendercanvas==2.7.2 sniffio tqdm distributed==2026.8.0 dask==2026.8.0 click \
#     cloudpickle fsspec jinja2 MarkupSafe locket msgpack packaging partd psutil pyyaml sortedcontainers tblib toolz \
#     tornado zict" ../shared/tools/gpu-prep.sh
# (MarkupSafe, msgpack, psutil, pyyaml and tornado are binary: gpu-prep fetches their cp312 manylinux wheels.)
# Results land in $OUT: h200-cluster.json and the printed log h200-cluster.txt.
set -eo pipefail
. tools/device_env.sh  # the Vulkan loader, the wheels, trifit staged (tools/device_env.sh)
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
python3 -c "import dask, distributed; print('dask', dask.__version__, 'distributed', distributed.__version__)"
python3 tools/cluster_measure.py --workers "${WORKERS:-1,2,4}" --images "${IMAGES:-32}" --size 176 --tris 150 --iters 800 \
  --repeats "${REPEATS:-3}" --json "$OUT/h200-cluster.json" 2>&1 | tee "$OUT/h200-cluster.txt"
