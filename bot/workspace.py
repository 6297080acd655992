"""The git side of a run (GitPython): checks, the work branch, one commit per optimization, resume."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import git

from bot.errors import BadInput

BOT_NAME = "perfbot"
BOT_EMAIL = "perfbot@users.noreply.github.com"
TRAILER_OPTIMIZATION = "Bot-Optimization"
TRAILER_ITEM = "Bot-Plan-Item"
TRAILER_ISSUE = "Bot-Issue"


@dataclass(frozen=True)
class BotCommit:
    """A commit on the work branch that carries the bot's trailers."""

    sha: str
    subject: str
    optimization: str
    plan_items: tuple[str, ...]


def branch_name(issue: int | str, tier: int) -> str:
    """``bot/<issue-or-plan>-tier-<n>``, with the issue part reduced to characters git accepts."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", str(issue)).strip("-.").lower() or "plan"
    return f"bot/{slug}-tier-{tier}"


def commit_message(scope: str, change: str, expected: str, body: str, trailers: dict[str, str]) -> str:
    """``perf(<scope>): <change> (<expected win>)``, a body, and the trailers."""
    subject = f"perf({scope}): {change}" + (f" ({expected})" if expected else "")
    trailer_lines = "\n".join(f"{key}: {value}" for key, value in trailers.items())
    return (
        f"{subject}\n\n{body.strip()}\n\n{trailer_lines}\n"
        if body.strip()
        else f"{subject}\n\n{trailer_lines}\n"
    )


class Workspace:
    """A target repository checked out on the bot's work branch."""

    def __init__(self, path: str | Path):
        try:
            self.repo = git.Repo(Path(path), search_parent_directories=False)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise BadInput(
                f"{path} is not the root of a git repository; run the bot in a checkout's root"
            ) from exc
        self.root = Path(self.repo.working_tree_dir)

    # -- checks -----------------------------------------------------------------------------------
    def check_ready(self) -> None:
        """Refuse a dirty tree, an unborn branch or a detached HEAD, with what to do about it."""
        if not self.repo.head.is_valid():
            raise BadInput(f"{self.root} has no commits yet; commit the training code first, then re-run")
        if self.repo.is_dirty(untracked_files=True):
            changed = [d.a_path for d in self.repo.index.diff(None)] + [
                d.a_path for d in self.repo.index.diff("HEAD")
            ]
            changed += self.repo.untracked_files
            listed = ", ".join(sorted(set(changed))[:8])
            raise BadInput(
                f"{self.root} has uncommitted changes ({listed}); commit or stash them "
                "(git stash -u), then re-run: the bot commits only its own changes"
            )
        if self.repo.head.is_detached:
            raise BadInput(
                f"HEAD is detached at {self.repo.head.commit.hexsha[:10]}; check out the branch to optimize "
                "(git switch <branch>), then re-run"
            )

    @property
    def head(self) -> str:
        return self.repo.head.commit.hexsha

    @property
    def branch(self) -> str:
        return self.repo.active_branch.name

    # -- the work branch ----------------------------------------------------------------------------
    def start(self, name: str) -> str:
        """Check out the work branch, creating it at HEAD; return the baseline sha.

        On an existing branch the baseline is the parent of its first bot commit (or its head when there is
        none yet), so a re-run resumes where the last one stopped.
        """
        if name in self.repo.heads:
            self.repo.heads[name].checkout()
        else:
            self.repo.create_head(name).checkout()
        return self.baseline()

    def baseline(self) -> str:
        """The commit the bot's commits on this branch sit on."""
        first = None
        for commit in self.repo.iter_commits("HEAD"):
            if TRAILER_OPTIMIZATION in _trailers(commit.message):
                first = commit
            elif first is not None:
                break
        return first.parents[0].hexsha if first is not None and first.parents else self.head

    def bot_commits(self, since: str | None = None) -> list[BotCommit]:
        """Bot commits after ``since`` (default: the baseline), oldest first."""
        since = since or self.baseline()
        commits = []
        for commit in self.repo.iter_commits(f"{since}..HEAD", reverse=True):
            trailers = _trailers(commit.message)
            if TRAILER_OPTIMIZATION in trailers:
                items = tuple(k.strip() for k in trailers.get(TRAILER_ITEM, "").split(",") if k.strip())
                commits.append(
                    BotCommit(commit.hexsha, commit.summary, trailers[TRAILER_OPTIMIZATION], items)
                )
        return commits

    def committed_text(self, path: str) -> str | None:
        """A file's text at HEAD; ``None`` when HEAD does not have it."""
        try:
            return self.repo.git.show(f"HEAD:{path}", strip_newline_in_stdout=False)
        except git.GitCommandError:
            return None

    # -- commits ------------------------------------------------------------------------------------
    def commit(self, paths: Iterable[str], message: str) -> str:
        """Commit exactly ``paths`` as the bot; return the sha."""
        paths = sorted(paths)
        self.repo.git.add("--", *paths)
        env = {
            "GIT_AUTHOR_NAME": BOT_NAME,
            "GIT_AUTHOR_EMAIL": BOT_EMAIL,
            "GIT_COMMITTER_NAME": BOT_NAME,
            "GIT_COMMITTER_EMAIL": BOT_EMAIL,
        }
        self.repo.git.commit("-q", "--no-verify", "-m", message, "--", *paths, env=env)
        return self.head

    def discard(self) -> None:
        """Throw away uncommitted changes (a failed transform's edits), leaving the tree clean."""
        self.repo.git.reset("-q", "--hard", "HEAD")
        self.repo.git.clean("-q", "-fd")

    def revert(self, sha: str, message: str) -> str:
        """A new commit that reverts ``sha`` (history is never rewritten)."""
        self.repo.git.revert("--no-edit", "--no-commit", sha)
        env = {"GIT_AUTHOR_NAME": BOT_NAME, "GIT_AUTHOR_EMAIL": BOT_EMAIL}
        env |= {"GIT_COMMITTER_NAME": BOT_NAME, "GIT_COMMITTER_EMAIL": BOT_EMAIL}
        self.repo.git.commit("-q", "--no-verify", "-m", message, env=env)
        return self.head


def _trailers(message: str) -> dict[str, str]:
    """The ``Key: value`` trailers of a commit message's last paragraph."""
    last = message.strip().split("\n\n")[-1]
    pairs = (line.split(":", 1) for line in last.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in pairs if re.fullmatch(r"[A-Za-z0-9-]+", key.strip())}
