#!/bin/bash
# In a prepared repository (the user's tree on `main`): `bot apply` tiers 1 and 2, keep the commits and their
# diff (vendored helpers left out) in OUT, then `bot bench` the baseline and both heads in one run.
# Usage: apply_and_bench.sh OUT [bot bench options...]   (run from the repository's root)
set -euo pipefail
out=$1
shift
git config user.name user && git config user.email user@example.com
bot apply --tier 1 --no-push > "$out/apply.txt" 2>&1 || true
tier1=$(git rev-parse HEAD)
bot apply --tier 2 --no-push >> "$out/apply.txt" 2>&1 || true
tier2=$(git rev-parse HEAD)
git log --format='%h %s' main..HEAD > "$out/commits.txt"
git diff main..HEAD -- . ':(exclude)_perfbot_*.py' ':(exclude)**/_perfbot_*.py' > "$out/diff.txt"
revisions=$(printf '%s\n' "$(git rev-parse main)" "$tier1" "$tier2" | awk '!seen[$0]++')
# shellcheck disable=SC2086  # one revision per word
bot bench $revisions "$@" > "$out/bench.txt" 2>&1 || true
cp .bot/results/*.json "$out/" 2>/dev/null || true
tail -n 20 "$out/bench.txt"
