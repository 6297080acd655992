"""Shared pytest fixtures, and the corpus stage left out unless asked for (`-m corpus`)."""

import pytest
from github_server import bare_remote, github_server  # noqa: F401  (fixtures: the local GitHub API, a git remote)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the `corpus` tests (they install programs from the package registry) unless the `-m`
    expression names the marker, so `pytest` and `pytest -m "not slow"` stay offline and fast."""
    if "corpus" in (config.option.markexpr or ""):
        return
    corpus = [item for item in items if item.get_closest_marker("corpus")]
    if corpus:
        config.hook.pytest_deselected(items=corpus)
        items[:] = [item for item in items if not item.get_closest_marker("corpus")]
