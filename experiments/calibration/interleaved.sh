#!/usr/bin/env bash
# The planted-effects self-check with the round's runs taking turns (`bot calibrate --interleave N`), with the
# machine's CPU, NUMA and GPU topology beside it, and the spread of the trials by window, run and round
# (experiments/calibration/windows.py). Trials' results JSON go to $OUT/trials (default ./interleaved-out).
# Usage: experiments/calibration/interleaved.sh SIZE [bot calibrate options...]
#   e.g. experiments/calibration/interleaved.sh gpu --workload loop --trials 1 --interleave 6 --slowdown 0.05
set -euo pipefail
size=${1:?size: tiny or gpu}
shift
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$PWD/interleaved-out}
mkdir -p "$out"
{
    lscpu
    if command -v numactl > /dev/null; then numactl -H; fi
    if command -v nvidia-smi > /dev/null; then nvidia-smi topo -m; fi
} > "$out/topology.txt" 2>&1 || true
status=0
OUT="$out" "$here/calibrate.sh" "$size" --out "$out/trials" "$@" || status=$?
(cd "$here/../.." && python3 -m experiments.calibration.windows "$out/trials") | tee "$out/windows.txt"
exit $status
