#!/usr/bin/env bash
# Where the run-to-run spread of the example's `loop` workload comes from: back-to-back runs of one program in
# one folder, each in its own process under the launch wrapper (as `bot bench` runs them), with GPU telemetry
# (SM clock, power, temperature, throttle reasons, utilisation; nvidia-smi every 250 ms) where there is a GPU.
# Usage: experiments/calibration/process_spread.sh SIZE MODE
#   MODE blocks: 4 runs, 4 with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, 4 more (labels plain,
#                expandable, plain2)
#   MODE pinned: 6 rounds of one unpinned run and one pinned to CPUs 2-9 (taskset), interleaved
#   MODE forked: 6 rounds of one fresh run and one forked from a warm interpreter (warm_fork.py), interleaved
# Runs' metrics and logs, the telemetry and a summary (experiments/calibration/spread.py) go to $OUT/spread.
set -euo pipefail
size=${1:?size: tiny or gpu}
mode=${2:?mode: blocks, pinned or forked}
source "$(dirname "$0")/../example_repo.sh"
OUT=${OUT:-$PWD}/spread example_repo spread
telemetry=
if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active,utilization.gpu \
        --format=csv,noheader -lms 250 > "$out/smi.csv" &
    telemetry=$!
fi
python3 -c "from model_loading import load_model, load_tokenizer; load_model('$size'); load_tokenizer('$size')" > "$out/cache.log" 2>&1

measure() {  # LABEL [COMMAND PREFIX...]: one run, timed from outside too
    local label=$1
    shift
    date +%s.%N > "$out/$label.start"
    "$@" python3 -m benchmarks.launch --out "$out/$label.json" --warmup-steps 2 -- \
        python3 train_loop.py --size "$size" --max-steps 47 --seed 0 > "$out/$label.log" 2>&1 || true
    date +%s.%N > "$out/$label.end"
}

case $mode in
blocks)
    for i in 1 2 3 4; do measure "plain-$i"; done
    for i in 1 2 3 4; do measure "expandable-$i" env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; done
    for i in 1 2 3 4; do measure "plain2-$i"; done
    ;;
pinned)
    for i in 1 2 3 4 5 6; do
        measure "free-$i"
        measure "pinned-$i" taskset -c 2-9
    done
    ;;
forked)
    python3 -m experiments.calibration.warm_fork "$out" "$size" "${PAIRS:-6}" > "$out/warm_fork.log" 2>&1
    ;;
*) echo "unknown mode $mode (blocks, pinned or forked)" >&2; exit 2 ;;
esac
[ -n "$telemetry" ] && kill "$telemetry"
lscpu > "$out/lscpu.txt"
python3 -m experiments.calibration.spread "$out" | tee "$out/summary.txt"
