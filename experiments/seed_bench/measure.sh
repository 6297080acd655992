#!/usr/bin/env bash
# perfbot beside the human on the seed repository: `bot bench` of the baseline, the human's head and perfbot's
# tier-1 head of a repository prepare.sh made, in one run, for the two workloads drafted from run_conditions.sh. The bench output, results JSON, the commits and their
# diffs go to OUT.  Usage: measure.sh PREPARED OUT [bot bench options...]
set -euo pipefail
prepared=$(cd "$1" && pwd)
out=$2
shift 2
work=$(mktemp -d)/explore-persona-space
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# The repository is a package under src/ that its users install (`uv sync`); each checkout finds its own.
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}src
mkdir -p "$out"
cp -a "$prepared" "$work"
cd "$work"
cp .bot/revisions.txt .bot/commits.txt .bot/perfbot.diff .bot/human.diff .bot/apply.txt "$out/"
cp .bot/init.txt "$out/"
# The drafts of run_conditions.sh (WORKLOADS: some of them, e.g. "train" for the SFT condition alone).
workloads=${WORKLOADS:-$(cat .bot/workloads.txt)}
# shellcheck disable=SC2046,SC2086  # one revision per word, one workload per word
bot bench $(awk '{print $2}' .bot/revisions.txt | awk '!seen[$0]++') $(printf -- '--workload %s ' $workloads) \
    "$@" > "$out/bench.txt" 2>&1 || true
cp .bot/results/*.json "$out/" 2>/dev/null || true
cat "$out/revisions.txt"
tail -n 25 "$out/bench.txt"
