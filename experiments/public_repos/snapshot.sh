#!/usr/bin/env bash
# The pinned snapshot of one public repository as a tar (git archive of its mirror's HEAD, the commit id in the
# tar's header), leaving out the files whose contents the mirror does not hold (large images), named on stderr.
# Usage: snapshot.sh NAME TAR   (NAME: nanogpt or minimind; MIRRORS: where the mirrors are, default /work/.mirror)
set -euo pipefail
name=$1
tar=$2
case $name in
    nanogpt) mirror=karpathy+nanoGPT ;;
    minimind) mirror=jingyaogong+minimind ;;
    *) echo "snapshot.sh: unknown repository $name (nanogpt, minimind)" >&2; exit 2 ;;
esac
git_dir=${MIRRORS:-/work/.mirror}/$mirror/repo
paths=()
while read -r _mode _type blob path; do
    if git -C "$git_dir" cat-file -e "$blob" 2>/dev/null; then
        paths+=("$path")
    else
        echo "snapshot.sh: $mirror: $path left out (not in the mirror)" >&2
    fi
done < <(git -C "$git_dir" ls-tree -r HEAD)
mkdir -p "$(dirname "$tar")"
# (git names the missing blobs again while it writes the rest: those lines are the ones said above)
git -C "$git_dir" archive --format=tar -o "$(realpath -m "$tar")" HEAD -- "${paths[@]}" \
    2> >(grep -v '^error: invalid object' >&2)
