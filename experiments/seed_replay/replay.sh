#!/usr/bin/env bash
# The seed repository replay: export superkaiba/explore-persona-space at c57ab0c (the parent of the human tier-1
# commits) from its mirror, run `bot apply --tier 1` with the seed plan, and print what each commit changed.
# Usage: replay.sh MIRROR PLAN [WORKDIR]   (MIRROR: the git directory `fetch` made; WORKDIR: default /tmp/seed_replay)
set -euo pipefail
mirror=${1:?the mirror git directory of superkaiba/explore-persona-space}
plan=${2:?the seed plan (the tier-1 tables of the seed issue)}
work=${3:-/tmp/seed_replay}
here=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-python}

rm -rf "$work" && mkdir -p "$work"
# The snapshot lacks the blobs under data/a3b_factorial/: export every other path (git still names a missing
# blob on stderr; the archive is complete). xargs may run git archive more than once: tar reads the archives
# one after the other (-i).
git -C "$mirror" ls-tree -r --name-only c57ab0c | grep -v '^data/a3b_factorial/' > "$work/.paths"
xargs -a "$work/.paths" -d '\n' git -C "$mirror" --literal-pathspecs archive c57ab0c \
    2> >(grep -v "^error: invalid object .* for 'data/a3b_factorial/" >&2) | tar -x -i -C "$work"
rm "$work/.paths"
git -C "$work" init -q -b master
git -C "$work" add -A
git -C "$work" -c user.name=replay -c user.email=replay@localhost commit -qm base

(cd "$here" && PYTHONPATH="$here" "$python" -m bot.cli apply --tier 1 --plan "$plan" --repo "$work") || true
git -C "$work" log --reverse --format='%n== %h %s' --stat master..HEAD
for file in $(git -C "$work" diff --name-only master..HEAD -- '*.py'); do
    "$python" -m py_compile "$work/$file"
done
"${RUFF:-ruff}" check --select F --no-cache $(git -C "$work" diff --name-only master..HEAD -- '*.py' | sed "s|^|$work/|")
