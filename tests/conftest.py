"""Shared pytest fixtures, and the corpus stage left out unless asked for (`-m corpus`)."""

import pytest
from github_server import bare_remote, github_server  # noqa: F401  (fixtures: the local GitHub API, a git remote)
from server_log import service_log  # noqa: F401  (a fixture: the service's log, checked for tracebacks)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the `corpus` tests (they install programs from the package registry) unless the `-m`
    expression names the marker, so `pytest` and `pytest -m "not slow"` stay offline and fast."""
    if "corpus" in (config.option.markexpr or ""):
        return
    corpus = [item for item in items if item.get_closest_marker("corpus")]
    if corpus:
        config.hook.pytest_deselected(items=corpus)
        items[:] = [item for item in items if not item.get_closest_marker("corpus")]


@pytest.fixture(autouse=True)
def piped_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test sees its commands' output as a pipe does: no ``$COLUMNS``. pytest-xdist's workers set
    ``COLUMNS=80``, which would wrap the tables a test reads line by line; a test that wants a width sets it."""
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture
def fresh_graphs():
    """A process's first graphed decoder: Dynamo's compiled code and the graphed forwards of earlier tests
    forgotten (each test builds its own model, and only one module per forward function is graphed)."""
    import torch
    import torch._inductor.config

    from optimizations.runtime.compile import GRAPHED_FORWARDS

    torch._dynamo.reset()
    GRAPHED_FORWARDS.clear()
    size_asserts = torch._inductor.config.size_asserts  # a graphed module turns them off for the process
    yield
    torch._inductor.config.size_asserts = size_asserts
