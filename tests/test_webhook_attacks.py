"""Attacks on ``bot serve``, on real sockets on 127.0.0.1: a real ``bot serve`` process for exhaustion (its RSS
and thread count read from /proc), ``make_server`` in-process with the local GitHub API for the rest. Either
way the server's log must hold one line per delivery event and no traceback (``tests/server_log.py``), unless
a test plants a bug."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bot_process import bot_serve as serve_process
from server_log import ENDS, check_server_log
from test_github import RecordingRunner, post, wait_until

from bot.redact import redact
from bot.service.dispatch import (
    Dispatcher,
    IssueLock,
    command_from_event,
    configured_repository,
    handle_event,
    repository_of,
)
from bot.service.queue import MAX_ATTEMPTS
from bot.service.server import make_server

ROOT = Path(__file__).resolve().parents[1]
REPO = "acme/trainer"
EVIL = "evil/other"
ISSUE = 5
TOKEN = "ghp_" + "Q1w2E3r4T5y6U7i8O9p0" * 2
SECRET = "webhook-secret-for-attacks"
ROLES = {"wes": "write", "rob": "read"}
MIB = 1024 * 1024
PERMISSION = rf"/repos/{REPO}/collaborators/{{}}/permission"

pytestmark = pytest.mark.usefixtures("service_log")


@pytest.fixture
def api(github_server, tmp_path):
    github_server.add_user(TOKEN, "perfbot")
    for login in ROLES:
        github_server.add_user(f"token-of-{login}", login)
    github_server.add_repo(REPO, roles=ROLES)
    github_server.add_repo(EVIL, roles={"wes": "admin"})
    for name in (REPO, EVIL):
        github_server.add_issue(name, ISSUE, "plan", "| # | Change |\n|---|---|\n| A | workers |")
    return github_server


def event(api, author: str, body: str, *, repo: str = REPO, comment_id: int | None = None) -> dict:
    if comment_id is None:
        comment_id = api.add_comment(repo, ISSUE, author, body)["id"]
    return {
        "action": "created",
        "issue": {"number": ISSUE},
        "comment": {"id": comment_id, "body": body, "user": {"login": author, "type": "User"}},
        "repository": {"full_name": repo, "id": api.repos[repo]["id"]},
    }


def signed(body: bytes) -> str:
    return "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()


@pytest.fixture
def server(api, tmp_path):
    """``make_server`` in a thread; the runner records what ran, the factory which trackers were made."""
    from bot.trackers.github import GitHubTracker

    runner, made, failures = RecordingRunner(), [], []

    def factory(repo: str):
        made.append(repo)
        if failures:
            raise failures.pop()
        return GitHubTracker(repo, TOKEN, base_url=api.url, backoff=0.01, seconds_between_writes=0)

    webhook = make_server(
        "127.0.0.1",
        0,
        SECRET,
        runner,
        repository=REPO,
        tracker_factory=factory,
        state_dir=tmp_path / "state",
        retry_delay=0.05,
        request_timeout=2.0,
    )
    thread = threading.Thread(target=webhook.serve_forever, daemon=True)
    thread.start()
    yield webhook, runner, made, failures
    webhook.shutdown()
    thread.join(10)


# --- 1. unauthenticated exhaustion, against a real `bot serve` ----------------------------------------------


@contextlib.contextmanager
def bot_serve(tmp_path: Path, api, *options: str) -> Iterator[tuple[subprocess.Popen, tuple[str, int]]]:
    """``bot serve --port 0 [options]`` in its own process for the attacked repository, until the block ends;
    then its log (``serve.log``) must hold no traceback and only well-formed delivery lines."""
    env = {
        **os.environ,
        "PERFBOT_WEBHOOK_SECRET": SECRET,
        "PERFBOT_REPOSITORY": REPO,
        "PERFBOT_TOKEN": TOKEN,
        "GITHUB_API_URL": api.url,
    }
    log = tmp_path / "serve.log"
    with serve_process(tmp_path, tmp_path / "state", env, log, *options) as started:
        yield started
    check_server_log(log.read_text(errors="replace"))


def settled(tmp_path: Path) -> None:
    """Wait until the ``bot serve`` started by :func:`bot_serve` has loaded its command parser (it imports
    every command, some hundred MB): memory measured after that is the server's own."""
    log = tmp_path / "serve.log"
    assert wait_until(lambda: "command parser loaded" in log.read_text(errors="replace"), timeout=60)


def usage(pid: int) -> tuple[float, int]:
    """(resident memory in MB, threads) of a process."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss = int(re.search(r"VmRSS:\s+(\d+) kB", status)[1]) / 1024
    return rss, int(re.search(r"Threads:\s+(\d+)", status)[1])


def raw_request(address, head: bytes, timeout: float = 5.0) -> tuple[socket.socket, bytes]:
    """Send ``head`` (request line and headers) and read what comes back before any body is sent."""
    sock = socket.create_connection(address, timeout=timeout)
    sock.sendall(head)
    try:
        answer = sock.recv(4096)
    except (TimeoutError, ConnectionResetError):
        answer = b""
    return sock, answer


def stream(sock: socket.socket, total: int) -> int:
    """Send up to ``total`` bytes; how many went out before the server closed the connection."""
    chunk, sent = b"\0" * MIB, 0
    with contextlib.suppress(OSError):
        while sent < total:
            sock.sendall(chunk)
            sent += len(chunk)
    sock.close()
    return sent


def test_serve_refuses_bad_lengths_and_a_200_mib_unsigned_stream(api, tmp_path):
    with bot_serve(tmp_path, api) as (process, address):
        settled(tmp_path)
        rss_before, threads_before = usage(process.pid)
        fake = b"X-Hub-Signature-256: sha256=" + b"0" * 64 + b"\r\n"
        start = b"POST /webhook HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: issue_comment\r\n"
        sent = {}
        for name, head, status in [
            ("unsigned", start + b"Content-Length: 209715200\r\n\r\n", b" 401 "),
            ("minus-one", start + fake + b"Content-Length: -1\r\n\r\n", b" 400 "),
            ("abc", start + fake + b"Content-Length: abc\r\n\r\n", b" 400 "),
            ("too-large", start + fake + b"Content-Length: 209715200\r\n\r\n", b" 413 "),
            ("chunked", start + fake + b"Transfer-Encoding: chunked\r\n\r\n", b" 411 "),
            ("no-length", start + fake + b"\r\n", b" 411 "),
        ]:
            started = time.monotonic()
            sock, answer = raw_request(address, head)
            assert status in answer.split(b"\r\n", 1)[0], (name, answer)
            sent[name] = stream(sock, 200 * MIB)
            assert time.monotonic() - started < 10, name
        rss_after, threads_after = usage(process.pid)
        assert process.poll() is None
        print(
            f"\n200 MiB streams: RSS {rss_before:.0f} -> {rss_after:.0f} MB, threads {threads_before} -> "
            f"{threads_after}, MiB the client got out before the server closed: "
            + ", ".join(f"{k} {v // MIB}" for k, v in sent.items())
        )
        assert rss_after - rss_before < 30
        assert all(count < 64 * MIB for count in sent.values())
        assert post(address, b"{}", event="ping", secret=SECRET) == (200, "pong\n")


def test_serve_survives_300_slow_clients(api, tmp_path):
    timeout, cap = 3.0, 16
    with bot_serve(tmp_path, api, "--max-connections", str(cap), "--request-timeout", str(timeout)) as (
        process,
        address,
    ):
        trickle = socket.create_connection(address, timeout=5)  # one byte at a time: never idle long
        trickle.sendall(b"POST /webhook HTTP/1.1\r\n")
        started, cut = time.monotonic(), None
        with contextlib.suppress(OSError):
            while time.monotonic() - started < 3 * timeout:
                trickle.sendall(b"X")
                time.sleep(0.2)
        cut = time.monotonic() - started
        trickle.close()
        assert cut < timeout + 2
        settled(tmp_path)
        rss_before, threads_before = usage(process.pid)

        slow = []
        for _ in range(300):
            sock = socket.create_connection(address, timeout=5)
            with contextlib.suppress(OSError):
                sock.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # headers that never end
            slow.append(sock)
        time.sleep(0.5)
        rss_peak, threads_peak = usage(process.pid)
        # one event loop holds every connection: no thread per client (303 threads for 300 clients once)
        assert threads_peak <= threads_before + 2

        def still_open() -> int:
            count = 0
            for sock in slow:
                sock.settimeout(0.01)
                try:
                    while sock.recv(4096):  # a 503, then the close
                        pass
                except TimeoutError:
                    count += 1
                except OSError:
                    pass
            return count

        assert wait_until(lambda: still_open() == 0, timeout=timeout + 5)
        rss_after, threads_after = usage(process.pid)
        for sock in slow:
            sock.close()
        print(
            f"\n300 slow clients (cap {cap}, {timeout:.0f} s per request): "
            f"trickling client cut after {cut:.1f} s; "
            f"threads {threads_before} -> {threads_peak} -> {threads_after}; "
            f"RSS {rss_before:.0f} -> {rss_peak:.0f} -> {rss_after:.0f} MB"
        )
        assert post(address, b"{}", event="ping", secret=SECRET) == (200, "pong\n")
        assert process.poll() is None


# --- 2. replay ----------------------------------------------------------------------------------------------


def test_same_signed_body_under_a_new_delivery_id_is_ignored(api, server):
    webhook, runner, _, _ = server
    body = json.dumps(event(api, "wes", "/bot bench")).encode()
    assert post(webhook.address, body, delivery="d-1", secret=SECRET)[0] == 202
    assert wait_until(lambda: len(runner.requests) == 1)
    for delivery in ("d-2", "d-3", "d-1"):
        assert post(webhook.address, body, delivery=delivery, secret=SECRET) == (
            200,
            "ignored: this comment was already handled\n",
        )
    time.sleep(0.2)
    assert len(runner.requests) == 1


def test_a_failed_check_is_tried_again_and_githubs_redelivery_revives_one_that_gave_up(
    api, server, service_log
):
    webhook, runner, made, failures = server
    failures.append(ConnectionError("GitHub's API is down"))  # the first check fails: the queue tries again
    body = json.dumps(event(api, "wes", "/bot bench")).encode()
    assert post(webhook.address, body, delivery="d-8", secret=SECRET)[0] == 202
    assert wait_until(lambda: len(runner.requests) == 1) and len(made) == 2

    failures.extend(
        [ConnectionError("GitHub's API is down")] * MAX_ATTEMPTS
    )  # every check fails: it gives up
    body = json.dumps(event(api, "wes", "/bot bench --size tiny")).encode()
    assert post(webhook.address, body, delivery="d-9", secret=SECRET)[0] == 202
    assert wait_until(lambda: len(made) == 2 + MAX_ATTEMPTS)
    # GitHub's redelivery (the same id), once the queue has given the comment up
    assert wait_until(lambda: post(webhook.address, body, delivery="d-9", secret=SECRET)[0] == 202)
    assert wait_until(lambda: len(runner.requests) == 2)
    tried = ["accepted", *["requeued"] * (MAX_ATTEMPTS - 1), "failed", "accepted", "done"]
    assert wait_until(
        lambda: in_order([o for o in outcomes(service_log)["d-9"] if o != "ignored"]) == in_order(tried)
    )
    assert in_order(outcomes(service_log)["d-8"]) == in_order(["accepted", "requeued", "done"])


# --- 3. one repository --------------------------------------------------------------------------------------


def test_signed_delivery_for_another_repository_is_ignored(api, server):
    webhook, runner, made, _ = server
    body = json.dumps(event(api, "wes", "/bot apply --tier 1", repo=EVIL)).encode()
    assert post(webhook.address, body, secret=SECRET) == (200, f"ignored: this server serves {REPO}\n")
    time.sleep(0.3)
    assert made == [] and runner.requests == []
    assert [c["author"] for c in api.comments_on(EVIL, ISSUE)] == ["wes"]
    assert api.reactions == []


def test_actions_event_for_another_repository_is_ignored(api, tmp_path):
    runner = RecordingRunner()
    path = tmp_path / "event.json"
    path.write_text(json.dumps(event(api, "wes", "/bot apply --tier 1", repo=EVIL)))
    env = {"PERFBOT_TOKEN": TOKEN, "GITHUB_API_URL": api.url, "GITHUB_REPOSITORY": REPO}
    assert handle_event(path, runner, state_dir=tmp_path / "state", env=env) == 0
    assert runner.requests == [] and api.requests == []


def test_the_served_repository_comes_from_the_setting_or_origin(tmp_path):
    import git

    assert configured_repository({"PERFBOT_REPOSITORY": "Acme/Trainer"}, tmp_path) == "Acme/Trainer"
    repo = git.Repo.init(tmp_path / "clone")
    assert configured_repository({}, tmp_path / "clone") is None  # no origin: nothing is served
    repo.create_remote("origin", "https://ghe.example:8443/acme/trainer.git")
    assert configured_repository({}, tmp_path / "clone") == "acme/trainer"
    for url in (
        "git@github.com:acme/trainer.git",
        "ssh://git@github.com/acme/trainer",
        "https://x/acme/trainer/",
    ):
        assert repository_of(url) == "acme/trainer"
    assert repository_of("/srv/git/trainer.git") is None


# --- 4. redaction in linear time ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "a" * 65536,
        "a://" * 16384,
        "https://" + "x" * 65536,
        "sk-" * 21845,
        "ghp_" * 16384,
        "password='" * 6553,
        "aws_secret_access_key=" * 2978,
        "-----BEGIN RSA PRIVATE KEY-----" * 2114,
        " " * 65536,
    ],
    ids=["letters", "schemes", "long-url", "sk", "ghp", "password", "aws", "private-keys", "spaces"],
)
def test_redaction_of_a_65k_comment_takes_milliseconds(text):
    started = time.monotonic()
    redact(text)
    assert time.monotonic() - started < 0.5  # the unanchored scheme pattern took 21 s on the first one


def test_long_comment_from_an_outsider_is_answered_at_once_with_info_logging(api, server, caplog):
    caplog.set_level(logging.INFO)
    webhook, _, _, _ = server
    body = json.dumps(event(api, "rob", "/bot " + "a" * 65530)).encode()
    started = time.monotonic()
    assert post(webhook.address, body, secret=SECRET)[0] == 202
    assert time.monotonic() - started < 3  # GitHub gives up after 10 s
    assert wait_until(lambda: len(api.comments_on(REPO, ISSUE)) == 2)  # the refusal


# --- 7. what a comment may do -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        b"[]",
        b'"created"',
        b'{"action": "created", "comment": "x", "issue": {}, "repository": {}}',
        b'{"action": "created", "comment": {"id": 1, "body": "/bot help", "user": {"login": "wes"}},'
        b' "issue": {"number": "five"}, "repository": {"full_name": "acme/trainer", "id": 1}}',
        b'{"action": "created", "comment": {"id": null, "body": "/bot help", "user": {"login": "wes"}},'
        b' "issue": {"number": 5}, "repository": {"full_name": "acme/trainer", "id": 1}}',
        b'{"action": "created", "comment": {"id": 1, "body": "/bot help", "user": {"login": "wes"}},'
        b' "issue": {"number": 5}, "repository": "acme/trainer"}',
        b'{"action": "created", "comment": {"id": 1, "body": ["/bot"], "user": {}}, "issue": {"number": 5}}',
        b"[" * 200_000,
        b"\xff\xfe not utf-8",
    ],
)
def test_malformed_signed_payloads_get_400(server, payload):
    webhook, runner, _, _ = server
    status, text = post(webhook.address, payload, secret=SECRET)
    assert status == 400 and text.startswith("malformed event"), text
    assert post(webhook.address, b"{}", event="ping", secret=SECRET)[0] == 200
    assert runner.requests == []


@pytest.mark.parametrize(
    "body",
    [
        "    /bot apply --tier 1",
        "\t/bot apply --tier 1",
        "```\n/bot apply --tier 1\n```",
        "> /bot apply --tier 1",
    ],
)
def test_only_an_unindented_first_line_triggers(api, body):
    assert command_from_event(event(api, "wes", body, comment_id=1)) is None
    assert command_from_event(event(api, "wes", "/bot apply --tier 1\r\nplease", comment_id=1)).line == (
        "/bot apply --tier 1"
    )


def test_the_bots_own_comments_never_run(api, tmp_path):
    from bot.trackers.github import GitHubTracker

    tracker = GitHubTracker(REPO, TOKEN, base_url=api.url, seconds_between_writes=0)
    api.repos[REPO]["roles"]["perfbot"] = "admin"  # a machine user with write access, typed "User"
    runner = RecordingRunner()
    command = command_from_event(event(api, "perfbot", "/bot apply --tier 1"))
    assert Dispatcher(runner, tmp_path).handle(command, tracker) == 0
    assert runner.requests == [] and api.reactions == []
    assert [c["author"] for c in api.comments_on(REPO, ISSUE)] == ["perfbot"]  # nothing answered


@pytest.mark.parametrize(
    "line",
    [
        "/bot review --results /etc/passwd",
        "/bot review HEAD --results=/home/runner/.ssh/id_rsa",
        "/bot bench --runner ray --address 10.1.2.3:6379",
        "/bot apply --tier 1 --bench --address=ray://attacker.example:10001",
        "/bot apply --tier 1 --runner=ray",
        "/bot apply --tier 1 --issue 3",
        "/bot bench -- --output=/tmp/x",
        "/bot review --plan /etc/hosts",
    ],
)
def test_comments_may_use_only_the_allowed_options(api, tmp_path, line):
    from bot.trackers.github import GitHubTracker

    tracker = GitHubTracker(REPO, TOKEN, base_url=api.url, seconds_between_writes=0)
    runner = RecordingRunner()
    command = command_from_event(event(api, "wes", line))
    Dispatcher(runner, tmp_path).handle(command, tracker)
    assert runner.requests == []
    answer = api.comments_on(REPO, ISSUE)[-1]
    assert answer["author"] == "perfbot" and "is for the command line" in answer["body"]
    assert api.reactions_on(command.comment_id) == ["eyes", "confused"]


def test_the_benchmark_settings_may_come_from_a_comment(api, tmp_path):
    from bot.trackers.github import GitHubTracker

    tracker = GitHubTracker(REPO, TOKEN, base_url=api.url, seconds_between_writes=0)
    runner = RecordingRunner()
    line = "/bot bench --profile 3 --max-repeats 4 --min-time=5 --time-budget 900 --max-host-load 0.2"
    Dispatcher(runner, tmp_path).handle(command_from_event(event(api, "wes", line)), tracker)
    [request] = runner.requests
    assert request.argv[:2] == ("bench", "--profile") and "--max-host-load" in request.argv


# --- 8. the log: one line per delivery event, a traceback only for a bug ------------------------------------


def outcomes(service_log) -> dict[str, list[str]]:
    """The outcomes the log gives each delivery id, in order."""
    found: dict[str, list[str]] = {}
    for line in service_log.lines():
        found.setdefault(line["delivery"], []).append(line["outcome"])
    return found


def in_order(lines: list[str]) -> tuple[int, list[str]]:
    """How often the server accepted a delivery, and what the workers made of it, in order. The two are logged
    on different threads: the worker a delivery wakes may log its first outcome before the server's line."""
    return lines.count("accepted"), [outcome for outcome in lines if outcome != "accepted"]


def test_every_attack_is_one_line_per_delivery_event_and_none_a_traceback(api, server, service_log):
    webhook, runner, _, _ = server
    api.add_user("token-of-ada", "ada")
    api.repos[REPO]["roles"]["ada"] = "write"
    api.fail("GET", PERMISSION.format("ada"), status=403, times=MAX_ATTEMPTS)  # the check meets GitHub's 403

    def send(delivery: str, payload: dict | bytes, **options) -> int:
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        return post(webhook.address, body, delivery=delivery, **{"secret": SECRET, **options})[0]

    def ended(delivery: str) -> bool:
        return bool(ENDS.intersection(outcomes(service_log).get(delivery, [])))

    bench = event(api, "wes", "/bot bench")
    statuses = {
        "unsigned": send("unsigned", b"{}", secret=None),
        "bad-signature": send("bad-signature", b"{}", signature="sha256=" + "0" * 64),
        "not-json": send("not-json", b"{not json"),
        "malformed": send("malformed", b"[]"),
        "ping": send("ping", b"{}", event="ping"),
        "push": send("push", b"{}", event="push"),
        "other-repository": send("other-repository", event(api, "wes", "/bot apply --tier 1", repo=EVIL)),
        "no-permission": send("no-permission", event(api, "rob", "/bot apply --tier 1")),
        "unknown-command": send("unknown-command", event(api, "wes", "/bot frobnicate")),
        "command-line-option": send("command-line-option", event(api, "wes", "/bot review --results /etc/x")),
        "api-403": send("api-403", event(api, "ada", "/bot help")),
        "run": send("run", bench),
    }
    head = (
        b"POST /webhook HTTP/1.1\r\nHost: x\r\n"
        b"X-GitHub-Delivery: oversize\r\nX-GitHub-Event: issue_comment\r\n"
        b"X-Hub-Signature-256: sha256=" + b"0" * 64 + b"\r\nContent-Length: 209715200\r\n\r\n"
    )
    sock, answer = raw_request(webhook.address, head)
    sock.close()
    statuses["oversize"] = int(answer.split()[1])
    assert wait_until(lambda: ended("run"))
    statuses["replay"] = send("replay", bench)
    lock = IssueLock(webhook.workers.dispatcher.state_dir, REPO, ISSUE)
    assert lock.acquire({"author": "wes", "command": "/bot bench"})  # a run in progress on the issue
    statuses["busy"] = send("busy", event(api, "wes", "/bot bench --size tiny"))
    assert wait_until(lambda: ended("busy"))
    lock.release()

    refused, accepted = ["refused"], ["accepted", "refused"]
    expected = {
        "unsigned": (401, refused),
        "bad-signature": (401, refused),
        "not-json": (400, refused),
        "malformed": (400, refused),
        "ping": (200, ["done"]),
        "push": (200, ["ignored"]),
        "other-repository": (200, ["ignored"]),
        "no-permission": (202, accepted),
        "unknown-command": (202, accepted),
        "command-line-option": (202, accepted),
        "api-403": (202, ["accepted", *["requeued"] * (MAX_ATTEMPTS - 1), "failed"]),
        "run": (202, ["accepted", "done"]),
        "oversize": (413, refused),
        "replay": (200, ["ignored"]),
        "busy": (202, accepted),
    }
    assert statuses == {delivery: status for delivery, (status, _) in expected.items()}
    wanted = {delivery: in_order(lines) for delivery, (_, lines) in expected.items()}
    logged = lambda: {delivery: in_order(lines) for delivery, lines in outcomes(service_log).items()}  # noqa: E731
    assert wait_until(lambda: logged() == wanted), outcomes(service_log)
    last = {line["delivery"]: line for line in service_log.lines()}
    assert last["no-permission"] == {
        "delivery": "no-permission",
        "repo": REPO,
        "user": "rob",
        "event": "issue_comment",
        "outcome": "refused",
        "reason": "permission read; answered",
    }
    assert (
        last["api-403"]["reason"]
        == f"the check failed {MAX_ATTEMPTS} times, the last: GitHub API 403: Server Error"
    )
    assert last["unknown-command"]["reason"] == "unknown command frobnicate"
    assert last["busy"]["reason"] == f"a run is in progress on #{ISSUE}; answered"
    assert last["oversize"]["reason"] == "payload too large" and last["oversize"]["repo"] == "-"


def test_a_delivery_id_cannot_forge_a_log_line(api, server, service_log):
    webhook, _, _, _ = server
    forged = 'x" outcome=done reason="ok'  # fields of its own: a parser of the line could be fooled
    status = post(webhook.address, b"{}", delivery=forged, signature="sha256=" + "0" * 64)[0]
    assert status == 401
    [line] = service_log.lines()
    assert line["delivery"] == forged and line["outcome"] == "refused"  # one line, the id quoted in it


@pytest.mark.parametrize("where", ["answer", "check", "run"])
def test_a_planted_bug_logs_one_traceback_on_its_deliverys_line(api, server, service_log, monkeypatch, where):
    webhook, _, _, _ = server

    def planted(*args, **kwargs):
        raise RuntimeError("planted bug")

    from bot.service import server as server_module

    places = {
        "answer": (server_module, "command_from_event"),
        "check": (Dispatcher, "_parse"),
        "run": (RecordingRunner, "__call__"),
    }
    monkeypatch.setattr(*places[where], planted)
    service_log.bugs = 1
    body = json.dumps(event(api, "wes", "/bot bench")).encode()
    status = post(webhook.address, body, delivery="bug", secret=SECRET)[0]
    assert status == (500 if where == "answer" else 202)
    assert wait_until(lambda: in_order(outcomes(service_log).get("bug", []))[1] == ["failed"])
    assert in_order(outcomes(service_log)["bug"]) == in_order(
        ["failed"] if where == "answer" else ["accepted", "failed"]
    )
    [record] = service_log.tracebacks()
    assert record.exc_info[0] is RuntimeError and "delivery=bug" in record.getMessage()
    assert record.levelno == logging.ERROR and "outcome=failed" in record.getMessage()
    if where == "check":  # not tried again: the same bug would only log the same traceback
        assert wait_until(lambda: webhook.workers.deliveries.states() == {"failed": 1})
