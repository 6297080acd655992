#!/usr/bin/env bash
# `bot calibrate` (the planted-effects self-check) on a fresh git copy of the example repository, at a chosen
# size, on this machine; the summary and a tarball of each trial's results JSON go to $OUT (default:
# ./calibrate-out).
# Usage: experiments/calibration/calibrate.sh SIZE [bot calibrate options...]
#   e.g. experiments/calibration/calibrate.sh tiny --workload loop --trials 20     (CPU)
#        experiments/calibration/calibrate.sh gpu --workload loop --trials 20      (GPU)
set -euo pipefail
size=${1:?size: tiny or gpu}
shift
perfbot=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$PWD/calibrate-out}
work=$(mktemp -d)/example-trainer
export PYTHONPATH="$perfbot${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export PERFBOT_EXAMPLE_CACHE=${PERFBOT_EXAMPLE_CACHE:-/tmp/perfbot-example-cache}
mkdir -p "$out"
cp -r "$perfbot/examples/trainer_repo" "$work"
rm -rf "$work/outputs" "$work/.bot" "$work/__pycache__"
cd "$work"
git init -q -b main && git add -A && git -c user.name=bench -c user.email=bench@localhost commit -qm "example trainer"
status=0
python3 -m bot.cli calibrate --size "$size" "$@" || status=$?
cp .bot/calibrate/*/summary.json "$out/" 2>/dev/null || true
tar czf "$out/trials.tgz" --exclude=bench --exclude=repo -C .bot calibrate 2>/dev/null || true
exit $status
