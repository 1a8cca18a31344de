#!/usr/bin/env bash
# Video fits on the lent H200 (issue #21): tools/video_measure.py at the settings (176 px,
# 150 triangles, 100 iterations a frame after a 600-iteration first frame), warm against cold and
# the frame-policy variants; then `trifit video` itself on a folder of frames (no PyAV there), and its end-to-end
# frames/s with every call in line and with the host work beside the fit (tools/video_speed.py; the >= 25 target).
# Needs .whl/ and .gl/ carried (wgpu and the Vulkan loader, as tools/device_quality.sh); results land in $OUT.
set -e
. tools/device_env.sh  # the Vulkan loader, the wheels, trifit staged (tools/device_env.sh)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 tools/video_measure.py --size 176 --tris 150 --iters 100 --first 600 --frames 48 ${SWEEP:+--sweep "$SWEEP"} \
  --json "$OUT/h200-video.json"
python3 tools/video_measure.py --write-frames /tmp/clip --frames 120
for run in 1 2; do
  rm -rf /tmp/out /tmp/.out.trifit-video
  python3 -m trifit.cli video /tmp/clip -o /tmp/out --tris 150 --size 176 --iters-per-frame 100 --first-frame-iters 600 2>&1 | tr "\r" "\n" | tail -n 2
done
python3 tools/video_speed.py --size 176 --tris 150 --iters 100 --first 600 --frames 120 --out-kind folder --scenes \
  --json "$OUT/h200-video-speed.json"
