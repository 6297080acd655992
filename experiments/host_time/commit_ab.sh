#!/usr/bin/env bash
# One tier-2 commit of the example (the one with `Bot-Optimization: OPTIMIZATION`, default token_budget) against
# its parent, on this machine's GPU: `bot apply --tier 1 && --tier 2`, then ROUNDS rounds of SFT runs in ABBA
# order under benchmarks.launch (STEPS steps, 10 excluded); prints tokens/s and the loss at equal steps.
# Results in $OUT.
# Usage: experiments/host_time/commit_ab.sh [ROUNDS] [STEPS] [OPTIMIZATION]
set -uo pipefail
rounds=${1:-2}
steps=${2:-40}
optimization=${3:-token_budget}
source "$(dirname "$0")/../example_repo.sh"
example_repo commit-ab
python3 -m bot.cli apply --tier 1 > "$out/apply.txt" 2>&1
python3 -m bot.cli apply --tier 2 >> "$out/apply.txt" 2>&1
git log --format='%h %s' > "$out/commits.txt"
head=$(git log --format=%H -1 --grep="^Bot-Optimization: $optimization\$")
[[ -n $head ]] || { echo "no commit of $optimization in tier 1 or 2" >&2; exit 2; }
before=$(git rev-parse "$head~1")
run() {  # NAME SHA
    git checkout -q "$2"
    timeout 300 python3 -m benchmarks.launch --out "$out/$1.json" --warmup-steps 10 \
        -- python3 train_sft.py --size gpu --max-steps "$steps" --seed 0 > "$out/$1.log" 2>&1 || echo "$1 failed"
    tar czf "$work/../commit_ab.tgz" -C "$out" --exclude=commit_ab.tgz . && mv "$work/../commit_ab.tgz" "$out/"
}
run warm-before "$before"; run warm-head "$head"  # the model cache and both compilations
for round in $(seq 1 "$rounds"); do
    if ((round % 2)); then order="before head"; else order="head before"; fi
    for which in $order; do
        [[ $which == head ]] && sha=$head || sha=$before
        run "$which-$round" "$sha"
    done
done
git checkout -q "$head"
python3 - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
for path in sorted(out.glob("*.json")):
    d = json.loads(path.read_text())
    losses = {p["step"]: p["loss"] for p in d.get("loss") or []}
    last = max(losses) if losses else None
    print(f"{path.stem:14} {d.get('status')} {d.get('tokens_per_s') or 0:9,.0f} tokens/s, step {((d.get('step_time_s') or {}).get('median') or 0) * 1000:6.1f} ms, "
          f"loss at step {last}: {losses.get(last)}")
PY
