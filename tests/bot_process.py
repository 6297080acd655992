"""A real ``bot serve`` process for the tests that attack one: started in a checkout, and signed deliveries to
it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from test_github import post, wait_until

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def bot_serve(
    checkout: Path, state: Path, env: dict[str, str], log_path: Path, *options: str
) -> Iterator[tuple[subprocess.Popen, tuple[str, int]]]:
    """``bot serve --port 0 [options]`` in ``checkout`` with ``env`` added to a minimal environment, until the
    block ends; yields the process and the address it listens on."""
    environment = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONPATH": str(ROOT),
        "PERFBOT_STATE_DIR": str(state),
        **env,
    }
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "serve", "--port", "0", *options],
            cwd=checkout,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        listening = re.compile(r"listening on http://([\d.]+):(\d+)/")
        assert wait_until(lambda: listening.search(log_path.read_text(errors="replace")), 60), (
            log_path.read_text(errors="replace")
        )
        found = listening.search(log_path.read_text())
        yield process, (found[1], int(found[2]))
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(15)


def deliver(address: tuple[str, int], secret: str, event: dict) -> int:
    """POST ``event`` to ``/webhook`` signed with ``secret``; the HTTP status."""
    return post(address, json.dumps(event).encode(), secret=secret)[0]


def comment_event(api, repo: str, issue: int, author: str, body: str) -> dict:
    """A new comment on the fake API and the ``issue_comment`` event GitHub would send for it."""
    comment = api.add_comment(repo, issue, author, body)
    return {
        "action": "created",
        "issue": {"number": issue},
        "comment": {
            "id": comment["id"],
            "body": body,
            "html_url": f"https://github.example/{repo}/issues/{issue}#c{comment['id']}",
            "user": {"login": author, "type": "User"},
        },
        "repository": {"full_name": repo, "id": api.repos[repo]["id"]},
    }
