#!/usr/bin/env bash
# The temporal term of a clip's fit on the lent H200 (issue #21, `trifit video --steady W`):
# tools/video_measure.py at the settings (176 px, 150 triangles, 100 iterations a frame after a
# 600-iteration first frame, 48 frames), both clips (still background, pan), W in a small grid, three
# noise seeds of each clip; then `trifit video --steady 1` itself end to end on a folder of frames (frames/s:
# the term's per-frame host work, stillness and one upload, against the run without it).
# Needs .whl/ and .gl/ carried (wgpu and the Vulkan loader, as tools/device_quality.sh); results land in $OUT.
set -e
. tools/device_env.sh  # the Vulkan loader, the wheels, trifit staged (tools/device_env.sh)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 tools/video_measure.py --size 176 --tris 150 --iters 100 --first 600 --frames 48 \
  --steady "${STEADY_GRID:-0,0.3,1,3,10}" --clip-seeds 0,1,2 --json "$OUT/h200-steady.json"
python3 tools/video_measure.py --write-frames /tmp/clip --frames 120
for steady in 0 1 0 1; do
  rm -rf /tmp/out /tmp/.out.trifit-video
  echo "--steady $steady"
  python3 -m trifit.cli video /tmp/clip -o /tmp/out --tris 150 --size 176 --iters-per-frame 100 --first-frame-iters 600 \
    --steady "$steady" 2>&1 | tr "\r" "\n" | tail -n 1
done | tee "$OUT/h200-steady-cli.txt"
