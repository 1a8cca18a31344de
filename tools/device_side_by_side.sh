#!/usr/bin/env bash
# Issue #19's H200 targets for this tree beside the commit in .base/, in one call on a lent H200:
# the speed bench, the 1 s command (3 fresh processes each) and its 20 s fit at 512 px with
# 1000 triangles (2 runs each; host CPU, iterations, PSNR), every pair alternating so that the two
# trees share the machine's state. Make .base/ first (`git archive --prefix=.base/ COMMIT | tar -x`;
# an untracked folder travels with the tree) and carry .whl/ and .gl/ (tools/device_env.sh). Results
# land in $OUT: bench-{base,new}.json, cli1.txt, long20.txt.
set -e
. tools/device_env.sh  # the Vulkan loader, the wheels, trifit staged with bytecode (tools/device_env.sh)
NEW="$PYTHONPATH"
[ -d .base/render ] || { echo "no .base/ tree: git archive --prefix=.base/ COMMIT | tar -x" >&2; exit 2; }
BASE="/tmp/site:$(bash .base/tools/stage_package.sh /tmp/trifit-base)"
device_compile /tmp/trifit-base
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } | tee "$OUT/env.txt"

for tree in base new; do
  path=$([ "$tree" = base ] && echo "$BASE" || echo "$NEW")
  PYTHONPATH="$path" python3 -m trifit.cli bench --json "$OUT/bench-$tree.json" > /dev/null
done

for round in 1 2 3; do
  for tree in base new; do
    path=$([ "$tree" = base ] && echo "$BASE" || echo "$NEW")
    echo "== $tree, round $round"
    PYTHONPATH="$path" python3 tools/cli_fits.py --time-limit 1 --runs 1
  done
done 2>&1 | tee "$OUT/cli1.txt"

for round in 1 2; do
  for tree in base new; do
    path=$([ "$tree" = base ] && echo "$BASE" || echo "$NEW")
    echo "== $tree, round $round"
    PYTHONPATH="$path" python3 tools/profile_time_to_quality.py long --seconds 20 --size 512 --tris 1000 |
      python3 -c "import json, sys; d = json.load(sys.stdin); print({k: d.get(k) for k in ('iterations', 'host_cpu_s',
'fit_thread_cpu_s', 'event_cpu_s', 'submissions', 'psnr_at_5s', 'psnr_at_20s', 'readback_bytes_per_iteration')})"
  done
done 2>&1 | tee "$OUT/long20.txt"
