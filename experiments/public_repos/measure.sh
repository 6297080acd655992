#!/usr/bin/env bash
# perfbot on a public repository, end to end: prepare.sh builds and drafts it, `bot apply` lays tiers 1 and 2 on
# it, `bot bench` measures the baseline and both heads in one run (ABBA rounds) on the workload of the README's
# training launch (nanogpt: train, `python train.py config/train_shakespeare_char.py`; minimind: train_pretrain,
# `cd trainer && python train_pretrain.py`). The drafts, the commits, their diff (vendored helpers left out),
# the bench table and the results JSON go to OUT.
# Usage: measure.sh NAME SIZE OUT [bot bench options...]
set -euo pipefail
name=$1
size=$2
out=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
case $name in
    nanogpt) workload=train ;;
    minimind) workload=train_pretrain ;;
    *) echo "measure.sh: unknown repository $name (nanogpt, minimind)" >&2; exit 2 ;;
esac
work=$(mktemp -d)/$name
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$out"
"$here/prepare.sh" "$name" "$size" "$work" > "$out/init.txt" 2>&1
cd "$work"
cp pyproject.toml PLAN.md "$out/"
"$here/../apply_and_bench.sh" "$out" --workload "$workload" "$@"
