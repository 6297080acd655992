#!/usr/bin/env bash
# `bot apply --tier 1 --bench` on a fresh git copy of the example repository, at a chosen size, on this
# machine's GPUs; the results JSON and the four comments are copied to $OUT (default: ./bench-out).
# Usage: experiments/example_tier1/example_on_gpu.sh SIZE [bot apply options...]
#   e.g. experiments/example_tier1/example_on_gpu.sh gpu --workload sft --repeats 3 --steps 30
set -euo pipefail
size=${1:?size: tiny or gpu}
shift
source "$(dirname "$0")/../example_repo.sh"
example_repo bench-out
status=0
python3 -m bot.cli apply --tier 1 --bench --size "$size" "$@" || status=$?
cp .bot/results/*.json "$out/" 2>/dev/null || true
for kind in progress results reviewer-verdict note; do
    cp ".bot/issues/plan/$kind.md" "$out/$kind.md" 2>/dev/null || true
done
git log --format='%h %s' main..HEAD
exit $status
