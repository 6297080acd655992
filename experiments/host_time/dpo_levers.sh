#!/usr/bin/env bash
# The example's DPO workload at its tier-2 head (as `bot apply --tier 1` and `--tier 2` make it) with levers of
# experiments/host_time/levers.py pulled, and at its base commit, in one copy of the example kept for the machine
# (/tmp/dpo-head: a later call on the same warm machine reuses its commits and inductor's cache).
#
#     RUNS="host:none util:none@base util:no-compact" OUT=/tmp/out experiments/host_time/dpo_levers.sh
#
# Each run is MODE:LEVERS[@base]: MODE `util` (metered step, tokens/s, NVML busy share), `host` (host time by
# source) or `prof` (torch.profiler); LEVERS as PERFBOT_LEVER takes them; `@base` runs the base commit. The head
# skips 15 steps and measures 40 (30 sampled for `host`, 5 for `prof`); the base skips 5 and measures 20. A run
# is stopped after LIMIT seconds (default 240): a machine's first run compiles the decoder from nothing.
# SIZE=tiny runs the tiny model (a smoke test on CPU).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export OUT=${OUT:-$PWD/dpo-levers}
mkdir -p "$OUT"
source "$root/experiments/example_repo.sh"
if [ -d /tmp/dpo-head/.git ]; then
  cd /tmp/dpo-head && cp "$root/experiments/host_time/levers.py" .
  export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
  export PERFBOT_EXAMPLE_CACHE=${PERFBOT_EXAMPLE_CACHE:-/tmp/perfbot-example-cache}
else
  example_repo dpo-levers experiments/host_time/levers.py
  python3 -m bot.cli apply --tier 1 > "$OUT/apply.txt" 2>&1 && python3 -m bot.cli apply --tier 2 >> "$OUT/apply.txt" 2>&1
  rm -rf /tmp/dpo-head && cp -r "$PWD" /tmp/dpo-head && cd /tmp/dpo-head
fi
export PERFBOT_WORKLOAD=dpo
for spec in ${RUNS:-util:none}; do
  mode=${spec%%:*} rest=${spec#*:}
  lever=${rest%%@*} commit=HEAD skip=15 steps=40
  git checkout -q bot/plan-tier-2
  case $mode in
    util) flags=--utilization ;;
    host) flags=--host-time steps=30 ;;
    prof) flags= steps=5 ;;
    *) echo "unknown mode in $spec" >&2; exit 2 ;;
  esac
  if [ "$rest" != "$lever" ]; then
    commit=base skip=5 steps=20
    git checkout -q "$(git rev-list --max-parents=0 main)"
  fi
  name="$mode-${lever//,/_}-$commit" start=$(date +%s)
  PERFBOT_LEVER=$lever timeout "${LIMIT:-240}" python3 -m benchmarks.profiling $flags --skip $skip --steps $steps \
    --out "$OUT/$name" -- python3 levers.py --size "${SIZE:-gpu}" --max-steps $((skip + steps + 2)) > "$OUT/$name.log" 2>&1 ||
    echo "$name failed rc=$?"
  echo "== $name: wall $(( $(date +%s) - start )) s"
  [ "$mode" = host ] && grep -v "it/s\]\|s/it\]" "$OUT/$name.log" | tail -40
  python3 -c "import json; d = json.load(open('$OUT/$name/utilization.json')); print('step %.1f ms, %.0f tokens/s, busy %s%%' % (1000 * d['meter_step_s'], d['meter_tokens_per_s'], d['median_percent']))" 2>/dev/null
  grep -o "'loss': '[0-9.]*'" "$OUT/$name.log" | sed "s/'loss': //" | head -12 | tr '\n' ' '; echo
done
git checkout -q bot/plan-tier-2
