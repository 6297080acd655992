"""Arguments as data (#28, item 6): ``{size}``, ``{steps}`` and ``{seed}`` are checked and quoted into a
workload command, so a value is always one argument; ``--size 'tiny --injected-arg X'`` is refused with one
line, from the command line and from a comment."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import git
import pytest
from bot_process import bot_serve, comment_event, deliver, wait_until
from git_repos import commit_all

from benchmarks.spec import BenchOptionError, BenchSpec, BenchSpecError, Workload
from bot.service.dispatch import CommentCommand, Dispatcher
from bot.trackers.local import LocalTracker

ROOT = Path(__file__).resolve().parents[1]
INJECTED = "tiny --injected-arg X"
WORKLOAD = Workload("train", "python train.py --size {size} --max-steps {steps} --seed {seed}", steps=4)


def test_a_filled_in_command_has_each_value_as_one_argument():
    assert shlex.split(WORKLOAD.render("0.5b", -3)) == [
        "python",
        "train.py",
        "--size",
        "0.5b",
        "--max-steps",
        "4",
        "--seed",
        "-3",
    ]


@pytest.mark.parametrize("size", [INJECTED, "--resume", "tiny;rm -rf /", "$(id)", "tiny\nx", "", "a b"])
def test_a_size_that_is_not_a_name_is_refused_everywhere(size):
    with pytest.raises(ValueError, match="a size is a name"):
        WORKLOAD.render(size, 0)
    spec = BenchSpec({"train": WORKLOAD})
    with pytest.raises(BenchOptionError, match=r"^--size: a size is a name"):
        spec.override(size=size)
    with pytest.raises(BenchSpecError, match=r"\[tool.bot.size\] a size is a name"):
        BenchSpec.from_table({"size": size, "workloads": {"t": {"command": "python t.py", "steps": 2}}}, "p")


def test_steps_and_seed_must_be_integers():
    with pytest.raises(ValueError, match="seed must be an integer"):
        WORKLOAD.render("tiny", "0 --x")
    with pytest.raises(ValueError, match="steps must be an integer"):
        Workload("t", "python t.py {steps}", steps="4 --x").render("tiny", 0)


def test_the_cli_refuses_an_injected_size_in_one_line(tmp_path):
    repo = git.Repo.init(tmp_path, initial_branch="main")
    (tmp_path / "train.py").write_text("print('trained')\n")
    commit_all(repo, "a program")
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "bench", "--repo", str(tmp_path), "--size", INJECTED],
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    line = done.stderr.splitlines()[0]  # argparse's usage follows, as for every option the parser refuses
    assert line.startswith("bot: error: argument --size: a size is a name") and INJECTED in line


def test_a_comment_with_an_injected_size_is_answered_and_nothing_runs(tmp_path):
    ran = []
    dispatcher = Dispatcher(lambda request: ran.append(request) or 0, tmp_path / "state")
    tracker = LocalTracker(tmp_path)
    line = f"/bot bench --size '{INJECTED}'"
    command = CommentCommand("acme/t", 1, 11, "https://example/c", "wes", line)
    assert dispatcher.handle(command, tracker) == 0
    assert ran == []
    [answer] = [c.body for c in tracker.comments(1)]
    assert "is not a valid command" in answer and "argument --size: a size is a name" in answer
    ok = CommentCommand("acme/t", 1, 12, "https://example/c", "wes", "/bot bench --size tiny --steps 3")
    dispatcher.handle(ok, tracker)
    [request] = ran
    assert (request.args.size, request.args.steps) == ("tiny", 3)


TOKEN = "ghp_" + "Ar9sAsDaTa" * 4
SECRET = "a-webhook-secret-for-argument-tests"
PYPROJECT = """\
[tool.bot.workloads.train]
command = "python train.py --size {size} --steps {steps}"
steps = 2
"""


@pytest.mark.slow  # a real bot serve answers (about 6 s)
def test_a_real_bot_serve_refuses_an_injected_size_and_runs_nothing(github_server, bare_remote, tmp_path):
    checkout = tmp_path / "checkout"
    repo = git.Repo.init(checkout, initial_branch="main")
    (checkout / "train.py").write_text("open('ran.txt', 'w').write('a benchmark ran')\n")
    (checkout / "pyproject.toml").write_text(PYPROJECT)
    commit_all(repo, "a program")
    repo.git.push(str(bare_remote), "main")
    github_server.add_user(TOKEN, "perfbot")
    github_server.add_repo("acme/args", roles={"wes": "write"}, clone_url=str(bare_remote))
    github_server.add_issue("acme/args", 3, "Bench it", "")
    env = {
        "PERFBOT_TOKEN": TOKEN,
        "PERFBOT_WEBHOOK_SECRET": SECRET,
        "PERFBOT_REPOSITORY": "acme/args",
        "GITHUB_API_URL": github_server.url,
    }
    with bot_serve(checkout, tmp_path / "state", env, tmp_path / "serve.log") as (_, address):
        event = comment_event(github_server, "acme/args", 3, "wes", f"/bot bench --size '{INJECTED}'")
        assert deliver(address, SECRET, event) == 202
        comment_id = event["comment"]["id"]
        assert wait_until(lambda: "confused" in github_server.reactions_on(comment_id), 60), (
            tmp_path / "serve.log"
        ).read_text()
    replies = [c["body"] for c in github_server.comments_on("acme/args", 3) if c["id"] != comment_id]
    assert len(replies) == 1 and "argument --size: a size is a name" in replies[0]
    assert "--injected-arg" not in (tmp_path / "serve.log").read_text().split("listening on", 1)[1]
    assert not (checkout / "ran.txt").exists() and not (checkout / ".bot" / "results").exists()
