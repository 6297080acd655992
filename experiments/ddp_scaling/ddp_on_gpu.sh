#!/usr/bin/env bash
# DDP scaling of the example's SFT workload on this machine's first two GPUs, in phases that each fit one
# 10-minute call. A fresh git copy of the example repository gets an `sft_ddp` workload (the SFT command under
# `torchrun --standalone --nproc-per-node 2`, gpus = 2) beside its 1-GPU `sft`; then `bot apply --tier 1`, and
# the ddp_static_graph transform as one more commit. Then, by PHASE:
#   one  the 1-GPU `sft` workload at the baseline and the tier-1 head, in one interleaved `bot bench`;
#   two  the 2-GPU `sft_ddp` workload at the baseline, the tier-1 head and ddp_static_graph, in one `bot bench`;
#   all  (default) one, then two;
#   dpo  no bench: `torchrun --standalone --nproc-per-node 2 train_dpo.py` at the tier-1 head (does the DPO
#        workload run under DDP?), logged to dpo_ddp.log; the script fails when it does.
# Several parts run in one call when joined by commas, in that order: PHASE=one,dpo.
# Every bench runs REPEATS measured rounds after WARMUP_ROUNDS discarded ones (default 1, they also warm the
# GPUs) and is stopped with SIGINT after TIME_LIMIT seconds (default 540); runs finished before the limit are
# kept. $OUT (default ./ddp-out) receives at most 8 files: roles.json (full sha -> baseline / tier-1 head /
# ddp_static_graph; shas differ between calls), one.json / two.json (the results JSONs), one.log / two.log
# (bench output), dpo_ddp.log, runs.tar.gz (runs/<sha12-workload-rREPEAT>/ metrics.json, log.txt = the last 40
# lines of the run's log, ddp_check.txt = its "DDP static graph" lines; negative repeats are warm-up runs) and
# summary.txt, the output of `python3 -m experiments.ddp_scaling.ddp_summary $OUT`. Summarise several calls
# together with `python3 -m experiments.ddp_scaling.ddp_summary DIR1 DIR2`. NCCL_NVLS_ENABLE and the rest of the
# environment are passed on as the caller set them.
# Usage: [PHASE=one|two|all|dpo|one,dpo] [SIZE=gpu] [WARMUP_ROUNDS=1] [TIME_LIMIT=540]
#        experiments/ddp_scaling/ddp_on_gpu.sh [STEPS] [REPEATS]
#   e.g. PHASE=two experiments/ddp_scaling/ddp_on_gpu.sh 20 3
set -euo pipefail
steps=${1:-20}
repeats=${2:-3}
phase=${PHASE:-all}
warmup_rounds=${WARMUP_ROUNDS:-1}
time_limit=${TIME_LIMIT:-540}
[[ $phase == all ]] && phase=one,two
for part in ${phase//,/ }; do
    case "$part" in
    one | two | dpo) ;;
    *)
        echo "PHASE must be one, two, all or dpo, or several joined by commas (got '$phase')" >&2
        exit 2
        ;;
    esac
done
wants() { [[ ,$phase, == *,$1,* ]]; }  # PHASE names this part
perfbot=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$PWD/ddp-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT  # the temporary repository, its worktrees and the archive staging
work=$tmp/example-trainer
export PYTHONPATH="$perfbot${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export PERFBOT_EXAMPLE_CACHE=${PERFBOT_EXAMPLE_CACHE:-/tmp/perfbot-example-cache}
cp -r "$perfbot/examples/trainer_repo" "$work"
cd "$work"
cat >> pyproject.toml <<'TOML'

[tool.bot.workloads.sft_ddp]
command = "torchrun --standalone --nproc-per-node 2 train_sft.py --size {size} --max-steps {steps} --seed {seed}"
steps = 8
warmup_steps = 2
repeats = 3
primary = "tokens_per_s"
timeout_s = 300
gpus = 2
TOML
identity=(-c user.name=bench -c user.email=bench@localhost)
git init -q -b main && git add -A && git "${identity[@]}" commit -qm "example trainer"
baseline=$(git rev-parse HEAD)
python3 -m bot.cli apply --tier 1 >/dev/null
tier1=$(git rev-parse HEAD)
python3 -c "from optimizations.registry import get; get('ddp_static_graph').apply('.')"
git add -A && git "${identity[@]}" commit -qm "perf(ddp): static DDP graph once the first batch shows no unused parameter" \
    -m "Bot-Optimization: ddp_static_graph"
ddp=$(git rev-parse HEAD)
echo "phase $phase: baseline $baseline tier1 $tier1 ddp_static_graph $ddp"
python3 -c 'import json, sys; print(json.dumps(dict(zip(sys.argv[1::2], sys.argv[2::2])), indent=2))' \
    "$baseline" baseline "$tier1" "tier-1 head" "$ddp" ddp_static_graph > "$out/roles.json"
git log --format='%h %s' main..HEAD

status=0
bench() {  # NAME REV... OPTIONS...: one `bot bench` under the time limit; its results JSON and output kept
    local name=$1 code=0
    shift
    timeout -s INT -k 15 "$time_limit" python3 -m bot.cli bench "$@" --size "${SIZE:-gpu}" --steps "$steps" \
        --repeats "$repeats" --warmup-rounds "$warmup_rounds" > "$out/$name.log" 2>&1 || code=$?
    if ((code == 124)); then
        echo "[ddp_on_gpu] bench $name stopped at its ${time_limit} s time limit" | tee -a "$out/$name.log"
    fi
    echo "bench $name: exit status $code"
    ((code == 0)) || status=$code
    for results in .bot/results/*.json; do  # absent when the bench was stopped before it finished
        if [[ -e $results ]]; then
            cp "$results" "$out/$name.json"
            rm -f "$results"
        fi
    done
}
if wants one; then
    bench one "$baseline" "$tier1" --workload sft
fi
if wants two; then
    bench two "$baseline" "$tier1" "$ddp" --workload sft_ddp
fi
if wants dpo; then
    git worktree add -q --detach "$tmp/dpo" "$tier1"
    code=0
    (cd "$tmp/dpo" && timeout -s INT -k 15 "$time_limit" torchrun --standalone --nproc-per-node 2 train_dpo.py \
        --size "${SIZE:-gpu}" --max-steps 5) > "$out/dpo_ddp.log" 2>&1 || code=$?
    echo "[ddp_on_gpu] DPO under torchrun (2 processes) at the tier-1 head ${tier1:0:12}: exit status $code" |
        tee -a "$out/dpo_ddp.log"
    ((code == 0)) || status=$code
fi

# every run of every bench, also of one cut short: metrics, log tail and the ddp_static_graph check lines, by
# job key (sha12-workload-rREPEAT), in one archive
mkdir -p "$tmp/archive/runs"
for run in .bot/bench/bench-*/runs/*/; do
    [[ -d $run ]] || continue
    key=$(basename "$run")
    dest="$tmp/archive/runs/$key"
    mkdir -p "$dest"
    cp "$run/metrics.json" "$dest/" 2>/dev/null || true
    tail -n 40 "$run/log.txt" > "$dest/log.txt" 2>/dev/null || true
    grep -ho "DDP static graph.*" "$run/log.txt" 2>/dev/null | sort | uniq -c > "$dest/ddp_check.txt" || true
    [[ -s $dest/ddp_check.txt ]] || rm -f "$dest/ddp_check.txt"
done
tar -czf "$out/runs.tar.gz" -C "$tmp/archive" runs

python3 -m experiments.ddp_scaling.ddp_summary "$out" > "$out/summary.txt" 2>&1 || status=$((status ? status : 1))
cat "$out/summary.txt"
files=$(find "$out" -type f | wc -l)
if ((files > 8)); then
    echo "warning: $out holds $files files; only 8 come back from a device call" >&2
fi
exit $status
