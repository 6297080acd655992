#!/usr/bin/env bash
# Host-time accounting of the example's tier-2 head on this machine's GPU (benchmarks.host_time): the SFT
# levers of levers.py (host time by source, each run's own metered step time), torch.profiler runs of some of
# them (device time, launches, host time in CUDA API calls), DPO, and the hand-written ceiling
# (benchmarks.ceiling, run first) in the same run. Results under $OUT (all of it in $OUT/host_time.tgz),
# summary.txt last.
# Usage: [ROUNDS=N] experiments/host_time/run.sh [LEVERS] [PROFILED LEVERS] [STEPS] [dpo] [ceiling]
#   e.g. ROUNDS=2 experiments/host_time/run.sh "none compile-decoder dpo:none dpo:compile-decoder" "none" 20 ceiling
set -uo pipefail
levers=${1:-"none no-step-metrics log-every-10"}
profiled=${2:-""}
steps=${3:-20}
shift $(($# < 3 ? $# : 3))
skip=10
source "$(dirname "$0")/../example_repo.sh"
example_repo host-time-out experiments/host_time/levers.py
python3 -m bot.cli apply --tier 1 > "$out/apply.txt" 2>&1
python3 -m bot.cli apply --tier 2 >> "$out/apply.txt" 2>&1
git log --format='%h %s' > "$out/commits.txt"
pack() {  # one file for the device to hand back, written beside and moved in
    tar czf "$work/../host_time.tgz" -C "$out" --exclude=host_time.tgz --exclude=trace.json . && mv "$work/../host_time.tgz" "$out/"
}
account() {  # NAME COMMAND...: host time of COMMAND's steps skip+1..skip+steps
    local name=$1
    shift
    timeout 420 python3 -m benchmarks.profiling --host-time --out "$out/$name" --skip $skip --steps "$steps" \
        -- "$@" > "$out/$name.log" 2>&1 || echo "$name failed" >> "$out/summary.txt"
    { echo "== $name"; grep -A40 '^host time per step' "$out/$name.log"; } >> "$out/summary.txt"
    pack
}
python3 train_sft.py --size gpu --max-steps 2 > "$out/warm.log" 2>&1  # the model cache, compiled kernels
if [[ " $* " == *" ceiling "* ]]; then  # first: a call that runs out of time still has its machine's ceiling
    python3 -m benchmarks.ceiling --size gpu --steps 30 --warmup 10 --modes reduce-overhead --json \
        > "$out/ceiling.json" 2> "$out/ceiling.log" || echo "ceiling failed" >> "$out/summary.txt"
    pack
fi
for round in $(seq 1 "${ROUNDS:-1}"); do  # interleaved rounds: a drift of the machine hits every lever alike
    for lever in $levers; do
        workload=${lever%%:*}  # a lever may be prefixed with its workload: dpo:compile-decoder
        [[ $workload == "$lever" ]] && workload=sft
        name=$workload-${lever#*:}
        PERFBOT_WORKLOAD=$workload PERFBOT_LEVER=${lever#*:} account "${name//,/_}-$round" \
            python3 levers.py --size gpu --max-steps $((skip + steps + 2))
    done
done
for lever in $profiled; do
    name=profile-${lever//,/_}
    PERFBOT_LEVER=$lever timeout 300 python3 -m benchmarks.profiling --out "$out/$name" --skip $skip --steps 5 \
        -- python3 levers.py --size gpu --max-steps $((skip + 8)) > "$out/$name.log" 2>&1 || echo "$name failed" >> "$out/summary.txt"
    pack
done
if [[ " $* " == *" dpo "* ]]; then
    account dpo python3 train_dpo.py --size gpu --max-steps $((skip + steps + 2))
fi
python3 - "$out" <<'PY' | tee -a "$out/summary.txt"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
for path in sorted(out.glob("*/host_time.json")):
    data = json.loads(path.read_text())
    step = data["meter_step_s"]
    rate = data.get("meter_tokens_per_s") or 0
    print(f"{path.parent.name:40} sampled {data['step_ms']:7.1f} ms/step, metered {step * 1000 if step else float('nan'):7.1f} ms, {rate:,.0f} tokens/s")
for path in sorted(out.glob("profile-*/profile.json")):
    data = json.loads(path.read_text())
    print(f"{path.parent.name:40} profiled {data['step_ms']:7.1f} ms/step, kernels {data['device_busy_ms'] or 0:6.1f} ms, "
          f"{data['launches_per_step']:.0f} launches; API: " + ", ".join(f"{k} {v:.1f}" for k, v in list(data["runtime_ms"].items())[:4]))
ceiling = out / "ceiling.json"
if ceiling.exists() and ceiling.read_text().strip():
    for mode in json.loads(ceiling.read_text())["modes"]:
        print(f"ceiling {mode['mode']:32} {mode['step_ms']:7.1f} ms/step, {mode['tokens_per_s']:,.0f} tokens/s")
PY
pack
