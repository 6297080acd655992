#!/usr/bin/env bash
# `bot calibrate` (the planted-effects self-check) on a fresh git copy of the example repository, at a chosen
# size, on this machine; the summary and a tarball of each trial's results JSON go to $OUT (default:
# ./calibrate-out).
# Usage: experiments/calibration/calibrate.sh SIZE [bot calibrate options...]
#   e.g. experiments/calibration/calibrate.sh tiny --workload loop --trials 20     (CPU)
#        experiments/calibration/calibrate.sh gpu --workload loop --trials 20      (GPU)
#        TIERS="1 2" experiments/calibration/calibrate.sh gpu --workload vision --trials 1 --slowdown 0.05
#   TIERS: `bot apply --tier N` for each, in order, before calibrating (the self-check then benches the head)
set -euo pipefail
size=${1:?size: tiny or gpu}
shift
source "$(dirname "$0")/../example_repo.sh"
example_repo calibrate-out
for tier in ${TIERS:-}; do
    python3 -m bot.cli apply --tier "$tier" > "$out/apply-tier$tier.txt" 2>&1
done
status=0
python3 -m bot.cli calibrate --size "$size" "$@" || status=$?
cp .bot/calibrate/*/summary.json "$out/" 2>/dev/null || true
tar czf "$out/trials.tgz" --exclude=bench --exclude=repo -C .bot calibrate 2>/dev/null || true
exit $status
