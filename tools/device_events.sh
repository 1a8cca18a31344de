#!/usr/bin/env bash
# Events on the device (issue #19) on the lent H200: readback by kind, host CPU and quality of fits
# with growth, pruning and respawn -- placement = "host" against placement = "device" (the default)
# -- side by side with the commit before this work, staged from .base/ (make it before the run:
# `git archive --prefix=.base/ ffce880 | tar -x`; an untracked folder travels with the tree).
# Needs .whl/ and .gl/ carried (wgpu and the Vulkan loader, as tools/device_video.sh); results
# land in $OUT as JSON, one file per measurement.
set -e
. tools/device_env.sh  # the Vulkan loader, the wheels, trifit staged (tools/device_env.sh)
NEW="/tmp/site:$(bash tools/stage_package.sh /tmp/trifit-new)"
BASE=""
if [ -d .base/render ]; then BASE="/tmp/site:$(bash .base/tools/stage_package.sh /tmp/trifit-base)"; fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
date -u
git rev-parse HEAD 2>/dev/null || true

# readback at the small setting (128 px, 60 triangles, 600 iterations), 3 seeds
for seed in 0 1 2; do
  for mode in host device; do
    PYTHONPATH="$NEW" python3 tools/profile_time_to_quality.py readback --seed "$seed" --set placement=$mode \
      > "$OUT/readback-$mode-s$seed.json"
  done
done
if [ -n "$BASE" ]; then  # (the base's tool fits seed 0 only)
  PYTHONPATH="$BASE" python3 .base/tools/profile_time_to_quality.py readback > "$OUT/readback-base-s0.json"
fi

# long big fits: 512 px, 1000 triangles, 20 s (and 5 s), astronaut; host CPU, readback, PSNR at 1/5/10/20 s
for secs in 20 5; do
  for run in 1 2; do
    for mode in host device; do
      PYTHONPATH="$NEW" python3 tools/profile_time_to_quality.py long --seconds "$secs" --size 512 --tris 1000 \
        --set placement=$mode > "$OUT/long$secs-$mode-r$run.json"
    done
    if [ -n "$BASE" ]; then
      PYTHONPATH="$BASE" python3 .base/tools/profile_time_to_quality.py long --seconds "$secs" --size 512 --tris 1000 \
        > "$OUT/long$secs-base-r$run.json"
    fi
  done
done

# quality: deterministic budgeted plans (what a 1 s fit plans) and 1 s time-limited fits, 176 px,
# 150 triangles, seeds 0-2, both placements
PYTHONPATH="$NEW" python3 tools/sweep_quality.py --budgeted-plan 6000 --seeds 0,1,2 \
  --variants "host placement,device placement" > "$OUT/quality-budgeted-6000.txt"
PYTHONPATH="$NEW" python3 tools/sweep_quality.py --time-limit 1 --seeds 0,1,2 \
  --variants "host placement,device placement" > "$OUT/quality-1s.txt"
cat "$OUT"/quality-*.txt
for f in "$OUT"/long20-*.json; do
  echo "$f"; python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print({k: r.get(k) for k in ('iterations','host_cpu_s','readback_bytes_per_iteration','readback_without_snapshots_per_iteration','psnr_at_5s','psnr_at_20s')})" "$f"
done
