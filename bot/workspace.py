"""The git side of a run (GitPython): checks, the work branch, one commit per optimization, resume."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path

import git

from benchmarks.results import CommitInfo
from bot import history
from bot.conventions import bot_git_environment, parse_branch, state_dir
from bot.errors import BadInput


def commit_message(scope: str, change: str, expected: str, body: str, trailers: dict[str, str]) -> str:
    """``perf(<scope>): <change>``, a body that ends with the unmeasured ``Expected: <win>``, and the trailers
    (the measured effect goes to the git note and the comments, never into the permanent history). The line
    says once that it was not measured: a win that already says so (``not measured for this shape``) is kept
    as it is."""
    subject = f"perf({scope}): {change}"
    if expected and "not measured" not in expected:
        expected = f"{expected} (not measured here)"
    body = f"{body.strip()}\n\nExpected: {expected}" if expected else body
    trailer_lines = "\n".join(f"{key}: {value}" for key, value in trailers.items())
    return (
        f"{subject}\n\n{body.strip()}\n\n{trailer_lines}\n"
        if body.strip()
        else f"{subject}\n\n{trailer_lines}\n"
    )


def _listed(paths: list[str], most: int = 8) -> str:
    """The first ``most`` paths, comma-separated, and how many more."""
    more = f" and {len(paths) - most} more" if len(paths) > most else ""
    return ", ".join(paths[:most]) + more


class Workspace:
    """A target repository checked out on the bot's work branch."""

    def __init__(self, path: str | Path):
        try:
            self.repo = git.Repo(Path(path), search_parent_directories=False)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise BadInput(
                f"{path} is not the root of a git repository; run the bot in a checkout's root"
            ) from exc
        if self.repo.working_tree_dir is None:
            raise BadInput(f"{path} is a bare repository; run the bot in a checkout's root")
        self.root = Path(self.repo.working_tree_dir)

    # -- checks -----------------------------------------------------------------------------------
    def check_ready(self) -> None:
        """Refuse a dirty tree, an unborn branch or a detached HEAD, with what to do about it."""
        if not self.repo.head.is_valid():
            raise BadInput(f"{self.root} has no commits yet; commit the training code first, then re-run")
        state_dir(self.root)  # perfbot's own files are ignored (they are kept out of every commit)
        diffs = [*self.repo.index.diff(None), *self.repo.index.diff("HEAD")]
        changed = sorted({path for d in diffs if (path := d.a_path or d.b_path)})
        untracked = sorted(self.repo.untracked_files)  # what git ignores is not listed
        if changed or untracked:
            found = [f"uncommitted changes ({_listed(changed)})"] if changed else []
            found += [f"untracked files git does not ignore ({_listed(untracked)})"] if untracked else []
            raise BadInput(
                f"{self.root} has {' and '.join(found)}; commit or stash them (git stash -u), or add untracked "
                "ones to .gitignore, then re-run: the bot commits only its own changes"
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
        """The commit the bot's commits on this branch sit on: the commit the work branch was built from.

        On a ``bot/<issue>-tier-<n>`` branch only commits of tier ``n`` count, so a tier-2 branch built on
        the tier-1 branch has the tier-1 head as its baseline.
        """
        parsed = None if self.repo.head.is_detached else parse_branch(self.branch)
        tier = parsed[1] if parsed else None
        first = None
        for commit in self.repo.iter_commits("HEAD"):
            if not history.is_bot_commit(commit):
                if first is not None:
                    break
                continue
            if tier is not None and history.tier_of(commit) not in (None, tier):
                break  # another tier's work: this branch was built on it
            first = commit
        return first.parents[0].hexsha if first is not None and first.parents else self.head

    def bot_commits(self, since: str | None = None) -> list[CommitInfo]:
        """Bot commits after ``since`` (default: the baseline), oldest first."""
        return history.bot_commits(self.repo, since or self.baseline())

    def committed_text(self, path: str) -> str | None:
        """A file's text at HEAD; ``None`` when HEAD does not have it."""
        try:
            text: str = self.repo.git.show(f"HEAD:{path}", strip_newline_in_stdout=False)
            return text
        except git.GitCommandError:
            return None

    # -- commits ------------------------------------------------------------------------------------
    def commit(self, paths: Iterable[str], message: str) -> str:
        """Commit exactly ``paths`` as the bot; return the sha."""
        paths = sorted(paths)
        self.repo.git.add("--", *paths)
        self._commit_with_message(message, "--", *paths)
        return self.head

    def discard(self) -> None:
        """Throw away uncommitted changes (a failed transform's edits), leaving the tree clean."""
        self.repo.git.reset("-q", "--hard", "HEAD")
        self.repo.git.clean("-q", "-fd")

    def recover(self) -> None:
        """After an interrupt: restart the long-lived git processes GitPython reads objects through (they share
        the terminal's process group, so Ctrl-C stopped them too), and leave the tree as the last commit, which
        the branch points at whether or not a commit was under way. The reset runs in a session of its own: git
        catches a second Ctrl-C to drop its index lock even where the signal is ignored, and fails."""
        self.repo.git.clear_cache()
        for command in (["reset", "-q", "--hard", "HEAD"], ["clean", "-q", "-fd"]):
            self.repo.git.execute(["git", *command], start_new_session=True)

    def revert(self, sha: str, message: str) -> str:
        """A new commit that reverts ``sha`` (history is never rewritten)."""
        self.repo.git.revert("--no-edit", "--no-commit", sha)
        self._commit_with_message(message)
        return self.head

    def _commit_with_message(self, message: str, *args: str) -> None:
        """``git commit`` as the bot with ``message`` read from a file: a plan item's text can make a message
        longer than the command line allows."""
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", prefix="perfbot-commit-", suffix=".txt"
        ) as file:
            file.write(message)
            file.flush()
            self.repo.git.commit("-q", "--no-verify", "-F", file.name, *args, env=bot_git_environment())
