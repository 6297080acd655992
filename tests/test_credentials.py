"""Credentials out of the benchmark's reach (#28, item 5): a benchmarked revision whose program reads every
process's environment and command line it can (its parent chain included) and prints them raw, base64 and hex,
run through `/bot bench` from a real `bot serve` that holds a token and a webhook secret; and the ways the bot
reads them once (variable, file, helper) and scrubs them from its own process."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap

import git
import pytest
from bot_process import ROOT, bot_serve, comment_event, deliver, wait_until
from git_repos import commit_all

from bot.redact import encodings

REPO = "acme/snooped"
ISSUE = 3
TOKEN = "ghp_" + "S3cr3tT0kenOfTheBot" * 2
SECRET = "webhook-secret-" + "never-to-be-read"

SNOOP = """\
import base64, os, sys

def readable(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as error:
        return ("unreadable: " + type(error).__name__).encode()

found = []
chain, pid = [], os.getpid()
while pid > 1:
    chain.append(pid)
    stat = readable(f"/proc/{pid}/stat").decode(errors="replace")
    pid = int(stat.rsplit(")", 1)[1].split()[1]) if ")" in stat else 1
pids = [p for p in os.listdir("/proc") if p.isdigit()]
for pid in dict.fromkeys([*map(str, chain), *pids]):
    for what in ("environ", "cmdline"):
        data = readable(f"/proc/{pid}/{what}")
        found.append(f"{pid} {what}: {data!r}")
        found.append(f"{pid} {what} base64: {base64.b64encode(data).decode()}")
        found.append(f"{pid} {what} hex: {data.hex()}")
report = "\\n".join(found)
with open(OUT, "w") as handle:
    handle.write("parent chain: " + " ".join(map(str, chain)) + "\\n" + report)
print(report)
sys.exit(1)  # a failed run: its log tail goes into the results comment
"""


def every_form(value: str) -> set[str]:
    raw = value.encode()
    return encodings(value) | {base64.b64encode(raw).decode(), raw.hex()}


@pytest.mark.slow  # a real bot serve runs the bench (about 9 s)
def test_a_benchmarked_program_finds_no_credential_of_the_bot(github_server, bare_remote, tmp_path):
    out = tmp_path / "snooped.txt"
    checkout = tmp_path / "checkout"
    repo = git.Repo.init(checkout, initial_branch="main")
    (checkout / "snoop.py").write_text(f"OUT = {str(out)!r}\n" + SNOOP)
    (checkout / "pyproject.toml").write_text(
        textwrap.dedent("""\
            [tool.bot]
            size = "tiny"
            [tool.bot.workloads.snoop]
            command = "python snoop.py --size {size} --steps {steps} --seed {seed}"
            steps = 2
            warmup_steps = 0
            timeout_s = 120
        """)
    )
    commit_all(repo, "a training program that reads what it can")
    repo.git.push(str(bare_remote), "main")
    api = github_server
    api.add_user(TOKEN, "perfbot")
    api.add_user("token-of-wes", "wes")
    api.add_repo(REPO, roles={"wes": "write"}, clone_url=str(bare_remote))
    api.add_issue(REPO, ISSUE, "plan", "| # | Change |\n|---|---|\n| A | workers |")
    env = {
        "PERFBOT_TOKEN": TOKEN,
        "PERFBOT_WEBHOOK_SECRET": SECRET,
        "PERFBOT_REPOSITORY": REPO,
        "GITHUB_API_URL": api.url,
    }
    line = "/bot bench main --min-time 0 --repeats 1 --max-repeats 1 --max-host-load 1"
    with bot_serve(checkout, tmp_path / "state", env, tmp_path / "serve.log") as (process, address):
        event = comment_event(api, REPO, ISSUE, "wes", line)
        assert deliver(address, SECRET, event) == 202
        comment_id = event["comment"]["id"]
        done = wait_until(lambda: {"rocket", "confused"} & set(api.reactions_on(comment_id)), 120)
        assert done, (tmp_path / "serve.log").read_text()
        bot_pid = process.pid

    snooped = out.read_text()
    chain = snooped.splitlines()[0].split()[2:]
    assert str(bot_pid) in chain  # the program did walk up to the bot's process
    assert f"{bot_pid} environ" in snooped
    posted = json.dumps(api.comments_on(REPO, ISSUE))
    assert "snoop" in posted  # the failed run's log tail was posted
    for value in (TOKEN, SECRET):
        for form in every_form(value):
            assert form not in snooped, f"a form of a credential was readable: {form}"
            assert form not in posted


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    environment = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=60, check=False
    )


SECURE_AND_LOOK = r"""\
import os, subprocess, sys
from bot import credentials
credentials.secure()
print(credentials.get(credentials.TOKEN), credentials.get(credentials.WEBHOOK_SECRET))
print(sorted(k for k in os.environ if k.startswith("PERFBOT")), credentials.is_dumpable())
child = (
    "try: print(open('/proc/{}/environ', 'rb').read())\n"
    "except OSError as error: print('unreadable:', type(error).__name__)"
).format(os.getpid())
print(subprocess.run([sys.executable, "-c", child], capture_output=True, text=True).stdout)
"""


@pytest.mark.parametrize("form", ["variable", "file", "helper"])
def test_credentials_are_read_once_then_gone_from_the_process(tmp_path, form):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    given = {
        "variable": {"PERFBOT_TOKEN": TOKEN},
        "file": {"PERFBOT_TOKEN_FILE": str(token_file)},
        "helper": {"PERFBOT_TOKEN_COMMAND": f"cat {token_file}"},
    }[form]
    done = run_python(SECURE_AND_LOOK, {**given, "PERFBOT_WEBHOOK_SECRET": SECRET})
    assert done.returncode == 0, done.stderr
    held, variables, environ = done.stdout.splitlines()[:3]
    assert held == f"{TOKEN} {SECRET}"  # read once, held by the process
    assert variables == "[] False"  # gone from its environment; not dumpable
    assert "PERFBOT" in environ or form != "variable"  # the child did read the block it was started with
    assert TOKEN not in environ and SECRET not in environ  # the values there are overwritten


def test_an_unreadable_credential_file_is_one_line_of_bad_input(tmp_path):
    missing = tmp_path / "no-such-token"
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "list"],
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), "PERFBOT_TOKEN_FILE": str(missing)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"bot: error: PERFBOT_TOKEN_FILE: cannot read {missing}: No such file or directory"
    ]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any process's memory (CAP_SYS_PTRACE)")
def test_another_process_of_the_same_user_cannot_read_the_bots_memory(tmp_path):
    code = SECURE_AND_LOOK.replace("/environ", "/mem")
    done = run_python(code, {"PERFBOT_TOKEN": TOKEN})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[2] == "unreadable: PermissionError"


def test_redaction_masks_every_encoding_of_a_registered_secret():
    from bot.redact import redact, register_secret

    secret = "registered-" + "s3cret-value" * 2
    register_secret(secret)
    for prefix in ("", "a", "ab", "x-access-token:"):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(f"{prefix}{secret}\n".encode()).decode()
            assert "***" in redact(encoded), (prefix, encoded)
    assert redact(secret.encode().hex().upper()) == "***"
    assert redact(f"token%3D{secret}") == "token%3D***"
    assert redact("an ordinary line of log text") == "an ordinary line of log text"
