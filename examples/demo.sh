#!/usr/bin/env bash
# The demo: a fresh git copy of the example training repository, `bot apply --tier 1` on it (offline, CPU is
# fine), then the branch's commits, a short training run of the optimized code, and a one-line summary.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=${1:-$(mktemp -d)/example-trainer}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
export PERFBOT_EXAMPLE_CACHE=${PERFBOT_EXAMPLE_CACHE:-$(dirname "$work")/model-cache}

cp -r "$here/trainer_repo" "$work"
cd "$work"
git init -q -b main
git add -A
git -c user.name=demo -c user.email=demo@example.com commit -qm "example trainer"

echo "== bot apply --tier 1   (in $work)"
status=0
bot apply --tier 1 || status=$?

echo
echo "== branch $(git branch --show-current): one commit per optimization"
git log --format='%h %s' main..HEAD
echo
echo "== the optimized SFT trainer still trains"
python train_sft.py --size tiny --max-steps 2 2>&1 | tail -n 3
echo
echo "demo: $(git rev-list --count main..HEAD) commits on $(git branch --show-current) in $work;" \
  "progress comment: .bot/issues/plan/progress.md; bot apply exited $status"
exit $status
