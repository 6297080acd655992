"""Measurements as data: one versioned JSON record per measurement under ``benchmarks/results/``.

A record is one number perfbot measured (a throughput, a step time, a speedup, a share) with what it takes to
read it again: when and on what device, at which perfbot commit, the exact command, the workload, the median and
its spread, how many runs, the physical or hand-written limit it is set against, the optimizations whose effect
it measures, and the heading of the journal section (``benchmarks/results/journal.md``) that tells its story.
Files are named ``<date>-<slug>.json``; :func:`load_records` reads and checks a folder of them, and
:mod:`benchmarks.reference` renders the summaries from them. Each file reads::

    {
      "format": "perfbot.record/v1",
      "date": "2026-11-27",
      "device": "NVIDIA H100 80GB HBM3",
      "perfbot_commit": "unknown",
      "command": "python3 -m benchmarks.ceiling --size gpu --steps 30 --warmup 10 --modes reduce-overhead",
      "workload": "hand-written LoRA step (Qwen2-0.5B-shaped, batch 8 x 1024)",
      "subject": "ceiling, reduce-overhead",
      "role": "ceiling",
      "metric": "throughput",
      "unit": "tokens/s",
      "median": 119277,
      "spread": null,
      "runs": 1,
      "limit": {"name": "bf16 dense peak", "value": 989, "unit": "TFLOP/s"},
      "optimizations": [],
      "source": "Prologue fusion is not what slows DPO's FlexAttention forward; ...",
      "note": null
    }

``spread`` is null when the measurement gave none, else one of ``{"kind": "min-max", "low", "high"}``,
``{"kind": "interval", "low", "high", "level"}`` (a confidence interval, ``level`` null when not stated) or
``{"kind": "runs", "values": [...]}`` (every run's value). ``runs`` is how many values the median is of: runs,
or the timed steps of one run where those give it (null when the journal does not say). ``role`` says what the subject is: the unmodified
program (``baseline``), a tier's head as ``bot apply`` makes it (``head``), the hand-written step a head is
judged against (``ceiling``), one optimization or lever (``change``), perfbot's own harness (``harness``) or a
limit of the machine (``limit``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = "perfbot.record/v1"
RESULTS_FOLDER = Path(__file__).resolve().parent / "results"
JOURNAL = "journal.md"  # the history, in that folder: each record's ``source`` is one of its headings
ROLES = ("baseline", "head", "ceiling", "change", "harness", "limit")
SPREAD_KINDS = ("min-max", "interval", "runs")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_FILE_NAME = re.compile(r"(\d{4}-\d{2}-\d{2})-[a-z0-9]+(?:-[a-z0-9]+)*\.json")


class RecordError(ValueError):
    """A record file that does not hold a valid record; the message names the file and the field."""

    def __init__(self, path: Path, field: str | None, problem: str) -> None:
        where = f"{path}: {field}" if field else str(path)
        super().__init__(f"{where}: {problem}")
        self.path = path
        self.field = field


@dataclass(frozen=True)
class Spread:
    """How far the runs behind a median spread: a min–max range, an interval, or every run's value."""

    kind: str
    low: float | None = None
    high: float | None = None
    level: float | None = None
    values: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, with only the keys of its kind."""
        if self.kind == "runs":
            return {"kind": self.kind, "values": list(self.values)}
        data: dict[str, Any] = {"kind": self.kind, "low": self.low, "high": self.high}
        if self.kind == "interval":
            data["level"] = self.level
        return data


@dataclass(frozen=True)
class Limit:
    """What a measurement is set against: a physical limit of the machine or a hand-written ceiling."""

    name: str
    value: float
    unit: str


@dataclass(frozen=True)
class Record:
    """One measurement (see the module docstring for the fields)."""

    path: Path
    date: str
    device: str
    perfbot_commit: str
    command: str
    workload: str
    subject: str
    role: str
    metric: str
    unit: str
    median: float
    spread: Spread | None
    runs: int | None
    limit: Limit | None
    optimizations: tuple[str, ...]
    source: str
    note: str | None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form the file holds."""
        return {
            "format": FORMAT,
            "date": self.date,
            "device": self.device,
            "perfbot_commit": self.perfbot_commit,
            "command": self.command,
            "workload": self.workload,
            "subject": self.subject,
            "role": self.role,
            "metric": self.metric,
            "unit": self.unit,
            "median": self.median,
            "spread": self.spread.to_dict() if self.spread else None,
            "runs": self.runs,
            "limit": (
                {"name": self.limit.name, "value": self.limit.value, "unit": self.limit.unit}
                if self.limit
                else None
            ),
            "optimizations": list(self.optimizations),
            "source": self.source,
            "note": self.note,
        }


_FIELDS = tuple(Record.__dataclass_fields__)[1:]  # every field but the path
_KEYS = frozenset(("format", *_FIELDS))


def _text(path: Path, data: dict[str, Any], key: str, optional: bool = False) -> str | None:
    value = data[key]
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        raise RecordError(path, key, f"expected a non-empty string, got {value!r}")
    return value


def _number(path: Path, field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RecordError(path, field, f"expected a number, got {value!r}")
    return value


def _spread(path: Path, value: Any) -> Spread | None:
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("kind") not in SPREAD_KINDS:
        raise RecordError(path, "spread", f"expected null or an object whose kind is one of {SPREAD_KINDS}")
    kind = value["kind"]
    if kind == "runs":
        values = value.get("values")
        if not isinstance(values, list) or not values:
            raise RecordError(path, "spread.values", "expected a non-empty list of numbers")
        return Spread(kind, values=tuple(_number(path, "spread.values", v) for v in values))
    expected = {"kind", "low", "high"} | ({"level"} if kind == "interval" else set())
    if set(value) != expected:
        raise RecordError(
            path, "spread", f"a {kind} spread has the keys {sorted(expected)}, got {sorted(value)}"
        )
    low, high = _number(path, "spread.low", value["low"]), _number(path, "spread.high", value["high"])
    if low > high:
        raise RecordError(path, "spread", f"low {low} is above high {high}")
    level = value.get("level")
    if level is not None and not 0 < _number(path, "spread.level", level) < 1:
        raise RecordError(path, "spread.level", f"expected a coverage between 0 and 1, got {level!r}")
    return Spread(kind, low=low, high=high, level=level)


def _limit(path: Path, value: Any) -> Limit | None:
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"name", "value", "unit"}:
        raise RecordError(path, "limit", "expected null or an object with name, value and unit")
    name, unit = value["name"], value["unit"]
    if not isinstance(name, str) or not isinstance(unit, str):
        raise RecordError(path, "limit", "name and unit must be strings")
    return Limit(name, _number(path, "limit.value", value["value"]), unit)


def parse_record(path: Path, data: Any) -> Record:
    """The record ``data`` (a file's parsed JSON) holds; :class:`RecordError` naming the field when invalid."""
    if not isinstance(data, dict):
        raise RecordError(path, None, "expected a JSON object")
    if data.get("format") != FORMAT:
        raise RecordError(
            path, "format", f"unsupported record format {data.get('format')!r}; expected {FORMAT!r}"
        )
    missing = sorted(_KEYS - set(data))
    if missing:
        raise RecordError(path, missing[0], "missing")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise RecordError(path, unknown[0], "unknown field")
    date = _text(path, data, "date") or ""
    if not _DATE.fullmatch(date):
        raise RecordError(path, "date", f"expected YYYY-MM-DD, got {date!r}")
    match = _FILE_NAME.fullmatch(path.name)
    if not match or match.group(1) != date:
        raise RecordError(
            path, None, f"the file name must be {date}-<slug>.json (lower-case words and hyphens)"
        )
    role = _text(path, data, "role")
    if role not in ROLES:
        raise RecordError(path, "role", f"expected one of {ROLES}, got {role!r}")
    runs = data["runs"]
    if runs is not None and (isinstance(runs, bool) or not isinstance(runs, int) or runs < 1):
        raise RecordError(path, "runs", f"expected null or a positive integer, got {runs!r}")
    optimizations = data["optimizations"]
    if not isinstance(optimizations, list) or not all(isinstance(o, str) and o for o in optimizations):
        raise RecordError(path, "optimizations", "expected a list of optimization ids")
    return Record(
        path=path,
        date=date,
        device=_text(path, data, "device") or "",
        perfbot_commit=_text(path, data, "perfbot_commit") or "",
        command=_text(path, data, "command") or "",
        workload=_text(path, data, "workload") or "",
        subject=_text(path, data, "subject") or "",
        role=role,
        metric=_text(path, data, "metric") or "",
        unit=_text(path, data, "unit") or "",
        median=_number(path, "median", data["median"]),
        spread=_spread(path, data["spread"]),
        runs=runs,
        limit=_limit(path, data["limit"]),
        optimizations=tuple(optimizations),
        source=_text(path, data, "source") or "",
        note=_text(path, data, "note", optional=True),
    )


def load_record(path: Path) -> Record:
    """The record in one file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise RecordError(path, None, f"not JSON: {error}") from error
    return parse_record(path, data)


def load_records(folder: Path) -> list[Record]:
    """Every record in ``folder`` (its ``*.json`` files), ordered by date, then file name."""
    return sorted((load_record(path) for path in folder.glob("*.json")), key=lambda r: (r.date, r.path.name))


def dump_record(record: Record) -> str:
    """The file text of ``record``: two-space indented JSON, non-ASCII kept, one final newline."""
    return json.dumps(record.to_dict(), indent=2, ensure_ascii=False) + "\n"
