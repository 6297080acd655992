"""Attacks on a real ``bot serve`` process (issue #28): slow clients that reconnect, a read-only flood, a slow
permission API, ``kill -9`` between accepting a delivery and running it, a forged repository id, a short
secret. The process talks to the local GitHub API (``tests/github_server.py``); what it did is read from the
API's store, from /proc and from its log, which must hold no traceback (``bot_serve`` checks it)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from statistics import median

import pytest
from server_log import ENDS, check_server_log
from test_github import post, wait_until
from test_webhook_attacks import (
    ISSUE,
    PERMISSION,
    REPO,
    ROLES,
    ROOT,
    SECRET,
    TOKEN,
    bot_serve,
    event,
    settled,
    usage,
)

USAGE = "Comment `/bot <command> [options]`"


@pytest.fixture
def api(github_server):
    """The local GitHub API with the bot, a write user (wes), a read-only one (rob) and the served issue."""
    github_server.add_user(TOKEN, "perfbot")
    for login in ROLES:
        github_server.add_user(f"token-of-{login}", login)
    github_server.add_repo(REPO, roles=ROLES)
    github_server.add_issue(REPO, ISSUE, "plan", "| # | Change |\n|---|---|\n| A | workers |")
    return github_server


def deliver(address, api, author: str, line: str, **changes) -> tuple[int, int]:
    """Post a signed delivery of a new comment by ``author``: (the comment's id, the HTTP status)."""
    payload = event(api, author, line)
    payload["repository"].update(changes)
    return payload["comment"]["id"], post(address, json.dumps(payload).encode(), secret=SECRET)[0]


def replies_to(api, login: str) -> list[str]:
    return [
        c["body"]
        for c in api.comments_on(REPO, ISSUE)
        if c["author"] == "perfbot" and f"@{login}" in c["body"]
    ]


def finished(api, comment_id: int) -> bool:
    """The comment got its final reaction."""
    return bool({"rocket", "confused"} & set(api.reactions_on(comment_id)))


@pytest.mark.slow
def test_reconnecting_slow_clients_leave_room_for_signed_deliveries(api, tmp_path):
    clients, per_second, deliveries = 40, 12, 60  # the attack of #28: 0 of 60 got through the threaded server
    with bot_serve(tmp_path, api) as (process, address):  # the default 10 s to send a request
        settled(tmp_path)
        rss_before, threads_before = usage(process.pid)
        stop, held, lock = threading.Event(), [], threading.Lock()

        def slow_client(n: int) -> None:
            stop.wait(n / per_second)  # staggered: together they open `per_second` connections a second
            while not stop.is_set():
                try:
                    sock = socket.create_connection(address, timeout=5)
                    sock.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # headers that never end
                except OSError:
                    pass
                else:
                    with lock:
                        held.append(sock)
                stop.wait(clients / per_second)

        attackers = [threading.Thread(target=slow_client, args=(n,), daemon=True) for n in range(clients)]
        for thread in attackers:
            thread.start()
        assert wait_until(lambda: len(held) >= 2 * clients, timeout=15)
        statuses, latencies, rss_peak, threads_peak = [], [], rss_before, threads_before
        for n in range(deliveries):
            started = time.monotonic()
            statuses.append(deliver(address, api, "rob", f"/bot apply --tier 1 (try {n})")[1])
            latencies.append(time.monotonic() - started)
            rss, threads = usage(process.pid)
            rss_peak, threads_peak = max(rss_peak, rss), max(threads_peak, threads)
            time.sleep(0.05)
        stop.set()
        for thread in attackers:
            thread.join(10)
        for sock in held:
            sock.close()
        accepted = statuses.count(202) / deliveries
        print(
            f"\nslow-client attack: {len(held)} partial-header connections from {clients} clients; "
            f"{statuses.count(202)}/{deliveries} signed deliveries accepted ({accepted:.0%}), latency median "
            f"{median(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms; RSS {rss_before:.0f} -> "
            f"{rss_peak:.0f} MB; threads {threads_before} -> {threads_peak}"
        )
        assert accepted >= 0.95
        assert rss_peak - rss_before < 50
        assert process.poll() is None


@pytest.mark.slow
def test_a_read_only_flood_loses_nothing_and_holds_up_no_one(api, tmp_path):
    flood = 300
    with bot_serve(tmp_path, api) as (process, address):
        with ThreadPoolExecutor(8) as pool:
            sent = list(
                pool.map(
                    lambda n: deliver(address, api, "rob", f"/bot apply @wes {n} " + "x" * 500), range(flood)
                )
            )
        assert [status for _, status in sent] == [202] * flood  # every delivery accepted

        started = time.monotonic()
        helped, status = deliver(address, api, "wes", "/bot help")
        assert status == 202
        assert wait_until(lambda: "rocket" in api.reactions_on(helped), timeout=10)
        answered = time.monotonic() - started
        assert any(USAGE in c["body"] for c in api.comments_on(REPO, ISSUE))

        with ThreadPoolExecutor(8) as pool:  # more, and SIGTERM as soon as they are accepted
            late = list(
                pool.map(lambda n: deliver(address, api, "rob", f"/bot bench {n}"), range(flood // 3))
            )
        assert [status for _, status in late] == [202] * len(late)
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait(10)
        stopped = time.monotonic() - started
        sent += late
        worked_off = sum(finished(api, comment_id) for comment_id, _ in sent)
    before = check_server_log((tmp_path / "serve.log").read_text())

    with bot_serve(tmp_path, api) as (process, address):  # the restart works off the rest
        assert wait_until(lambda: all(finished(api, comment_id) for comment_id, _ in sent), timeout=60)
    lines = before + check_server_log((tmp_path / "serve.log").read_text())
    accepted = [line["delivery"] for line in lines if line["outcome"] == "accepted"]
    ends = [line["delivery"] for line in lines if line["outcome"] in ENDS]
    assert len(accepted) == len(set(accepted)) == len(sent) + 1  # and the /bot help
    assert sorted(ends) == sorted(accepted)  # each delivery ended once, in one server or the other
    replies = replies_to(api, "rob")
    requests = len(api.requests)
    print(
        f"\nread-only flood: {flood}/{flood} accepted; a write user's /bot help answered in {answered:.1f} s; "
        f"{len(late)} more, then SIGTERM: exit in {stopped:.1f} s with {worked_off}/{len(sent)} worked off, the restart did the rest; "
        f"{len(replies)} reply to the flooder, {requests} API requests in all"
    )
    assert stopped < 10
    assert len(replies) == 1  # one refusal; every other comment got a 😕 only
    assert "@wes" not in replies[0] and "xxxxxxxx" not in replies[0]  # no live mention, no long text echoed
    assert "@\u2060wes" not in replies[0]  # nor the neutralised mention: nothing of the comment is quoted


@pytest.mark.slow
def test_a_slow_permission_api_holds_up_no_other_command(api, tmp_path):
    with bot_serve(tmp_path, api) as (process, address):
        api.slow("GET", PERMISSION.format("rob"), seconds=12)
        refused, status = deliver(address, api, "rob", "/bot apply --tier 1")
        assert status == 202
        assert wait_until(
            lambda: api.count("GET", PERMISSION.format("rob")) == 1
        )  # rob's check waits on the API

        started = time.monotonic()
        helped, _ = deliver(address, api, "wes", "/bot help")
        assert wait_until(lambda: "rocket" in api.reactions_on(helped), timeout=10)
        answered = time.monotonic() - started
        assert api.reactions_on(refused) == []  # rob's check is still waiting: it held up nothing
        assert wait_until(lambda: api.reactions_on(refused) == ["confused"], timeout=30)
    print(f"\nwith rob's permission answer taking 12 s, wes's /bot help was answered in {answered:.1f} s")


def test_kill_9_between_accepting_and_running_then_a_restart_runs_the_command_once(api, tmp_path):
    api.slow("GET", PERMISSION.format("wes"), seconds=30)  # holds the check: accepted, not run
    with bot_serve(tmp_path, api) as (process, address):
        payload = event(api, "wes", "/bot list")
        body, comment_id = json.dumps(payload).encode(), payload["comment"]["id"]
        assert post(address, body, secret=SECRET)[0] == 202
        assert wait_until(lambda: api.count("GET", PERMISSION.format("wes")) == 1)
        process.kill()
        process.wait(10)
    listed = lambda: [c for c in api.comments_on(REPO, ISSUE) if c["body"].startswith("| id | tier |")]  # noqa: E731
    assert listed() == [] and api.reactions_on(comment_id) == []  # nothing ran before the kill

    with bot_serve(tmp_path, api) as (process, address):
        assert wait_until(lambda: api.reactions_on(comment_id) == ["eyes", "rocket"], timeout=30)
        assert post(address, body, secret=SECRET) == (200, "ignored: this comment was already handled\n")
    assert len(listed()) == 1


def test_a_delivery_naming_another_repository_id_is_ignored(api, tmp_path):
    forged_id = api.repos[REPO]["id"] + 1000
    with bot_serve(tmp_path, api) as (process, address):
        forged, status = deliver(address, api, "wes", "/bot list", id=forged_id)
        assert status == 202  # the configured repository's id is not known yet: the check compares it
        helped, _ = deliver(address, api, "wes", "/bot help")
        assert wait_until(lambda: "rocket" in api.reactions_on(helped), timeout=15)
        log = tmp_path / "serve.log"
        ignored = f'outcome=ignored reason="repository id {forged_id}, not {api.repos[REPO]["id"]}"'
        assert wait_until(lambda: ignored in log.read_text())
        again, status = deliver(address, api, "wes", "/bot list", id=forged_id)
        assert status == 200  # known now: ignored at the door
    assert api.reactions_on(forged) == [] and api.reactions_on(again) == []
    assert not any(c["body"].startswith("| id | tier |") for c in api.comments_on(REPO, ISSUE))


def test_a_short_webhook_secret_is_refused_at_start(tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PERFBOT_WEBHOOK_SECRET": "s3cret",
        "PERFBOT_REPOSITORY": REPO,
    }
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "serve", "--port", "0"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert re.fullmatch(r"[^\n]*has 6 characters; use at least 16[^\n]*\n", done.stderr), done.stderr
