"""The :class:`~bot.trackers.base.Tracker` protocol says everything callers ask of a tracker: both backends
implement every member of it, and no caller probes a tracker with ``hasattr``/``getattr`` instead."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from bot.trackers.base import Tracker
from bot.trackers.github import GitHubTracker
from bot.trackers.local import LocalTracker

ROOT = Path(__file__).resolve().parent.parent
PROBES = ("hasattr", "getattr")


def _protocol_members() -> dict[str, object]:
    return {name: value for name, value in vars(Tracker).items() if not name.startswith("_")}


@pytest.mark.parametrize("tracker_class", [LocalTracker, GitHubTracker])
def test_each_tracker_implements_every_protocol_member(tracker_class):
    members = _protocol_members()
    assert {"push_url", "default_branch", "git_environment", "open_or_update_pull_request"} <= set(members)
    attributes = inspect.get_annotations(tracker_class)
    for name, declared in members.items():
        implemented = inspect.getattr_static(tracker_class, name, None)
        if isinstance(declared, property):
            assert isinstance(implemented, property) or name in attributes, f"{tracker_class.__name__}.{name}"
        else:
            assert callable(implemented), f"{tracker_class.__name__}.{name} is not a method"
            wanted = list(inspect.signature(declared).parameters)
            assert list(inspect.signature(implemented).parameters) == wanted, (
                f"{tracker_class.__name__}.{name}"
            )


def test_the_local_tracker_answers_the_repository_questions_with_nothing(tmp_path):
    tracker = LocalTracker(tmp_path)
    assert tracker.bot_login is None and tracker.repository_id is None and tracker.commit_url is None
    assert tracker.default_branch is None and tracker.push_url() is None and tracker.git_environment() == {}
    assert tracker.open_or_update_pull_request("bot/1-tier-1", "title", "body") is None


def _tracker_probes(source: str) -> list[str]:
    """``hasattr(tracker, ...)``/``getattr(tracker, ...)`` calls in ``source``: any whose object names a tracker."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PROBES:
            if node.args and "tracker" in ast.unparse(node.args[0]).lower():
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_probe_check_finds_a_probe():
    planted = (
        "url = getattr(request.tracker, 'push_url', None)\nok = hasattr(tracker, 'x')\ngetattr(args, 'y')\n"
    )
    assert len(_tracker_probes(planted)) == 2


def test_no_caller_probes_a_tracker():
    probes = {
        str(path.relative_to(ROOT)): found
        for path in sorted((ROOT / "bot").rglob("*.py"))
        if (found := _tracker_probes(path.read_text(encoding="utf-8")))
    }
    assert not probes, probes
