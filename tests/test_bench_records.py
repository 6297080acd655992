"""The measurement records under benchmarks/results/: every file loads, names registered optimizations and a
journal heading, and is in its canonical form; a malformed record is refused with the file and field named."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks.records import (
    FORMAT,
    JOURNAL,
    RESULTS_FOLDER,
    RecordError,
    dump_record,
    load_record,
    load_records,
)
from optimizations.registry import listings

VALID = {
    "format": FORMAT,
    "date": "2026-11-27",
    "device": "NVIDIA H100 80GB HBM3",
    "perfbot_commit": "unknown",
    "command": "python3 -m benchmarks.ceiling --size gpu --steps 30 --warmup 10 --modes reduce-overhead",
    "workload": "hand-written LoRA step",
    "subject": "ceiling, reduce-overhead",
    "role": "ceiling",
    "metric": "step time",
    "unit": "ms",
    "median": 68.7,
    "spread": {"kind": "min-max", "low": 68.2, "high": 70.2},
    "runs": 30,
    "limit": {"name": "bf16 dense peak", "value": 989, "unit": "TFLOP/s"},
    "optimizations": [],
    "source": "A section",
    "note": None,
}


def _write(folder: Path, data: dict, name: str = "2026-11-27-ceiling.json") -> Path:
    path = folder / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_every_record_loads_and_is_in_its_canonical_form():
    records = load_records(RESULTS_FOLDER)
    assert len(records) > 300
    for record in records:
        assert record.path.read_text(encoding="utf-8") == dump_record(record), record.path


def test_every_record_names_registered_optimizations_and_a_journal_heading():
    known = {listing.id for listing in listings()}
    journal = (RESULTS_FOLDER / JOURNAL).read_text(encoding="utf-8")
    headings = {match.group(1) for match in re.finditer(r"^#+ (.+?)\s*$", journal, re.M)}
    for record in load_records(RESULTS_FOLDER):
        assert set(record.optimizations) <= known, record.path
        assert record.source in headings, record.path


def test_a_valid_record_reads_back(tmp_path):
    record = load_record(_write(tmp_path, VALID))
    assert (record.median, record.spread.low, record.limit.value, record.runs) == (68.7, 68.2, 989, 30)
    assert json.loads(dump_record(record)) == VALID


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"format": "perfbot.record/v2"}, "format", "unsupported record format"),
        ({"median": "fast"}, "median", "expected a number"),
        ({"spread": {"kind": "min-max", "low": 3, "high": 2}}, "spread", "above high"),
        ({"spread": {"kind": "range", "low": 1, "high": 2}}, "spread", "kind is one of"),
        (
            {"spread": {"kind": "interval", "low": 1, "high": 2, "level": 95}},
            "spread.level",
            "between 0 and 1",
        ),
        ({"runs": 0}, "runs", "positive integer"),
        ({"role": "winner"}, "role", "expected one of"),
        ({"limit": {"name": "peak"}}, "limit", "name, value and unit"),
        ({"optimizations": "fa2"}, "optimizations", "list of optimization ids"),
        ({"date": "27 Nov 2026"}, "date", "YYYY-MM-DD"),
        ({"colour": "blue"}, "colour", "unknown field"),
    ],
)
def test_an_invalid_record_is_refused_naming_the_file_and_the_field(tmp_path, change, field, words):
    path = _write(tmp_path, {**VALID, **change})
    with pytest.raises(RecordError, match=words) as raised:
        load_record(path)
    assert raised.value.field == field
    assert str(raised.value).startswith(f"{path}: {field}: ")


def test_a_missing_field_is_named(tmp_path):
    data = dict(VALID)
    del data["command"]
    with pytest.raises(RecordError, match="command: missing"):
        load_record(_write(tmp_path, data))


def test_the_file_name_carries_the_record_s_date(tmp_path):
    with pytest.raises(RecordError, match="file name must be 2026-11-27-<slug>.json"):
        load_record(_write(tmp_path, VALID, name="2026-11-28-ceiling.json"))


def test_a_file_that_is_not_json_is_named(tmp_path):
    path = tmp_path / "2026-11-27-broken.json"
    path.write_text("{", encoding="utf-8")
    with pytest.raises(RecordError, match="not JSON") as raised:
        load_records(tmp_path)
    assert raised.value.path == path
