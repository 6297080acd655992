"""The durable delivery queue (real SQLite in a temp state directory), its workers, and what replies may quote."""

from __future__ import annotations

import threading

import pytest
from test_github import RecordingRunner, wait_until

from bot.service.dispatch import CommentCommand, Dispatcher
from bot.service.queue import DeliveryQueue, State, Workers
from bot.service.replies import RefusalLog, public, quoted
from bot.trackers.local import LocalTracker

pytestmark = pytest.mark.usefixtures("service_log")  # no traceback in the service's log, unless planted


def command(comment_id: int, author: str = "wes", line: str = "/bot list") -> CommentCommand:
    return CommentCommand("acme/trainer", 5, comment_id, "", author, line, repo_id=42)


def test_a_comment_is_queued_once_and_taken_each_senders_first_before_anyones_second(tmp_path):
    deliveries = DeliveryQueue(tmp_path)
    for n in range(1, 4):
        assert deliveries.add(command(n, "rob"))
    assert deliveries.add(command(9, "wes"))
    assert not deliveries.add(command(2, "rob"))  # the same signed key: a replay
    taken = [deliveries.take().comment_id for _ in range(4)]
    assert taken == [1, 9, 2, 3]  # wes's first came after rob's three, and went second
    assert deliveries.take() is None
    assert deliveries.states() == {"checking": 4}


def test_a_restart_resumes_what_was_not_finished_and_remembers_what_was(tmp_path):
    first = DeliveryQueue(tmp_path)
    for n in range(1, 5):
        first.add(command(n))
    first.take(), first.take(), first.take()
    first.mark(command(1).key, State.DONE)
    first.mark(command(2).key, State.RUNNING)  # the process died here: 2 running, 3 checking, 4 queued

    again = DeliveryQueue(tmp_path)
    assert again.resumed == 2
    assert sorted(again.take().comment_id for _ in range(3)) == [2, 3, 4]
    assert not again.add(command(1))  # handled before the restart: still a replay


def test_a_check_that_keeps_failing_gives_up_and_a_redelivery_queues_it_again(tmp_path):
    deliveries = DeliveryQueue(tmp_path, retry_delay=0.01, max_attempts=2)
    deliveries.add(command(1))
    deliveries.take()
    assert deliveries.retry(command(1).key) is State.QUEUED
    assert deliveries.take(wait=5).comment_id == 1  # due again after the delay
    assert deliveries.retry(command(1).key) is State.FAILED
    assert deliveries.take(wait=0.1) is None
    assert deliveries.add(command(1))  # GitHub's redelivery
    assert deliveries.take().comment_id == 1


def test_an_interrupted_run_goes_back_to_the_queue_and_the_next_start_runs_it(tmp_path):
    tracker = LocalTracker(tmp_path / "repo")
    interrupt = threading.Event()
    interrupt.set()
    runner = RecordingRunner()

    def stopped_once(request):
        if interrupt.is_set():
            interrupt.clear()
            raise KeyboardInterrupt("SIGTERM")  # what `bot serve`'s handler raises in a run
        return runner(request)

    def workers() -> Workers:
        dispatcher = Dispatcher(stopped_once, tmp_path / "state")
        return Workers(DeliveryQueue(tmp_path / "state"), dispatcher, lambda repo: tracker, checkers=2)

    first = workers()
    first.deliveries.add(command(1, line="/bot bench"))
    first.start()
    first.run_forever()  # returns at the interrupt
    assert first.deliveries.states() == {"queued": 1} and runner.requests == []

    second = workers()
    second.start()
    thread = threading.Thread(target=second.run_forever, daemon=True)
    thread.start()
    assert wait_until(lambda: second.deliveries.states() == {"done": 1})
    second.stop()
    thread.join(5)
    assert [request.argv for request in runner.requests] == [("bench",)]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("/bot apply @octo-org/everyone please", "/bot apply @\u2060octo-org/everyone please"),
        ("`/bot` ```", "'/bot' '''"),
        ("x" * 500, "x" * 79 + "…"),
        ("a\n\nb", "a b"),
    ],
)
def test_quoted_comment_text_is_short_mentions_nobody_and_stays_in_its_span(text, shown):
    assert quoted(text) == shown


def test_error_replies_show_no_server_paths():
    error = (
        "FileNotFoundError: [Errno 2] No such file: '/home/ci/.local/state/perfbot/locks/x.lock' (~/.ssh/id)"
    )
    shown = public(error)
    assert "/home" not in shown and ".ssh" not in shown and shown.count("<path>") == 2
    assert public("see https://github.example/acme/trainer/issues/5") == (
        "see https://github.example/acme/trainer/issues/5"
    )


def test_one_refusal_per_sender_and_issue_in_a_window_remembered_across_restarts(tmp_path):
    refusals = RefusalLog(tmp_path)
    assert refusals.may_reply("acme/trainer", 5, "rob")
    assert not refusals.may_reply("acme/trainer", 5, "ROB")
    assert refusals.may_reply("acme/trainer", 6, "rob") and refusals.may_reply("acme/trainer", 5, "eve")
    assert not RefusalLog(tmp_path).may_reply("acme/trainer", 5, "rob")
    assert RefusalLog(tmp_path, window=0).may_reply("acme/trainer", 5, "rob")  # the window has passed


def test_a_failed_run_is_reported_without_the_servers_paths(tmp_path, service_log):
    tracker = LocalTracker(tmp_path / "repo")
    service_log.bugs = 1  # a command that raises what no command should: its traceback is logged, once

    def failing(request):
        raise FileNotFoundError(f"[Errno 2] No such file or directory: '{tmp_path}/state/results.json'")

    assert Dispatcher(failing, tmp_path / "state").handle(command(1, line="/bot bench"), tracker) == 1
    [reply] = [comment.body for comment in tracker.comments(5)]
    assert "failed: FileNotFoundError" in reply and "'<path>'" in reply and str(tmp_path) not in reply
