"""The corpus's results as records: one JSON file per scored run in ``benchmarks/results/corpus/`` (format
``perfbot.corpus/v1``), with the date and time it started, perfbot's commit, the command, the totals and the summary table, for
``python -m benchmarks.reference`` to put in the results reference."""

from __future__ import annotations

import datetime
import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.corpus.score import Score
from benchmarks.corpus.table import markdown_summary, totals

FORMAT = "perfbot.corpus/v1"
FOLDER = Path(__file__).resolve().parents[1] / "results" / "corpus"


def perfbot_commit() -> str:
    """The short commit perfbot runs from (``unknown`` outside git), ``+dirty`` when its tree has changes."""
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def write_record(
    scores: Sequence[Score], command: str, started: datetime.datetime, folder: Path = FOLDER
) -> Path:
    """Write the record of the run that ``started`` then into ``folder``; its path."""
    commit = perfbot_commit()
    today = started.date().isoformat()
    data = {
        "format": FORMAT,
        "date": today,
        "started": started.isoformat(timespec="minutes"),
        "perfbot_commit": commit,
        "command": command,
        "totals": totals(scores),
        "table": markdown_summary(scores),
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{started.strftime('%Y-%m-%d-%H%M')}-{commit.replace('+', '-')}.json"
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def load_corpus_records(folder: Path = FOLDER) -> list[dict[str, Any]]:
    """Every corpus record in ``folder``, oldest first; one not of this format is an error naming it."""
    records = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"{path}: not a {FORMAT} record")
        records.append(data)
    return sorted(records, key=lambda r: r["started"])
