#!/usr/bin/env bash
# DDP scaling of the example's SFT workload on this machine's first two GPUs: a fresh git copy of the example
# repository gets an `sft_ddp` workload (the SFT command under `torchrun --standalone --nproc-per-node 2`,
# gpus = 2) beside its 1-GPU `sft`; then `bot apply --tier 1`, and the ddp_static_graph transform as one more
# commit. `sft` is measured at the baseline and the tier-1 head (SFT_WARMUP_ROUNDS discarded rounds first, default
# 1, which also warm the machine), then `sft_ddp` at the tier-1 head and the ddp_static_graph commit, then at the
# baseline. Each bench has a time limit (SFT_TIME, DDP_TIME, BASELINE_TIME seconds); runs finished before a
# limit are kept. Results JSONs, every run's metrics and log tail, and a summary (medians, all-reduce wait,
# scaling efficiency = 2-GPU tokens/s / (2 x 1-GPU tokens/s)) go to $OUT (default ./ddp-out).
# Usage: [SIZE=gpu] benchmarks/ddp_on_gpu.sh [STEPS] [REPEATS]    e.g. benchmarks/ddp_on_gpu.sh 20 2
set -euo pipefail
steps=${1:-20}
repeats=${2:-2}
perfbot=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$PWD/ddp-out}
work=$(mktemp -d)/example-trainer
export PYTHONPATH="$perfbot${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export PERFBOT_EXAMPLE_CACHE=${PERFBOT_EXAMPLE_CACHE:-/tmp/perfbot-example-cache}
mkdir -p "$out"
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
echo "baseline $baseline tier1 $tier1 ddp_static_graph $ddp"
status=0
common=(--size "${SIZE:-gpu}" --steps "$steps")
bench() {  # NAME TIME_LIMIT REV... OPTIONS...: one `bot bench`, its results JSON and log kept under $out
    local name=$1 limit=$2
    shift 2
    timeout -s INT -k 15 "$limit" python3 -m bot.cli bench "$@" "${common[@]}" > "$out/$name.log" 2>&1 || status=$?
    cp .bot/results/*.json "$out/$name.json" 2>/dev/null || true
    rm -f .bot/results/*.json
}
# 1 GPU (its first round also warms the machine), then 2 GPUs: the transform's effect, then the baseline
bench sft "${SFT_TIME:-200}" "$baseline" "$tier1" --workload sft --repeats "${SFT_REPEATS:-$repeats}" \
    --warmup-rounds "${SFT_WARMUP_ROUNDS:-1}"
bench sft_ddp "${DDP_TIME:-300}" "$tier1" "$ddp" --workload sft_ddp --repeats "$repeats"
bench sft_ddp_baseline "${BASELINE_TIME:-150}" "$baseline" --workload sft_ddp --repeats "${BASELINE_REPEATS:-$repeats}"
# every finished run, also of a bench cut short: metrics and log tail, by job key (sha12-workload-rREPEAT)
mkdir -p "$out/runs"
for run in .bot/bench/bench-*/runs/*/; do
    key=$(basename "$run")
    cp "$run/metrics.json" "$out/runs/$key.json" 2>/dev/null || true
    tail -n 40 "$run/log.txt" > "$out/runs/$key.log" 2>/dev/null || true
    grep -h "DDP static graph" "$run/log.txt" | sort | uniq -c > "$out/runs/$key.ddp" 2>/dev/null || true
done
python3 - "$out" "$baseline" "$tier1" "$ddp" <<'PY'
import json, statistics, sys
from pathlib import Path

out, baseline, tier1, ddp = sys.argv[1:]
names = {baseline: "baseline", tier1: "tier-1 head", ddp: "ddp_static_graph"}
runs = {}
for path in sorted(Path(out, "runs").glob("*.json")):
    sha12, workload, repeat = path.stem.split("-", 1)[0], *path.stem.split("-", 1)[1].rsplit("-r", 1)
    if int(repeat) >= 0:
        runs.setdefault((sha12, workload), []).append(json.loads(path.read_text()))
medians = {}
for workload in ("sft", "sft_ddp"):
    for sha, name in names.items():
        records = runs.get((sha[:12], workload), [])
        if not records:
            continue
        ok = [m for m in records if m["status"] == "ok"]
        tokens = [m["tokens_per_s"] for m in ok]
        medians[(workload, sha)] = statistics.median(tokens) if tokens else None
        static = Path(out, "runs").glob(f"{sha[:12]}-{workload}-r[0-9]*.ddp")
        print(json.dumps({
            "workload": workload, "commit": f"{name} {sha[:7]}", "tokens_per_s": [round(t) for t in tokens],
            "median": medians[(workload, sha)], "failed": [m["status"] for m in records if m["status"] != "ok"],
            "step_s": [round(m["step_time_s"]["median"], 4) for m in ok],
            "backward_ms": [round(m["phases"]["backward"]["median_ms"], 1) for m in ok],
            "allreduce_wait_ms": [round((m.get("allreduce_wait") or {}).get("median_ms") or 0, 2) for m in ok],
            "peak_gb": [round(m["peak_memory_bytes"] / 1e9, 2) for m in ok if m.get("peak_memory_bytes")],
            "mfu": [round(m["mfu"], 4) for m in ok if m.get("mfu") is not None],
            "world_size": sorted({m.get("world_size") or 1 for m in ok}),
            "ddp_check_log": sorted({line.strip() for p in static for line in p.read_text().splitlines()}),
        }))
for sha, name in names.items():
    one = medians.get(("sft", tier1 if sha == ddp else sha))
    two = medians.get(("sft_ddp", sha))
    if one and two:
        print(f"scaling efficiency {name}: {two:.0f} / (2 x {one:.0f}) = {two / (2 * one):.3f}")
PY
git log --format='%h %s' main..HEAD
exit $status
