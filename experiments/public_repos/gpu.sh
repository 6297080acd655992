#!/bin/bash
# On the device: install the carried wheels (perfbot itself runs from this working tree, not from its wheel),
# then measure both public repositories of experiments/public_repos at --size gpu, from the snapshots carried in
# .whl/public_repos/ (made by experiments/public_repos/snapshot.sh), within about 8 minutes; a short table last.
# Usage: bash experiments/public_repos/gpu.sh   (results under $OUT/nanogpt and $OUT/minimind)
set -u
start=$(date +%s)
# shellcheck source=experiments/device_env.sh
source experiments/device_env.sh
export PUBLIC_REPOS_SNAPSHOTS=$PWD/.whl/public_repos
out=${OUT:-/tmp/public-out}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
elapsed() { echo $(( $(date +%s) - start )); }
# nanoGPT: perfbot finds its tiers' work already done (CPU dry run), so one run of the baseline; the compile of
# the first run is most of it.
experiments/public_repos/measure.sh nanogpt gpu "$out/nanogpt" \
    --steps 250 --repeats 1 --max-repeats 1 --min-time 0 --time-budget 120
echo "nanogpt done at $(elapsed) s"
# MiniMind: baseline and both tier heads, rounds added while they fit in what is left of 7.5 minutes (about a
# minute of it for preparing and applying).
budget=$(( 450 - $(elapsed) - 60 ))
[ "$budget" -lt 90 ] && budget=90
experiments/public_repos/measure.sh minimind gpu "$out/minimind" \
    --steps 20 --repeats 1 --max-repeats 4 --min-time 0 --time-budget "$budget"
echo "minimind done at $(elapsed) s"
for name in nanogpt minimind; do
    echo "== $name: $(wc -l < "$out/$name/commits.txt") commit(s) by tiers 1 and 2"
    cat "$out/$name/commits.txt"
done
python3 -m experiments.public_repos.table "$out"
