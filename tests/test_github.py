"""GitHub integration against the local API server: tracker, retries, redaction, trigger, webhook, init."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import threading
import time
import tomllib
import urllib.error
import urllib.request
import uuid

import pytest
import yaml
from github import GithubException

from benchmarks.spec import BenchSpec
from bot.conventions import tool_settings
from bot.errors import BadInput
from bot.init import LOCK, WORKFLOW, init_repository
from bot.redact import redact
from bot.service.dispatch import Dispatcher, IssueLock, command_from_event, handle_event
from bot.service.server import make_server, verify_signature
from bot.trackers.base import NOTE, PROGRESS, RESULTS
from bot.trackers.github import ACTIONS_BOT_LOGIN, GitHubTracker

REPO = "acme/trainer"
ISSUE = 5
BOT_TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0" * 2  # token-shaped, so a leak would be recognisable
OTHER_BOT_TOKEN = "other-bot-token-000"
ROLES = {"ada": "admin", "max": "maintain", "wes": "write", "tia": "triage", "rob": "read"}
FAST = {"backoff": 0.01, "secondary_rate_wait": 0.01, "seconds_between_writes": 0}
COMMENTS = rf"/repos/{REPO}/issues/{ISSUE}/comments"
REPO_ID = 4242
PINNED = "perfbot @ git+https://github.com/acme/perfbot@" + "0123456789abcdef" * 2 + "01234567"


@pytest.fixture
def api(github_server):
    github_server.add_user(BOT_TOKEN, "perfbot")
    github_server.add_user(OTHER_BOT_TOKEN, "otherbot", bot=True)
    for login in ROLES:
        github_server.add_user(f"token-of-{login}", login)
    github_server.add_user("token-of-eve", "eve")
    github_server.add_repo(REPO, roles=ROLES)
    github_server.repos[REPO]["id"] = REPO_ID  # the id the events below carry
    github_server.add_issue(REPO, ISSUE, "Tier 1 perf plan", "| # | Change |\n|---|---|\n| A | workers |")
    return github_server


@pytest.fixture
def tracker(api):
    return GitHubTracker(REPO, BOT_TOKEN, base_url=api.url, **FAST)


def comment_event(author: str, body: str, *, action: str = "created", comment_id: int = 77, **issue) -> dict:
    return {
        "action": action,
        "issue": {"number": ISSUE, **issue},
        "comment": {
            "id": comment_id,
            "body": body,
            "html_url": f"https://github.example/{REPO}/issues/{ISSUE}#issuecomment-{comment_id}",
            "user": {"login": author, "type": "User"},
        },
        "repository": {"full_name": REPO, "id": REPO_ID},
    }


def wait_until(condition, timeout: float = 10.0) -> bool:
    """Poll ``condition`` until it holds (work done by a background thread)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def posted_command(api, author: str, line: str):
    """Seed the triggering comment on the server and return the parsed command for it."""
    comment = api.add_comment(REPO, ISSUE, author, line)
    return command_from_event(comment_event(author, line, comment_id=comment["id"]))


# --- tracker ---------------------------------------------------------------------------------------------


def test_issue_and_bot_login(tracker):
    issue = tracker.issue(ISSUE)
    assert (issue.number, issue.title) == (ISSUE, "Tier 1 perf plan")
    assert "workers" in issue.body
    assert tracker.bot_login == "perfbot"


def test_upsert_creates_then_edits_in_place(api, tracker):
    first = tracker.upsert_comment(ISSUE, PROGRESS, f"{PROGRESS}\nstep 1 of 3")
    second = tracker.upsert_comment(ISSUE, PROGRESS, f"{PROGRESS}\nstep 2 of 3")
    tracker.upsert_comment(ISSUE, PROGRESS, f"{PROGRESS}\nstep 2 of 3")  # unchanged: no request
    results = tracker.upsert_comment(ISSUE, RESULTS, "table")  # marker added when missing

    stored = api.comments_on(REPO, ISSUE)
    assert [c["id"] for c in stored] == [first.id, results.id]
    assert second.id == first.id
    assert stored[0]["body"] == f"{PROGRESS}\nstep 2 of 3"
    assert stored[0]["history"] == [f"{PROGRESS}\nstep 1 of 3"]
    assert stored[1]["body"] == f"{RESULTS}\ntable"
    assert api.count("PATCH", r".*/issues/comments/\d+") == 1


def test_upsert_never_edits_another_authors_comment_with_the_marker(api, tracker):
    foreign = api.add_comment(REPO, ISSUE, "otherbot", f"{PROGRESS}\nnot yours")
    quoted = api.add_comment(REPO, ISSUE, "wes", f"{PROGRESS}\nquoting the bot")
    mine = tracker.upsert_comment(ISSUE, PROGRESS, f"{PROGRESS}\nmine")

    assert mine.id not in (foreign["id"], quoted["id"])
    assert foreign["body"] == f"{PROGRESS}\nnot yours" and foreign["history"] == []
    assert quoted["history"] == []
    assert [c["author"] for c in api.comments_on(REPO, ISSUE)] == ["otherbot", "wes", "perfbot"]


def test_upsert_finds_its_comment_past_the_first_page(api, tracker):
    for n in range(130):
        api.add_comment(REPO, ISSUE, "wes", f"chatter {n}")
    own = api.add_comment(REPO, ISSUE, "perfbot", f"{NOTE}\nold note")

    tracker.upsert_comment(ISSUE, NOTE, f"{NOTE}\nnew note")

    assert len(tracker.comments(ISSUE)) == 131
    assert own["body"] == f"{NOTE}\nnew note"
    assert api.count("GET", COMMENTS) == 4  # two pages, twice


def test_reactions(api, tracker):
    comment = api.add_comment(REPO, ISSUE, "wes", "/bot apply --tier 1")
    for emoji in ("eyes", "rocket", "confused", "eyes"):
        tracker.react(comment["id"], emoji)
    assert api.reactions_on(comment["id"]) == ["eyes", "rocket", "confused"]
    with pytest.raises(ValueError, match="unknown reaction"):
        tracker.react(comment["id"], "thumbsup")


@pytest.mark.parametrize(
    ("user", "expected"),
    [
        ("ada", "admin"),
        ("max", "maintain"),
        ("wes", "write"),
        ("tia", "triage"),
        ("rob", "read"),
        ("ghost", "none"),
    ],
)
def test_permission_from_collaborator_api(api, tracker, user, expected):
    assert tracker.permission(user) == expected
    assert api.count("GET", rf"/repos/{REPO}/collaborators/{user}/permission") >= 1


def test_installation_token_falls_back_to_the_actions_login(api):
    api.add_user("ghs_installation_token_1234", ACTIONS_BOT_LOGIN, bot=True, can_read_user=False)
    tracker = GitHubTracker(REPO, "ghs_installation_token_1234", base_url=api.url, **FAST)
    api.add_comment(REPO, ISSUE, "perfbot", f"{PROGRESS}\nsomeone else's")

    tracker.upsert_comment(ISSUE, PROGRESS, f"{PROGRESS}\nfrom actions")

    assert tracker.bot_login == ACTIONS_BOT_LOGIN
    assert [c["author"] for c in api.comments_on(REPO, ISSUE)] == ["perfbot", ACTIONS_BOT_LOGIN]


# --- retries ---------------------------------------------------------------------------------------------


def test_500_on_create_is_retried_to_exactly_one_comment(api, tracker):
    api.fail("POST", COMMENTS, 500)
    tracker.upsert_comment(ISSUE, PROGRESS, f"{PROGRESS}\nstarted")
    assert [c["body"] for c in api.comments_on(REPO, ISSUE)] == [f"{PROGRESS}\nstarted"]
    assert api.count("POST", COMMENTS) == 2


@pytest.mark.parametrize("status", [502, None], ids=["502-after-create", "dropped-after-create"])
def test_lost_answer_after_create_does_not_duplicate(api, tracker, status):
    api.fail("POST", COMMENTS, status, after=True)
    api.fail("POST", COMMENTS, status, after=True)
    api.fail("POST", COMMENTS, status, after=True)
    progress = tracker.upsert_comment(ISSUE, PROGRESS, f"{PROGRESS}\nstarted")
    reply = tracker.reply(ISSUE, "a plain reply")

    stored = api.comments_on(REPO, ISSUE)
    assert [c["body"] for c in stored] == [f"{PROGRESS}\nstarted", "a plain reply"]
    assert (progress.id, reply.id) == (stored[0]["id"], stored[1]["id"])
    assert api.count("POST", COMMENTS) == 2  # each POST sent once; the lookup found what it had created


def test_secondary_rate_limit_is_retried(api, tracker):
    api.rate_limit("GET", rf"/repos/{REPO}/issues/{ISSUE}")  # message only: waits secondary_rate_wait
    assert tracker.issue(ISSUE).number == ISSUE
    assert api.count("GET", rf"/repos/{REPO}/issues/{ISSUE}") == 2

    comment = api.add_comment(REPO, ISSUE, "wes", "/bot bench")
    api.rate_limit("POST", r".*/reactions", retry_after=1, status=429)
    started = time.monotonic()
    tracker.react(comment["id"], "eyes")
    assert time.monotonic() - started >= 1.0  # Retry-After honoured
    assert api.reactions_on(comment["id"]) == ["eyes"]


def test_transient_errors_give_up_after_the_retry_budget(api):
    tracker = GitHubTracker(REPO, BOT_TOKEN, base_url=api.url, retries=2, **FAST)
    api.fail("GET", rf"/repos/{REPO}/issues/{ISSUE}", 503, times=10)
    with pytest.raises(GithubException) as caught:
        tracker.issue(ISSUE)
    assert caught.value.status == 503
    assert api.count("GET", rf"/repos/{REPO}/issues/{ISSUE}") == 3


def test_pull_request_opened_once_then_refreshed(api, tracker):
    first = tracker.open_or_update_pull_request("bot/5-tier-1", "perf: tier 1", "Refs #5")
    second = tracker.open_or_update_pull_request("bot/5-tier-1", "perf: tier 1", "Refs #5, with results")
    assert first == second
    assert [(p["head"], p["base"], p["body"]) for p in api.pulls] == [
        ("bot/5-tier-1", "main", "Refs #5, with results")
    ]
    with pytest.raises(ValueError, match="into itself"):
        tracker.open_or_update_pull_request("main", "x", "y")


def test_token_never_posted_or_logged(api, tracker, caplog):
    caplog.set_level(logging.DEBUG)
    assert BOT_TOKEN not in tracker.push_url()  # git gets it from the environment instead
    url = f"https://x-access-token:{BOT_TOKEN}@github.example/{REPO}.git"
    api.fail("POST", COMMENTS, 500)
    tracker.upsert_comment(ISSUE, PROGRESS, f"{PROGRESS}\npushing to {url} with {BOT_TOKEN}")
    tracker.reply(ISSUE, f"git said: fatal: unable to access '{url}'")
    tracker.open_or_update_pull_request("bot/5-tier-1", "t", f"token {BOT_TOKEN}")
    logging.getLogger("bot.test").error("failed with %s", BOT_TOKEN, exc_info=RuntimeError(url))

    written = [c["body"] for c in api.comments_on(REPO, ISSUE)] + [p["body"] for p in api.pulls]
    assert written and all(BOT_TOKEN not in text for text in written)
    assert "https://***@github.example/" in written[0]
    assert caplog.records and BOT_TOKEN not in caplog.text
    assert BOT_TOKEN not in redact(GithubException(500, {"message": BOT_TOKEN}, None))


# --- trigger ---------------------------------------------------------------------------------------------


class RecordingRunner:
    """A runner that records its requests and posts a progress comment, as the real one does."""

    def __init__(self, code: int = 0):
        self.code = code
        self.requests = []

    def __call__(self, request):
        self.requests.append(request)
        request.tracker.upsert_comment(
            request.issue, PROGRESS, f"{PROGRESS}\nrunning {' '.join(request.argv)}"
        )
        return self.code


def test_event_filter():
    assert (
        command_from_event(comment_event("wes", "/bot apply --tier 1\nthanks")).line == "/bot apply --tier 1"
    )
    assert command_from_event(comment_event("wes", "/bot apply --tier 1", action="edited")) is None
    assert command_from_event(comment_event("wes", "/bot apply", pull_request={"url": "x"})) is None
    assert command_from_event(comment_event("wes", "please /bot apply")) is None
    assert command_from_event(comment_event("wes", "/botany is fun")) is None
    bot_event = comment_event("wes", "/bot apply")
    bot_event["comment"]["user"]["type"] = "Bot"
    assert command_from_event(bot_event) is None


def test_write_user_runs_with_reactions(api, tracker, tmp_path):
    runner = RecordingRunner()
    command = posted_command(api, "wes", "/bot apply --tier 1")
    assert Dispatcher(runner, tmp_path).handle(command, tracker) == 0

    [request] = runner.requests
    assert (request.argv, request.args.command, request.args.tier) == (("apply", "--tier", "1"), "apply", 1)
    assert (request.issue, request.author, request.repo) == (ISSUE, "wes", REPO)
    assert api.reactions_on(command.comment_id) == ["eyes", "rocket"]
    assert not IssueLock(tmp_path, REPO, ISSUE).path.exists()


@pytest.mark.parametrize("user", ["rob", "tia", "eve"])
def test_user_without_write_permission_is_refused(api, tracker, tmp_path, user):
    runner = RecordingRunner()
    command = posted_command(api, user, "/bot apply --tier 1")
    assert Dispatcher(runner, tmp_path).handle(command, tracker) == 0

    assert runner.requests == []
    reply = api.comments_on(REPO, ISSUE)[-1]
    assert reply["author"] == "perfbot" and f"@{user}" in reply["body"]
    assert "write, maintain or admin" in reply["body"]
    assert api.reactions_on(command.comment_id) == ["confused"]  # the final reaction, and no 👀 before it


def test_failed_run_reacts_confused_and_releases_the_lock(api, tracker, tmp_path):
    assert (
        Dispatcher(RecordingRunner(code=1), tmp_path).handle(
            posted_command(api, "max", "/bot bench"), tracker
        )
        == 1
    )

    def crash(request):
        raise RuntimeError(f"push to https://x-access-token:{BOT_TOKEN}@github.example failed")

    command = posted_command(api, "ada", "/bot apply --tier 1")
    assert Dispatcher(crash, tmp_path).handle(command, tracker) == 1
    assert api.reactions_on(command.comment_id) == ["eyes", "confused"]
    reply = api.comments_on(REPO, ISSUE)[-1]["body"]
    assert "RuntimeError" in reply and BOT_TOKEN not in reply
    assert not IssueLock(tmp_path, REPO, ISSUE).path.exists()


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("/bot apply --tier one", "not a valid command"),
        ("/bot apply", "not a valid command"),
        ("/bot apply --tier 1 --repo /etc", "is for the command line"),
        ("/bot plan PLAN.md", "cannot run from a comment"),
        ('/bot apply "--tier', "Could not read"),
        ("/bot apply --help", "--tier"),
    ],
)
def test_bad_commands_get_an_answer_and_nothing_runs(api, tracker, tmp_path, line, expected):
    runner = RecordingRunner()
    command = posted_command(api, "wes", line)
    Dispatcher(runner, tmp_path).handle(command, tracker)
    assert runner.requests == []
    assert expected in api.comments_on(REPO, ISSUE)[-1]["body"]
    answered = "rocket" if "--help" in line else "confused"
    assert api.reactions_on(command.comment_id) == ["eyes", answered]


def test_help_and_status_answers(api, tracker, tmp_path):
    runner = RecordingRunner()
    dispatcher = Dispatcher(runner, tmp_path)
    dispatcher.handle(posted_command(api, "wes", "/bot help"), tracker)
    assert "usage: bot" in api.comments_on(REPO, ISSUE)[-1]["body"]

    dispatcher.handle(posted_command(api, "wes", "/bot status"), tracker)
    assert "No run yet" in api.comments_on(REPO, ISSUE)[-1]["body"]

    dispatcher.handle(posted_command(api, "wes", "/bot apply --tier 1"), tracker)
    dispatcher.handle(posted_command(api, "wes", "/bot status"), tracker)
    progress = next(c for c in api.comments_on(REPO, ISSUE) if c["body"].startswith(PROGRESS))
    assert f"#issuecomment-{progress['id']}" in api.comments_on(REPO, ISSUE)[-1]["body"]
    assert len(runner.requests) == 1


def test_second_command_while_one_runs_gets_the_progress_link(api, tracker, tmp_path):
    started, release = threading.Event(), threading.Event()

    def slow(request):
        RecordingRunner()(request)
        started.set()
        assert release.wait(10)
        return 0

    first = posted_command(api, "wes", "/bot apply --tier 1")
    running = threading.Thread(target=Dispatcher(slow, tmp_path).handle, args=(first, tracker))
    running.start()
    assert started.wait(10)
    second_runner = RecordingRunner()
    second = posted_command(api, "max", "/bot apply --tier 2")
    Dispatcher(second_runner, tmp_path).handle(second, tracker)
    release.set()
    running.join(10)

    progress = next(c for c in api.comments_on(REPO, ISSUE) if c["body"].startswith(PROGRESS))
    busy = api.comments_on(REPO, ISSUE)[-1]
    assert "already in progress" in busy["body"] and f"#issuecomment-{progress['id']}" in busy["body"]
    assert second_runner.requests == []
    assert api.reactions_on(first.comment_id) == ["eyes", "rocket"]
    assert api.reactions_on(second.comment_id) == ["eyes", "confused"]  # busy ends with a reaction too


def test_stale_locks_are_taken_over(tmp_path):
    lock = IssueLock(tmp_path, REPO, ISSUE)
    assert lock.acquire({"author": "wes"})
    assert not IssueLock(tmp_path, REPO, ISSUE).acquire({"author": "max"})  # held by this live process
    record = json.loads(lock.path.read_text())
    lock.path.write_text(json.dumps({**record, "pid": 2**22 + 12345}))  # beyond pid_max: never alive
    assert IssueLock(tmp_path, REPO, ISSUE).acquire({"author": "max"})
    assert lock.holder()["author"] == "max"

    other = IssueLock(tmp_path, REPO, ISSUE + 1)  # an earlier process with this very pid (container restart)
    other.path.write_text(json.dumps({**record, "author": "old"}))
    assert other.acquire({"author": "new"})
    other.release()
    assert other.holder() is None


def test_handle_event_from_actions(api, tmp_path):
    runner = RecordingRunner()
    comment = api.add_comment(REPO, ISSUE, "wes", "/bot apply --tier 1")
    event_file = tmp_path / "event.json"
    env = {
        "GITHUB_EVENT_NAME": "issue_comment",
        "PERFBOT_TOKEN": BOT_TOKEN,
        "GITHUB_API_URL": api.url,
        "GITHUB_REPOSITORY": REPO,
    }

    event_file.write_text(
        json.dumps(comment_event("wes", "/bot apply --tier 1", comment_id=comment["id"], action="edited"))
    )
    assert handle_event(event_file, runner, state_dir=tmp_path / "state", env=env) == 0
    assert runner.requests == []

    event_file.write_text(json.dumps(comment_event("wes", "/bot apply --tier 1", comment_id=comment["id"])))
    assert handle_event(event_file, runner, state_dir=tmp_path / "state", env=env) == 0
    assert [r.args.tier for r in runner.requests] == [1]
    assert api.reactions_on(comment["id"]) == ["eyes", "rocket"]

    with pytest.raises(BadInput, match="GITHUB_EVENT_PATH"):
        handle_event(tmp_path / "missing.json", runner, env=env)
    with pytest.raises(BadInput, match="PERFBOT_TOKEN"):
        handle_event(
            event_file,
            runner,
            state_dir=tmp_path / "state",
            env={"GITHUB_API_URL": api.url, "GITHUB_REPOSITORY": REPO},
        )


# --- webhook ---------------------------------------------------------------------------------------------


def test_signature_matches_githubs_test_vector():
    header = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert verify_signature("It's a Secret to Everybody", b"Hello, World!", header)
    assert not verify_signature("It's a Secret to Everybody", b"Hello, World?", header)
    assert not verify_signature("another secret", b"Hello, World!", header)
    assert not verify_signature(
        "It's a Secret to Everybody", b"Hello, World!", header.removeprefix("sha256=")
    )
    assert not verify_signature("It's a Secret to Everybody", b"Hello, World!", None)


SECRET = "webhook-secret-for-tests"


def post(address, body: bytes, *, event="issue_comment", delivery=None, secret=SECRET, signature=None):
    headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery or str(uuid.uuid4())}
    if signature is None and secret is not None:
        signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if signature is not None:
        headers["X-Hub-Signature-256"] = signature
    request = urllib.request.Request(
        f"http://{address[0]}:{address[1]}/webhook", body, headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.fixture
def webhook(api, tracker, tmp_path):
    """`bot serve`'s server on a free port, with a runner that signals each run."""
    ran = threading.Semaphore(0)
    runner = RecordingRunner()

    def signalling(request):
        code = runner(request)
        ran.release()
        return code

    def start():
        server = make_server(
            "127.0.0.1",
            0,
            SECRET,
            signalling,
            repository=REPO,
            tracker_factory=lambda repo: tracker,
            state_dir=tmp_path / "state",
        )
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        started.append((server, thread))
        return server

    def stop(server):
        """Shut ``server`` down and wait until its run loop has ended, as a restarted process would."""
        server.shutdown()
        for started_server, thread in started:
            if started_server is server:
                thread.join(10)

    started = []
    yield start, stop, runner, ran
    for server, thread in started:
        server.shutdown()
        thread.join(10)


def test_webhook_accepts_signed_new_comments_once(api, webhook):
    start, _, runner, ran = webhook
    server = start()
    comment = api.add_comment(REPO, ISSUE, "wes", "/bot apply --tier 1")
    body = json.dumps(comment_event("wes", "/bot apply --tier 1", comment_id=comment["id"])).encode()

    assert post(server.address, body, secret=None)[0] == 401
    assert post(server.address, body, signature="sha256=" + "0" * 64)[0] == 401
    assert post(server.address, body, secret="wrong secret")[0] == 401
    assert post(server.address, b"{}", event="ping")[0] == 200
    edited = json.dumps(comment_event("wes", "/bot apply --tier 1", action="edited")).encode()
    assert post(server.address, edited) == (200, "ignored: not a new /bot comment on an issue\n")

    assert post(server.address, body, delivery="delivery-1") == (202, "accepted\n")
    assert ran.acquire(timeout=10)
    assert post(server.address, body, delivery="delivery-1") == (
        200,
        "ignored: this comment was already handled\n",
    )
    assert [r.args.tier for r in runner.requests] == [1]
    assert wait_until(lambda: api.reactions_on(comment["id"]) == ["eyes", "rocket"])


def test_webhook_remembers_deliveries_across_restarts(api, webhook):
    start, stop, runner, ran = webhook
    comment = api.add_comment(REPO, ISSUE, "ada", "/bot bench")
    body = json.dumps(comment_event("ada", "/bot bench", comment_id=comment["id"])).encode()
    first = start()
    assert post(first.address, body, delivery="delivery-7")[0] == 202
    assert ran.acquire(timeout=10)
    stop(first)

    second = start()
    assert post(second.address, body, delivery="delivery-7")[0] == 200
    assert post(second.address, body, delivery="delivery-8")[0] == 200  # a new delivery id changes nothing
    assert len(runner.requests) == 1


def test_webhook_refuses_read_only_users_in_the_background(api, webhook):
    start, _, runner, _ = webhook
    server = start()
    comment = api.add_comment(REPO, ISSUE, "rob", "/bot apply --tier 1")
    body = json.dumps(comment_event("rob", "/bot apply --tier 1", comment_id=comment["id"])).encode()
    assert post(server.address, body)[0] == 202
    assert wait_until(lambda: len(api.comments_on(REPO, ISSUE)) == 2)
    assert "write, maintain or admin" in api.comments_on(REPO, ISSUE)[-1]["body"]
    assert runner.requests == []


# --- bot init --------------------------------------------------------------------------------------------


LOCK_TEXT = (
    "gitpython==3.1.44 \\\n    --hash=sha256:" + "0" * 64 + "\n"
)  # bot.lock's own tests make real ones


def test_init_writes_workflow_and_tool_bot(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "trainer"\n')
    result = init_repository(tmp_path, install=PINNED, lock=LOCK_TEXT)
    assert sorted(p.name for p in result.written) == [
        "perfbot-requirements.txt",
        "perfbot.yml",
        "pyproject.toml",
    ]
    assert (tmp_path / LOCK).read_text() == LOCK_TEXT

    workflow = yaml.safe_load((tmp_path / WORKFLOW).read_text())
    assert workflow[True] == {"issue_comment": {"types": ["created"]}}  # YAML 1.1 reads the key `on` as True
    assert workflow["permissions"] == {}
    job = workflow["jobs"]["perfbot"]
    assert job["permissions"] == {"contents": "write", "issues": "write", "pull-requests": "write"}
    assert job["runs-on"] == ["self-hosted", "gpu"]
    for condition in ("!github.event.issue.pull_request", "'/bot '", "author_association", '"COLLABORATOR"'):
        assert condition in workflow["jobs"]["gate"]["if"]
    checkout, _, run = job["steps"]
    assert checkout["with"]["fetch-depth"] == 0
    assert run["run"] == 'bot handle-event "$GITHUB_EVENT_PATH"'

    document = tomllib.loads((tmp_path / "pyproject.toml").read_text())
    assert document["project"]["name"] == "trainer"
    assert "train" in BenchSpec.from_table(tool_settings(tmp_path), tmp_path / "pyproject.toml").workloads


def test_init_keeps_what_is_there(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.bot]\nsize = "gpu"\n')
    (tmp_path / WORKFLOW).parent.mkdir(parents=True)
    (tmp_path / WORKFLOW).write_text("name: mine\n")
    (tmp_path / LOCK).write_text("mine==1 --hash=sha256:00\n")

    result = init_repository(tmp_path, install=PINNED, lock=LOCK_TEXT)
    assert result.written == [] and len(result.kept) == 3
    assert pyproject.read_text() == '[tool.bot]\nsize = "gpu"\n'
    assert (tmp_path / WORKFLOW).read_text() == "name: mine\n"
    assert init_repository(tmp_path, install=PINNED, force=True, lock=LOCK_TEXT).written == [
        tmp_path / WORKFLOW,
        tmp_path / LOCK,
    ]

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    init_repository(fresh, install=PINNED, lock=LOCK_TEXT)
    assert "[tool.bot]" in (fresh / "pyproject.toml").read_text()
    pyproject.write_text("[tool.bot\n")
    with pytest.raises(BadInput, match="not valid TOML"):
        init_repository(tmp_path, install=PINNED, lock=LOCK_TEXT)
    assert os.path.exists(tmp_path / WORKFLOW)
