"""Reading a target repository's history (GitPython): the bot's trailers on each commit, which commits are
the bot's and which were reverted, and what a diff between two revisions changed."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field

import git

from benchmarks.results import CommitInfo
from bot.conventions import (
    TRAILER_ISSUE,
    TRAILER_ITEM,
    TRAILER_OPTIMIZATION,
    TRAILER_REVERT_OF,
    TRAILER_TIER,
)


def trailers(commit: git.Commit) -> dict[str, list[str]]:
    """The commit's trailers as ``git interpret-trailers`` parses them, keys lower-cased."""
    if ":" not in commit.message:  # no trailer can be there: skip the subprocess
        return {}
    found: dict[str, list[str]] = {}
    for key, values in commit.trailers_dict.items():
        found.setdefault(key.lower(), []).extend(v.strip() for v in values if v.strip())
    return found


def trailer(commit: git.Commit, name: str) -> str | None:
    """The first value of trailer ``name`` on the commit, or None."""
    values = trailers(commit).get(name.lower())
    return values[0] if values else None


def _might_be_bot(commit: git.Commit) -> bool:
    message = commit.message if isinstance(commit.message, str) else commit.message.decode("utf-8", "replace")
    return TRAILER_OPTIMIZATION.lower() in message.lower()


def commit_info(commit: git.Commit) -> CommitInfo:
    """The sha, subject, and the optimization and plan items the commit's trailers name."""
    found = trailers(commit) if _might_be_bot(commit) else {}
    optimizations = found.get(TRAILER_OPTIMIZATION.lower(), [])
    items = [i.strip() for value in found.get(TRAILER_ITEM.lower(), []) for i in value.split(",")]
    summary = commit.summary if isinstance(commit.summary, str) else commit.summary.decode("utf-8", "replace")
    return CommitInfo(
        sha=commit.hexsha,
        subject=summary,
        optimization=optimizations[0] if optimizations else None,
        plan_items=[i for i in items if i],
    )


def describe_commits(repo: git.Repo, revisions: Iterable[str]) -> list[CommitInfo]:
    """Resolve revisions (shas, branch names, ``HEAD~2``) to :class:`CommitInfo`, in the given order."""
    return [commit_info(repo.commit(revision)) for revision in revisions]


def is_bot_commit(commit: git.Commit) -> bool:
    """True when the commit carries a ``Bot-Optimization:`` trailer."""
    return _might_be_bot(commit) and bool(trailers(commit).get(TRAILER_OPTIMIZATION.lower()))


def bot_commits(repo: git.Repo, since: str, until: str = "HEAD") -> list[CommitInfo]:
    """The bot's commits in ``since..until``, oldest first."""
    return [commit_info(c) for c in repo.iter_commits(f"{since}..{until}", reverse=True) if is_bot_commit(c)]


def tier_of(commit: git.Commit) -> int | None:
    """The tier a bot commit's ``Bot-Tier:`` trailer names (None when it names none)."""
    value = trailer(commit, TRAILER_TIER) if _might_be_bot(commit) else None
    return int(value) if value and value.isdigit() else None


def issue_of(commit: git.Commit) -> str | None:
    """The issue a bot commit's ``Bot-Issue:`` trailer names."""
    return trailer(commit, TRAILER_ISSUE) if _might_be_bot(commit) else None


def reverted_by(commit: git.Commit) -> str | None:
    """The sha a revert commit undoes (``Bot-Revert-Of:`` trailer, else git's own "This reverts commit")."""
    named = trailer(commit, TRAILER_REVERT_OF)
    if named:
        return named
    message = commit.message if isinstance(commit.message, str) else commit.message.decode("utf-8", "replace")
    marker = "This reverts commit "
    if marker in message:
        sha = message.split(marker, 1)[1].split()[0].rstrip(".")
        return sha if all(ch in "0123456789abcdef" for ch in sha) and len(sha) >= 7 else None
    return None


def reverted_commits(repo: git.Repo, rev_range: str) -> dict[str, str]:
    """``{reverted sha: reverting sha}`` for the revert commits in ``rev_range`` (full shas)."""
    found = {}
    for commit in repo.iter_commits(rev_range):
        sha = reverted_by(commit)
        if sha is None:
            continue
        try:
            found[repo.commit(sha).hexsha] = commit.hexsha
        except (ValueError, git.BadName):
            continue
    return found


# --- diffs ------------------------------------------------------------------------------------------------

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
"""git's empty tree: the "parent" a root commit is diffed against."""


@dataclass(frozen=True)
class FileChange:
    """One file a diff touched: lines added and deleted (0 for binary), its path, its old path if renamed."""

    added: int
    deleted: int
    path: str
    old_path: str | None = None


@dataclass
class FileHunks:
    """What a diff did to one file: added lines by line number, and the old-side line ranges it replaced."""

    added: dict[int, str] = field(default_factory=dict)
    replaced: list[range] = field(default_factory=list)


def parent_of(commit: git.Commit) -> str:
    """The first parent's sha, or :data:`EMPTY_TREE` for a root commit."""
    return commit.parents[0].hexsha if commit.parents else EMPTY_TREE


def _diff(repo: git.Repo, *args: str) -> str:
    """``git diff`` output, paths unquoted, decoded with undecodable bytes replaced."""
    output: bytes = repo.git(c="core.quotePath=false").diff(*args, stdout_as_string=False)
    return output.decode("utf-8", "replace")


def changed_files(repo: git.Repo, old: str, new: str) -> list[FileChange]:
    """Every file that differs between ``old`` and ``new`` (renames detected), in git's order."""
    fields = _diff(repo, "--numstat", "-z", "-M", old, new).split("\0")
    changes, index = [], 0
    while index < len(fields) and fields[index]:
        added, deleted, path = fields[index].split("\t", 2)
        old_path = None
        if not path:  # a rename: the old and new paths follow as their own fields
            old_path, path = fields[index + 1], fields[index + 2]
            index += 2
        changes.append(
            FileChange(
                int(added) if added != "-" else 0, int(deleted) if deleted != "-" else 0, path, old_path
            )
        )
        index += 1
    return changes


def hunks(repo: git.Repo, old: str, new: str, *paths: str) -> dict[str, FileHunks]:
    """Per new path (limited to ``paths`` when given): what the diff ``old..new`` added and replaced."""
    text = _diff(
        repo,
        "-U0",
        "--no-color",
        "--no-ext-diff",
        "-M",
        "--src-prefix=a/",
        "--dst-prefix=b/",
        old,
        new,
        "--",
        *paths,
    )
    files: dict[str, FileHunks] = {}
    current: FileHunks | None = None
    old_path = ""
    line_number = 0
    for raw in text.splitlines():
        if raw.startswith("--- "):
            old_path = _diff_path(raw[4:])
        elif raw.startswith("+++ "):
            current = files.setdefault(_diff_path(raw[4:]) or old_path, FileHunks())
        elif raw.startswith("@@") and current is not None:
            old_side, new_side = raw.split(" ")[1:3]
            start, _, count = old_side[1:].partition(",")
            length = int(count) if count else 1
            current.replaced.append(range(int(start), int(start) + length))
            line_number = int(new_side[1:].partition(",")[0])
        elif raw.startswith("+") and current is not None:
            current.added[line_number] = raw[1:]
            line_number += 1
    return files


def _diff_path(text: str) -> str:
    """``b/src/x.py`` → ``src/x.py``; ``/dev/null`` → empty."""
    text = text.strip().strip('"')
    return "" if text == "/dev/null" else text.split("/", 1)[1] if "/" in text else text


def read_blobs(repo: git.Repo, specs: list[str]) -> dict[str, bytes]:
    """``rev:path`` → file content, for the specs that name a blob, read in one ``git cat-file --batch``."""
    if not specs:
        return {}
    with tempfile.TemporaryFile() as requests:
        requests.write("".join(f"{spec}\n" for spec in specs).encode())
        requests.seek(0)
        output = repo.git.cat_file(
            "--batch", istream=requests, stdout_as_string=False, strip_newline_in_stdout=False
        )
    blobs, position = {}, 0
    for spec in specs:
        end = output.index(b"\n", position)
        header = output[position:end].split()
        position = end + 1
        if header[-1] in (b"missing", b"ambiguous"):
            continue
        kind, size = header[1], int(header[2])
        if kind == b"blob":
            blobs[spec] = output[position : position + size]
        position += size + 1
    return blobs
