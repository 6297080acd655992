"""A real ``bot`` process for the credential tests: ``bot serve`` in a checkout, and signed deliveries to it."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def wait_until(condition: Callable[[], object], timeout: float) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@contextlib.contextmanager
def bot_serve(
    checkout: Path, state: Path, env: dict[str, str], log_path: Path
) -> Iterator[tuple[subprocess.Popen, tuple[str, int]]]:
    """``bot serve --port 0`` in ``checkout`` with ``env`` added to a minimal environment, until the block
    ends; yields the process and the address it listens on."""
    environment = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONPATH": str(ROOT),
        "PERFBOT_STATE_DIR": str(state),
        **env,
    }
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "serve", "--port", "0"],
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
    body = json.dumps(event).encode()
    headers = {
        "X-GitHub-Event": "issue_comment",
        "X-GitHub-Delivery": f"delivery-{time.monotonic_ns()}",
        "X-Hub-Signature-256": "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest(),
        "Content-Type": "application/json",
    }
    request = urllib.request.Request(
        f"http://{address[0]}:{address[1]}/webhook", body, headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


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
