#!/usr/bin/env bash
# Host-overhead levers on the example's SFT LoRA workload at the tier-1 head, on this machine's GPU:
# interleaved repeats of each lever under benchmarks.launch, then one torch.profiler run of each.
# Usage: experiments/host_overhead/run.sh [LEVERS] [REPEATS] [STEPS]   (results under $OUT)
#   e.g. experiments/host_overhead/run.sh "none bf16-adapters regional-compile bf16-adapters,regional-compile" 2 30
set -euo pipefail
levers=${1:-"none bf16-adapters regional-compile bf16-adapters,regional-compile"}
repeats=${2:-2}
steps=${3:-30}
source "$(dirname "$0")/../example_repo.sh"
example_repo host-overhead-out experiments/host_overhead/levers.py
python3 -m bot.cli apply --tier 1 > "$out/apply.txt" 2>&1 || true
python3 train_sft.py --size gpu --max-steps 2 > /dev/null 2>&1  # build the model cache, warm the GPU
pack() {  # one file for the device to hand back (it returns a few files at most), written beside and moved in
    tar czf "$work/../levers.tgz.part" -C "$out" --exclude=levers.tgz --exclude=trace.json . && mv "$work/../levers.tgz.part" "$out/levers.tgz"
}
for round in $(seq 1 "$repeats"); do
    for lever in $levers; do
        name=${lever//,/+}
        PERFBOT_LEVER=$lever timeout 300 python3 -m benchmarks.launch --out "$out/$name-$round.json" --warmup-steps 8 \
            -- python3 levers.py --size gpu --max-steps "$steps" > "$out/$name-$round.log" 2>&1 || echo "$name round $round failed"
    done
    pack
    python3 "$perfbot/experiments/host_overhead/summary.py" "$out" $levers > "$out/summary.txt" 2>&1 || true
done
for lever in $levers; do
    name=${lever//,/+}
    PERFBOT_LEVER=$lever timeout 300 python3 -m benchmarks.profiling --out "$out/profile-$name" --skip 8 --steps 5 \
        -- python3 levers.py --size gpu --max-steps 16 > "$out/profile-$name.log" 2>&1 || echo "profile $name failed"
    pack
done
python3 "$perfbot/experiments/host_overhead/summary.py" "$out" $levers
