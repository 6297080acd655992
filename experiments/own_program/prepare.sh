#!/usr/bin/env bash
# A user's repository built from TRL's own example scripts (sft.py and dpo.py of the installed trl), launched by
# a train.sh holding their docstrings' commands with one edit a user without the Hub makes (a local dataset in
# place of the Hub id), then drafted by `bot init --workloads-only --size SIZE` and planned by `bot scan --plan`.
# Usage: prepare.sh SIZE DIR   (SIZE: tiny on a CPU, gpu for the models' published shapes)
set -euo pipefail
size=$1
work=$2
project=$(cd "$(dirname "$0")/../.." && pwd)
scripts=$(python -c "import os, trl; print(os.path.join(os.path.dirname(trl.__file__), 'scripts'))")
mkdir -p "$work"
cd "$work"
cp "$scripts/sft.py" "$scripts/dpo.py" .
PYTHONPATH="$project" python -m experiments.own_program.data data
cat > train.sh <<'SH'
#!/usr/bin/env bash
# SFT then DPO, as TRL's script docstrings run them; data/ holds local copies of the two datasets.
python sft.py \
    --model_name_or_path Qwen/Qwen2.5-0.5B \
    --dataset_name data/chat \
    --learning_rate 2.0e-5 \
    --num_train_epochs 1 \
    --packing \
    --per_device_train_batch_size 2 \
    --gradient_accumulation_steps 8 \
    --eos_token '<|im_end|>' \
    --eval_strategy steps \
    --eval_steps 100 \
    --output_dir Qwen2.5-0.5B-SFT
python dpo.py \
    --dataset_name data/preference \
    --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct \
    --learning_rate 5.0e-7 \
    --num_train_epochs 1 \
    --per_device_train_batch_size 2 \
    --max_steps 1000 \
    --gradient_accumulation_steps 8 \
    --eval_strategy steps \
    --eval_steps 50 \
    --output_dir Qwen2.5-0.5B-DPO \
    --no_remove_unused_columns
SH
printf '.bot/\nQwen2.5-0.5B-*/\n' > .gitignore
git init -q -b main
git add -A
git -c user.name=user -c user.email=user@example.com commit -qm "TRL's SFT and DPO scripts, launched by train.sh"
bot init --workloads-only --size "$size"
bot scan --plan > PLAN.md
git add -A
git -c user.name=user -c user.email=user@example.com commit -qm "perfbot: drafted workloads and plan"
