#!/usr/bin/env bash
# The issue-#5 command (tools/cli_fits.py: fresh processes) for this tree beside the commit in .base/,
# in one call on a lent GPU machine: for each seed, each image runs on both trees in turn (the order
# alternating by seed) so that the two share the machine's state. Make .base/ first (`git archive
# --prefix=.base/ COMMIT | tar -x`) and carry .whl/ and .gl/ (tools/device_env.sh), and any image
# folder named in IMAGES. The rows land in $OUT/pairs.json ({"NAME SEED": rows}) and the lines in
# $OUT/pairs.txt, with tools/pair_summary.py's summary (each run against the first, "base") at the end.
#
# VARIANTS="OPTIONS|OPTIONS|..." runs this tree alone under several sets of fit options instead (no
# .base/): the first is named "base", the others by their options, their order rotating by seed so
# that none always runs first -- `VARIANTS="--replicas 2|--replicas 1|--replicas 3"`.
#
# LOCAL=1 runs it on this machine instead (its .venv's python, the trees staged under /tmp, results
# in $OUT or ./pairs-out): lavapipe's 12 s command is `LOCAL=1 bash tools/device_cli_pairs.sh "" 0,1,2 12`.
#
#   [VARIANTS=...] bash tools/device_cli_pairs.sh [IMAGES] [SEEDS] [SECONDS]   # defaults: the two samples, 0-5, 1
set -e
IMAGES=${1:-astronaut.png,chelsea.png}
SEEDS=${2:-0,1,2,3,4,5}
SECONDS_=${3:-1}
if [ -z "${VARIANTS:-}" ]; then
  [ -d .base/render ] || { echo "no .base/ tree: git archive --prefix=.base/ COMMIT | tar -x" >&2; exit 2; }
fi
if [ "${LOCAL:-0}" = 1 ]; then
  OUT=${OUT:-pairs-out}; mkdir -p "$OUT"
  PATH="$PWD/.venv/bin:$PATH"  # (python3: the venv's, with wgpu and numpy)
  NEW=$(bash tools/stage_package.sh /tmp/trifit-new)
  [ -n "${VARIANTS:-}" ] || BASE=$(bash .base/tools/stage_package.sh /tmp/trifit-base)
  { python3 -c "from trifit.gpu.device import get_context; print(get_context().describe())"; date -u; } | tee "$OUT/env.txt"
else
  . tools/device_env.sh  # the Vulkan loader, the wheels, trifit staged with bytecode (tools/device_env.sh)
  mkdir -p "$OUT"
  NEW="$PYTHONPATH"
  if [ -z "${VARIANTS:-}" ]; then
    BASE="/tmp/site:$(bash .base/tools/stage_package.sh /tmp/trifit-base)"
    device_compile /tmp/trifit-base
  fi
  # (no commit here: the lent machine's copy of .git can lag behind the tree it was sent; name the trees yourself)
  { nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } | tee "$OUT/env.txt"
fi
# the runs of a seed: NAMES[i] on PATHS[i] with OPTS[i]
if [ -n "${VARIANTS:-}" ]; then
  IFS='|' read -r -a OPTS <<< "$VARIANTS"
  NAMES=(); PATHS=()
  for ((i = 0; i < ${#OPTS[@]}; i++)); do
    NAMES+=("$([ "$i" = 0 ] && echo base || echo "${OPTS[$i]// /}")"); PATHS+=("$NEW")
  done
else
  NAMES=(base new); PATHS=("$BASE" "$NEW"); OPTS=("" "")
fi
n=${#NAMES[@]}
k=0
rm -rf /tmp/pairs; mkdir -p /tmp/pairs
for seed in ${SEEDS//,/ }; do
  for ((j = 0; j < n; j++)); do
    v=$(((j + k) % n))
    PYTHONPATH="${PATHS[$v]}" python3 tools/cli_fits.py --images "$IMAGES" --time-limit "$SECONDS_" --runs 1 \
      --seed "$seed" --fit-args "${OPTS[$v]}" --json "/tmp/pairs/${NAMES[$v]} $seed.json" | sed "s/^/${NAMES[$v]} seed $seed: /"
  done
  k=$((k + 1))
done 2>&1 | tee "$OUT/pairs.txt"
python3 -c "import json, pathlib
print(json.dumps({f.stem: json.loads(f.read_text()) for f in sorted(pathlib.Path('/tmp/pairs').glob('*.json'))}))" \
  > "$OUT/pairs.json"
python3 tools/pair_summary.py "$OUT/pairs.json" | tee -a "$OUT/pairs.txt"
