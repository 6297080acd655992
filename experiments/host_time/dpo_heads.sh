#!/usr/bin/env bash
# The example's DPO workload at three commits on one GPU: the base, the tier-2 head without packed pairs (the
# plan's "padding-free DPO" phrase removed before `bot apply`), and the tier-2 head as `bot apply` makes it. Each
# runs under `benchmarks.profiling --utilization`: metered step, tokens/s, NVML busy share, and the logged losses.
#
#     OUT=/tmp/out experiments/host_time/dpo_heads.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export OUT=${OUT:-$PWD/dpo-heads}
source "$root/experiments/example_repo.sh"
run() {  # name skip steps limit
  local name=$1 start=$(date +%s)
  PERFBOT_WORKLOAD=dpo PERFBOT_LEVER=none timeout "$4" python3 -m benchmarks.profiling --utilization --skip "$2" \
    --steps "$3" --out "$OUT/$name" -- python3 levers.py --size gpu --max-steps $(($2 + $3 + 2)) \
    > "$OUT/$name.log" 2>&1 || echo "$name failed rc=$?"
  echo "== $name: wall $(( $(date +%s) - start )) s"
  python3 -c "import json; d = json.load(open('$OUT/$name/utilization.json')); print('step %.1f ms, %.0f tokens/s, busy %s%%' % (1000 * d['meter_step_s'], d['meter_tokens_per_s'], d['median_percent']))" 2>/dev/null
  grep -o "'loss': '[0-9.]*'" "$OUT/$name.log" | sed "s/'loss': //" | head -16 | tr '\n' ' '; echo
}
apply_tiers() {
  python3 -m bot.cli apply --tier 1 > "$OUT/apply-$1.txt" 2>&1 && python3 -m bot.cli apply --tier 2 >> "$OUT/apply-$1.txt" 2>&1
}
cd "$root" && example_repo dpo-heads experiments/host_time/levers.py
python3 - <<'PY'
import pathlib
plan = pathlib.Path("PLAN.md")
phrase = ", padding-free DPO with each step's pairs in one row"
assert phrase in plan.read_text(), "the example's plan no longer names packed pairs"
plan.write_text(plan.read_text().replace(phrase, ""))
PY
git commit -qam "plan without packed pairs" && apply_tiers per-layer && run head-per-layer 10 30 150
cd "$root" && example_repo dpo-heads experiments/host_time/levers.py
apply_tiers packed && run head-packed 15 60 "${LIMIT:-300}"
git checkout -q "$(git rev-list --max-parents=0 HEAD)" && run base 5 20 150
