"""`/bot apply --tier 1` from an issue comment, end to end: the local GitHub API server, a bare git remote,
the example repository and its plan, and the real runner."""

from __future__ import annotations

import json

import git
import pytest
from git_repos import committed_example

from bot.history import bot_commits
from bot.progress import Progress
from bot.service.dispatch import handle_event, run_request

REPO = "acme/trainer"
ISSUE = 12
TOKEN = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0" * 2
ENV_NAMES = {"GITHUB_EVENT_NAME": "issue_comment", "PERFBOT_TOKEN": TOKEN, "GITHUB_REPOSITORY": REPO}


@pytest.fixture
def setup(github_server, bare_remote, tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    repo = committed_example(checkout)
    repo.git.push(str(bare_remote), "main")
    github_server.add_user(TOKEN, "perfbot")
    for login in ("wes", "rob"):
        github_server.add_user(f"token-of-{login}", login)
    github_server.add_repo(REPO, roles={"wes": "write", "rob": "read"}, clone_url=str(bare_remote))
    github_server.add_issue(REPO, ISSUE, "Tier 1 perf plan", (checkout / "PLAN.md").read_text())
    monkeypatch.chdir(checkout)
    return github_server, repo, bare_remote, tmp_path


def trigger(api, tmp_path, author: str, line: str) -> tuple[int, dict]:
    comment = api.add_comment(REPO, ISSUE, author, line)
    event = {
        "action": "created",
        "issue": {"number": ISSUE},
        "comment": {
            "id": comment["id"],
            "body": line,
            "html_url": "https://github.example/c",
            "user": {"login": author, "type": "User"},
        },
        "repository": {"full_name": REPO, "id": api.repos[REPO]["id"]},
    }
    path = tmp_path / "event.json"
    path.write_text(json.dumps(event))
    env = {**ENV_NAMES, "GITHUB_API_URL": api.url}
    return handle_event(path, run_request, state_dir=tmp_path / "state", env=env), comment


def bot_comments(api):
    return [c for c in api.comments_on(REPO, ISSUE) if c["author"] == "perfbot"]


def test_write_user_runs_apply_and_the_branch_is_pushed(setup):
    api, repo, remote, tmp_path = setup
    api.fail("POST", rf"/repos/{REPO}/issues/{ISSUE}/comments", 500, times=1)  # the first create fails once
    code, comment = trigger(api, tmp_path, "wes", "/bot apply --tier 1")
    assert code == 0
    assert api.reactions_on(comment["id"]) == ["eyes", "rocket"]

    [progress_comment] = bot_comments(api)  # retried after the 500, no duplicate
    assert progress_comment["body"].startswith("<!-- bot:progress v1 -->")
    assert len(api.comments[progress_comment["id"]]["history"]) >= 2  # edited in place as it went
    progress = Progress.from_comment(progress_comment["body"])
    landed = [r for r in progress.rows if r.status == "landed"]
    assert landed and progress.branch == f"bot/{ISSUE}-tier-1"

    remote_repo = git.Repo(remote)
    pushed = remote_repo.heads[progress.branch].commit
    assert pushed.hexsha == progress.head
    assert repo.active_branch.name == "main"  # the checkout is back on the default branch
    commits = bot_commits(repo, progress.baseline, progress.branch)
    assert [c.sha for c in commits] == [r.commit for r in landed]
    assert all(f"Bot-Issue: {ISSUE}" in repo.commit(c.sha).message for c in commits)
    assert remote_repo.heads["main"].commit.hexsha == progress.baseline  # the default branch is untouched
    for row in landed:
        assert f"https://github.example/{REPO}/commit/{row.commit}" in progress_comment["body"]
    assert TOKEN not in json.dumps(api.comments_on(REPO, ISSUE))


def test_read_only_user_is_refused_and_nothing_runs(setup):
    api, repo, remote, tmp_path = setup
    code, comment = trigger(api, tmp_path, "rob", "/bot apply --tier 1")
    assert code == 0
    [reply] = bot_comments(api)
    assert "write" in reply["body"] and "@rob" in reply["body"]
    assert [h.name for h in git.Repo(remote).heads] == ["main"]
    assert repo.active_branch.name == "main"
