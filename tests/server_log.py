"""The service's log as the adversarial suites check it (issue #52): no traceback unless a test planted a bug,
and every delivery line with its fields, in order. :func:`check_server_log` reads a ``bot serve`` process's log
file; the :func:`service_log` fixture, the records of a server running in the test's process."""

from __future__ import annotations

import json
import logging
import re

import pytest

from bot.service.delivery_log import Outcome
from bot.service.delivery_log import log as delivery_log

FIELDS = ("delivery", "repo", "user", "event", "outcome", "reason")
ENDS = {Outcome.REFUSED, Outcome.IGNORED, Outcome.FAILED, Outcome.DONE}  # what a delivery's last line says
TRACEBACK = "Traceback (most recent call last)"
_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s"]+)(?: |$)')


def fields_of(message: str) -> dict[str, str]:
    """The ``key=value`` fields of a delivery line, quoted values read back; asserts the line is nothing else."""
    found = _FIELD.findall(message)
    assert "".join(f"{key}={value} " for key, value in found).rstrip() == message, message
    return {key: json.loads(value) if value.startswith('"') else value for key, value in found}


def check_lines(messages: list[str]) -> list[dict[str, str]]:
    """Each delivery line's fields, asserted to be :data:`FIELDS` in order with a known outcome."""
    lines = [fields_of(message) for message in messages]
    for fields in lines:
        assert tuple(fields) == FIELDS and fields["outcome"] in set(Outcome), fields
    return lines


def check_server_log(text: str, bugs: int = 0) -> list[dict[str, str]]:
    """Assert a ``bot serve`` log has ``bugs`` tracebacks and well-formed delivery lines; those lines' fields."""
    assert text.count(TRACEBACK) == bugs, text
    marker = f" {delivery_log.name}: "
    return check_lines([line.split(marker, 1)[1] for line in text.splitlines() if marker in line])


class ServiceLog(logging.Handler):
    """Every record logged while a test runs; :attr:`bugs` is how many tracebacks the test plants."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []
        self.bugs = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def lines(self) -> list[dict[str, str]]:
        """The delivery lines so far, as fields (checked)."""
        records = [record for record in list(self.records) if record.name == delivery_log.name]
        return check_lines([record.getMessage() for record in records])

    def tracebacks(self) -> list[logging.LogRecord]:
        """The records that carry a traceback."""
        return [r for r in list(self.records) if r.exc_info or TRACEBACK in r.getMessage()]


@pytest.fixture
def service_log(caplog):
    """The log of the service running in this test's process, at INFO; when the test ends, it must hold
    exactly ``service_log.bugs`` tracebacks (none unless the test plants a bug) and only well-formed delivery
    lines."""
    caplog.set_level(logging.INFO)
    watch = ServiceLog()
    root = logging.getLogger()
    root.addHandler(watch)
    try:
        yield watch
    finally:
        root.removeHandler(watch)
    assert len(watch.tracebacks()) == watch.bugs, [watch.format(r) for r in watch.tracebacks()]
    watch.lines()
