#!/usr/bin/env bash
# A public repository as a user without network has it: its pinned snapshot in a fresh git repository, plus
# only the local data its own code reads (made by data.py from a fixed seed, in the repository's own format,
# where its launch expects it), then drafted by `bot init --workloads-only --size SIZE` and planned by
# `bot scan --plan`.
#   nanogpt:  data/shakespeare_char/input.txt, turned into train.bin/val.bin/meta.pkl by the repository's own
#             prepare.py (which downloads input.txt only when it is missing)
#   minimind: dataset/pretrain_t2t_mini.jsonl, the file trainer/train_pretrain.py reads by default
# The data files are committed (git add -f where the repository ignores them): `bot bench` measures each commit
# in a checkout of its own.
# Usage: prepare.sh NAME SIZE DIR   (SIZE: tiny on a CPU, gpu on the GPU machine)
# The snapshot is PUBLIC_REPOS_SNAPSHOTS/NAME.tar when that folder is set (the GPU machine), else made from the
# mirror by snapshot.sh.
set -euo pipefail
name=$1
size=$2
work=$3
here=$(cd "$(dirname "$0")" && pwd)
project=$(cd "$here/../.." && pwd)
tar=${PUBLIC_REPOS_SNAPSHOTS:-}/$name.tar
if [ -z "${PUBLIC_REPOS_SNAPSHOTS:-}" ] || [ ! -f "$tar" ]; then
    tar=$(mktemp -d)/$name.tar
    "$here/snapshot.sh" "$name" "$tar"
fi
upstream=$(git get-tar-commit-id < "$tar")
mkdir -p "$work"
cd "$work"
tar -xf "$tar"
git init -q -b main
git add -A
git -c user.name=user -c user.email=user@example.com commit -qm "$name at ${upstream:0:12}, as published"
case $name in
    nanogpt)
        PYTHONPATH="$project" python -m experiments.public_repos.data shakespeare data/shakespeare_char/input.txt
        python data/shakespeare_char/prepare.py
        git add -f data/shakespeare_char/train.bin data/shakespeare_char/val.bin data/shakespeare_char/meta.pkl
        ;;
    minimind)
        PYTHONPATH="$project" python -m experiments.public_repos.data pretrain dataset/pretrain_t2t_mini.jsonl
        git add dataset/pretrain_t2t_mini.jsonl
        ;;
esac
git -c user.name=user -c user.email=user@example.com commit -qm "Local training data, made offline"
bot init --workloads-only --size "$size"
bot scan --plan > PLAN.md
git add -A
git -c user.name=user -c user.email=user@example.com commit -qm "perfbot: drafted workloads and plan"
