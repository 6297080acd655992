#!/usr/bin/env bash
# The example's tiers 1 and 2 on this machine's GPU: `bot apply --tier 1`, then `--tier 2` on top, then
# `bot bench` of the baseline, the tier-1 head and the tier-2 head with the given options (e.g. --profile).
# Everything lands in $OUT/tiers.tgz (the device returns few files), kept current after each stage.
# Usage: experiments/host_overhead/tiers.sh [bot bench options...]
#   e.g. experiments/host_overhead/tiers.sh --workload sft --size gpu --repeats 2 --time-budget 330 --profile 5
set -uo pipefail
source "$(dirname "$0")/../example_repo.sh"
example_repo tiers-out
baseline=$(git rev-parse HEAD)
python3 -m bot.cli apply --tier 1 > "$out/apply.txt" 2>&1
tier1=$(git rev-parse HEAD)
python3 -m bot.cli apply --tier 2 >> "$out/apply.txt" 2>&1
tier2=$(git rev-parse HEAD)
git log --format='%h %s' "$baseline..$tier2" > "$out/commits.txt"
pack() {
    cp .bot/results/*.json "$out/" 2>/dev/null
    cp -r .bot/profiles "$out/" 2>/dev/null
    tar czf "$work/../tiers.tgz" -C "$out" --exclude=trace.json --exclude=tiers.tgz . && mv "$work/../tiers.tgz" "$out/tiers.tgz"
}
pack
python3 -m bot.cli bench "$baseline" "$tier1" "$tier2" "$@" > "$out/bench.txt" 2>&1
echo "bench exit $?" >> "$out/bench.txt"
pack
tail -25 "$out/bench.txt"
