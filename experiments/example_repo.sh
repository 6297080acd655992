# Sourced by the experiment scripts that run perfbot on a fresh git copy of the example repository.
#
# example_repo OUT_NAME [FILE...]: sets `perfbot` (this checkout), `out` ($OUT, default ./OUT_NAME, created) and
# `work` (a new temporary folder); exports the offline settings, perfbot on PYTHONPATH and the shared model
# cache; copies examples/trainer_repo there without its run artefacts (outputs, .bot state, caches), then the
# FILEs (paths inside this checkout), commits it all as `main` and leaves the shell in `work`.
example_repo() {
    local name=$1 file
    shift
    perfbot=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    out=${OUT:-$PWD/$name}
    work=$(mktemp -d)/example-trainer
    export PYTHONPATH="$perfbot${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
    export PERFBOT_EXAMPLE_CACHE=${PERFBOT_EXAMPLE_CACHE:-/tmp/perfbot-example-cache}
    mkdir -p "$out"
    cp -r "$perfbot/examples/trainer_repo" "$work"
    rm -rf "$work/outputs" "$work/.bot" "$work/__pycache__" "$work/.ruff_cache"
    for file in "$@"; do
        cp "$perfbot/$file" "$work/"
    done
    cd "$work"
    git init -q -b main && git add -A && git -c user.name=bench -c user.email=bench@localhost commit -qm "example trainer"
}
