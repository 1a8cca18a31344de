#!/usr/bin/env bash
# The issue-#5 command (tools/cli_fits.py: fresh processes) with several sets of fit options on this
# tree, in one call on a lent GPU machine: for each seed, each image runs once under every variant,
# the variants' order rotating by seed so that none always runs first. The first variant is named
# "base" in the rows, the others by their options. Carry .whl/ and .gl/ (tools/device_env.sh) and
# any image folder named in IMAGES. The rows land in $OUT/variants.json ({"VARIANT SEED": rows}) and
# the lines in $OUT/variants.txt, with tools/pair_summary.py's summary (each variant against the
# first) at the end.
#
#   bash tools/device_cli_variants.sh "--replicas 1|--replicas 2|--replicas 3" [IMAGES] [SEEDS] [SECONDS]
set -e
IFS='|' read -r -a VARIANTS <<< "$1"
IMAGES=${2:-astronaut.png,chelsea.png}
SEEDS=${3:-0,1,2,3,4,5}
SECONDS_=${4:-1}
. tools/device_env.sh  # the Vulkan loader, the wheels, trifit staged with bytecode (tools/device_env.sh)
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } | tee "$OUT/env.txt"
n=${#VARIANTS[@]}
k=0
rm -rf /tmp/variants; mkdir -p /tmp/variants
for seed in ${SEEDS//,/ }; do
  for ((j = 0; j < n; j++)); do
    v=$(((j + k) % n))
    name=$([ "$v" = 0 ] && echo base || echo "${VARIANTS[$v]// /}")
    python3 tools/cli_fits.py --images "$IMAGES" --time-limit "$SECONDS_" --runs 1 --seed "$seed" \
      --fit-args "${VARIANTS[$v]}" --json "/tmp/variants/$name $seed.json" | sed "s/^/$name seed $seed: /"
  done
  k=$((k + 1))
done 2>&1 | tee "$OUT/variants.txt"
python3 -c "import json, pathlib
print(json.dumps({f.stem: json.loads(f.read_text()) for f in sorted(pathlib.Path('/tmp/variants').glob('*.json'))}))" \
  > "$OUT/variants.json"
python3 tools/pair_summary.py "$OUT/variants.json" | tee -a "$OUT/variants.txt"
