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
"$here/../apply_and_bench.sh" "$out" "$@"
