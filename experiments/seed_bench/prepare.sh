#!/usr/bin/env bash
# The seed repository (superkaiba/explore-persona-space) as its user has it, ready for `bot bench`: its tree at
# c57ab0c (the parent of the human's tier-1 commits) committed as `master`, the git-ignored training data its
# SFT and DPO conditions read written locally by data.py, a run_conditions.sh holding the README's launch
# (`uv run python scripts/train.py condition=... seed=42`) for an SFT and a DPO condition, the seed issue's plan
# as PLAN.md, the workloads `bot init --workloads-only` drafts from those launches, and a branch
# `human` holding the human's trainer.py and sft.py as of b8dd473 (the tier-1 head the seed issue measured);
# then `bot apply --tier 1` of the seed plan lays perfbot's commits on master (branch bot/plan-tier-1), and
# `bot apply --tier 2` of perfbot's own plan on top; DIR/.bot/revisions.txt names the commits.
# Usage: prepare.sh MIRROR SIZE DIR   (MIRROR: the `fetch` git directory; SIZE: tiny on a CPU, gpu on the GPU)
set -euo pipefail
mirror=$1
size=$2
work=$3
project=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$work" && mkdir -p "$work"
# The snapshot lacks the blobs under data/a3b_factorial/ (git-ignored data the human committed by force). Results,
# figures, research notes and other projects' code (eval_results/, figures/, research_log/, external/: nothing
# the training path imports) are left out so that the repository fits the GPU machine's 64 MiB carry.
git -C "$mirror" ls-tree -r --name-only c57ab0c \
    | grep -v -E '^(data/a3b_factorial|eval_results|figures|research_log|external)/' > "$work/.paths"
xargs -a "$work/.paths" -d '\n' git -C "$mirror" --literal-pathspecs archive c57ab0c 2>/dev/null \
    | tar -x -i -C "$work"
rm "$work/.paths"
cd "$work"
git init -q -b master
git config user.name user && git config user.email user@example.com
echo .bot/ >> .git/info/exclude  # perfbot's own folder
git add -A && git commit -qm "explore-persona-space at c57ab0c"

PYTHONPATH="$project" python -m experiments.seed_bench.data data/sft   # data/ is git-ignored there
# The user's launch of the two conditions measured: the README's command, with an SFT and a DPO condition.
cat > run_conditions.sh <<'SH'
#!/usr/bin/env bash
# A coupling stage trained by SFT, and one trained by DPO (each condition's first stage is what is measured).
uv run python scripts/train.py condition=c1_evil_wrong_em seed=42
uv run python scripts/train.py condition=midtrain_dpo_evil_correct_em seed=42
SH
git add run_conditions.sh && git commit -qm "Launch the SFT and DPO conditions"
python3 - "$project/../shared/seeds/issue-tier1-plan-and-reports.txt" > PLAN.md <<'PY'
import sys
lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
start = next(i for i, line in enumerate(lines) if line.startswith("Scope"))
end = next(i for i, line in enumerate(lines) if line.startswith("Leave H and I"))
print("\n".join(lines[start : end + 1]))
PY
mkdir -p .bot
PYTHONPATH="$project" bot init --workloads-only --size "$size" > .bot/init.txt
# The user's one edit to the drafts of run_conditions.sh: the runner's transformers (5.17) has no
# TrainingArguments.warmup_ratio, which the repository's configs set (it ran 5.5); Hydra's `~key` deletes it.
python3 - > .bot/workloads.txt <<'PY'
import re, tomllib
text = open("pyproject.toml", encoding="utf-8").read()
drafts = tomllib.loads(text)["tool"]["bot"]["workloads"]
names = [name for name, table in drafts.items() if table.get("launch") == "run_conditions.sh"]
for name in names:
    table = re.search(rf"^\[tool\.bot\.workloads\.{re.escape(name)}\]\n(?:.*\n)*?flags = \{{", text, re.M)
    text = text[: table.end()] + '"~training.warmup_ratio" = "", ' + text[table.end() :]
open("pyproject.toml", "w", encoding="utf-8").write(text)
print("\n".join(names))
PY
git add -A && git commit -qm "perfbot: drafted workloads (one override added by hand), and the seed plan"

git checkout -q -b human
for path in src/explore_persona_space/train/trainer.py src/explore_persona_space/train/sft.py; do
    git -C "$mirror" show "b8dd473:$path" > "$path"
done
git commit -qam "The human's tier-1 head: trainer.py and sft.py as of b8dd473"
git checkout -q master

PYTHONPATH="$project" bot apply --tier 1 --plan PLAN.md --no-push > .bot/apply.txt 2>&1
tier1=$(git rev-parse HEAD)
# Tier 2: the seed plan has none; perfbot's own plan (`bot scan --plan`) has, for the files the launches run too.
PYTHONPATH="$project" bot scan --plan > .bot/own-plan.md 2>/dev/null
PYTHONPATH="$project" bot apply --tier 2 --plan .bot/own-plan.md --no-push >> .bot/apply.txt 2>&1
{
    echo "baseline $(git rev-parse master)"
    echo "human $(git rev-parse human)"
    echo "tier1 $tier1"
    echo "tier2 $(git rev-parse HEAD)"
} > .bot/revisions.txt
git log --format='%h %s' master..HEAD > .bot/commits.txt
git diff master..HEAD -- . ':(exclude)_perfbot_*.py' > .bot/perfbot.diff
git diff master..human > .bot/human.diff
