#!/usr/bin/env bash
# `bot apply --tier 1` then `--tier 2` on a fresh git copy of examples/gpt_loop, and the tree of the baseline
# and of every bot commit exported to DIR/NN-<optimization>/ (each trains on its own: train.py, model.py and
# the vendored helpers). Runs on the CPU machine; run_variants.py then trains each on the GPU.
# Usage: experiments/from_scratch_gpt/variants.sh DIR
set -euo pipefail
out=$(realpath -m "${1:?output directory}")
perfbot=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)/gpt_loop
cp -r "$perfbot/examples/gpt_loop" "$work"
cd "$work"
git init -q -b main && git add -A && git -c user.name=bench -c user.email=bench@localhost commit -qm "gpt loop"
export PYTHONPATH="$perfbot${PYTHONPATH:+:$PYTHONPATH}"
python3 -m bot.cli apply --tier 1 >/dev/null
python3 -m bot.cli apply --tier 2 >/dev/null
rm -rf "$out" && mkdir -p "$out"
n=0
for sha in $(git rev-list --reverse main) $(git rev-list --reverse main..HEAD); do
    name=$(git log -1 --format=%B "$sha" | sed -n 's/^Bot-Optimization: //p')
    dir=$(printf '%s/%02d-%s' "$out" "$n" "${name:-baseline}")
    mkdir -p "$dir" && git archive "$sha" | tar -x -C "$dir"
    n=$((n + 1))
done
ls "$out"
