"""Nothing pushed unscanned (#28, item 4): `/bot apply` through a real `bot serve` on a repository whose
optimization commit would carry credentials of several kinds (the edited line holds them) and whose plan item
names one: nothing reaches the remote, the branch stays local, the error names the commit, the place and the
kind, and no value appears in a comment or in the commit message."""

from __future__ import annotations

import base64
import json

import git
import pytest
from bot_process import bot_serve, comment_event, deliver, wait_until
from git_repos import commit_all

from bot.publish import credentials_in
from bot.redact import encodings

REPO = "acme/leaky"
ISSUE = 7
TOKEN = "ghp_" + "T0k3nOfTheB0t" * 3
SECRET = "a-webhook-secret-of-some-length"
# Built here so that no scanner of this repository finds them in its own source.
CREDENTIALS = {
    "GitHub token": "ghp_" + "aBcDeFgHiJ" * 4,
    "AWS access key id": "AKIA" + "IOSFODNN7EXAMPL1",
    "Hugging Face token": "hf_" + "abcdefghij" * 3 + "KLMNOP",
    "Slack token": "xoxb-" + "1234567890-abcdefghij",
    "Google API key": "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
}
PLAN_KEY = "sk-" + "proj" + "ABCDEFGHIJ" * 3
TRAIN = """\
import torch
from torch.utils.data import DataLoader


def main():
    dataset = list(range(64))
    loader = DataLoader(dataset, batch_size=8)  # {credentials}
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in loader:
        model(batch.float().unsqueeze(1)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    main()
"""
PLAN = f"""\
# Plan

### Tier 1

| # | File:Line | Change | Expected win |
|---|---|---|---|
| A | train.py:7 | DataLoader workers (opt:dataloader_workers); the cluster key is {PLAN_KEY} | +10% |
"""


@pytest.fixture
def leaky(github_server, bare_remote, tmp_path):
    checkout = tmp_path / "checkout"
    repo = git.Repo.init(checkout, initial_branch="main")
    (checkout / "train.py").write_text(TRAIN.format(credentials=" ".join(CREDENTIALS.values())))
    (checkout / "PLAN.md").write_text(PLAN)
    commit_all(repo, "a training script")
    repo.git.push(str(bare_remote), "main")
    github_server.add_user(TOKEN, "perfbot")
    github_server.add_user("token-of-wes", "wes")
    github_server.add_repo(REPO, roles={"wes": "write"}, clone_url=str(bare_remote))
    github_server.add_issue(REPO, ISSUE, "Tier 1 plan", PLAN)
    return github_server, repo, bare_remote, tmp_path


@pytest.mark.slow  # a real bot serve runs the apply (about 9 s)
def test_apply_pushes_nothing_that_holds_a_credential(leaky):
    api, repo, remote, tmp_path = leaky
    env = {
        "PERFBOT_TOKEN": TOKEN,
        "PERFBOT_WEBHOOK_SECRET": SECRET,
        "PERFBOT_REPOSITORY": REPO,
        "GITHUB_API_URL": api.url,
    }
    with bot_serve(repo.working_dir, tmp_path / "state", env, tmp_path / "serve.log") as (_, address):
        event = comment_event(api, REPO, ISSUE, "wes", "/bot apply --tier 1")
        assert deliver(address, SECRET, event) == 202
        comment_id = event["comment"]["id"]
        assert wait_until(lambda: "confused" in api.reactions_on(comment_id), 60), (
            tmp_path / "serve.log"
        ).read_text()

    assert [head.name for head in git.Repo(remote).heads] == ["main"]  # nothing pushed
    branch = repo.heads["bot/7-tier-1"]  # the branch stays local, with the commit
    commit = branch.commit
    assert commit.message.startswith("perf(data)")
    assert PLAN_KEY not in commit.message and "***" in commit.message  # plan text masked at commit time
    committed = commit.tree["train.py"].data_stream.read().decode()
    assert committed.startswith("import os\n\nimport torch\n")  # the commit's import, sorted into the block
    assert all(value in committed.splitlines()[11] for value in CREDENTIALS.values())  # the edited line

    posted = json.dumps(api.comments_on(REPO, ISSUE))
    for value in [*CREDENTIALS.values(), PLAN_KEY, TOKEN]:
        assert value not in posted
        assert base64.b64encode(value.encode()).decode() not in posted
    progress = next(c["body"] for c in api.comments_on(REPO, ISSUE) if "bot:progress" in c["body"])
    reply = next(c["body"] for c in api.comments_on(REPO, ISSUE) if "failed" in c["body"])
    for text in (progress, reply):
        assert (
            f"not pushed: commit {commit.hexsha[:10]} adds a GitHub token at train.py:12 (and 4 more)" in text
        )
        assert "bot/7-tier-1 stays local" in text


def test_every_kind_on_the_line_and_the_bots_own_token_in_any_encoding_are_found(tmp_path):
    repo = git.Repo.init(tmp_path, initial_branch="main")
    (tmp_path / "a.txt").write_text("nothing\n")
    base = commit_all(repo, "base")
    own = "bot-own-" + "secret-value" * 2
    encodings_of_own = sorted(encodings(own))
    (tmp_path / "a.txt").write_text(
        "nothing\n" + " ".join(CREDENTIALS.values()) + "\n" + "\n".join(encodings_of_own) + "\n"
    )
    commit_all(repo, f"a change\n\nthe key is {PLAN_KEY}")
    from bot.redact import register_secret

    register_secret(own)
    leaks = credentials_in(repo, base, "HEAD")
    where = {(leak.path, leak.line, leak.kind) for leak in leaks}
    assert {("a.txt", 2, kind) for kind in CREDENTIALS} <= where
    assert ("", 3, "OpenAI-style API key") in where  # the message's third line
    own_lines = {line for path, line, kind in where if kind == "credential this bot was given"}
    assert own_lines == set(range(3, 3 + len(encodings_of_own)))  # raw, URL, hex, base64: every form
    assert all(value not in str(leak) for leak in leaks for value in CREDENTIALS.values())
