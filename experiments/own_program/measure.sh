#!/usr/bin/env bash
# perfbot on a user's TRL program, end to end: prepare.sh builds and drafts it, `bot apply` lays tiers 1 and 2
# on it, `bot bench` measures the baseline and both heads in one run (ABBA rounds). Results and the commits'
# diff go to OUT.  Usage: measure.sh SIZE OUT [bot bench options...]
set -euo pipefail
size=$1
out=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)/trl-user
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$out"
"$here/prepare.sh" "$size" "$work" > "$out/init.txt" 2>&1
cd "$work"
git config user.name user && git config user.email user@example.com
bot apply --tier 1 --no-push > "$out/apply.txt" 2>&1 || true
tier1=$(git rev-parse HEAD)
bot apply --tier 2 --no-push >> "$out/apply.txt" 2>&1 || true
tier2=$(git rev-parse HEAD)
git log --format='%h %s' main..HEAD > "$out/commits.txt"
git diff main..HEAD -- . ':(exclude)_perfbot_*.py' > "$out/diff.txt"
revisions=$(printf '%s\n' "$(git rev-parse main)" "$tier1" "$tier2" | awk '!seen[$0]++')
# shellcheck disable=SC2086  # one revision per word
bot bench $revisions "$@" > "$out/bench.txt" 2>&1 || true
cp .bot/results/*.json "$out/" 2>/dev/null || true
tail -n 20 "$out/bench.txt"
