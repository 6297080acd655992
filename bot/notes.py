"""The ``git notes`` entry the bot keeps on each measured commit (ref ``refs/notes/perfbot``): one line per
workload with the primary metric's median and run-to-run CV, its effects against the commit before and the
baseline, peak memory, loss parity and failed runs."""

from __future__ import annotations

import os

import git

from benchmarks.results import Results
from bot import formatting, losses
from bot.conventions import NOTES_REF, bot_git_environment
from bot.measurements import measurement, primary


def note_text(results: Results, sha: str) -> str:
    """The note for one measured commit: one line per workload."""
    confidence = float(results.thresholds["confidence"])
    lines = []
    for workload in results.summary:
        measured = measurement(results, workload, sha)
        if measured is None:
            continue
        failures = ", ".join(f"{count} {status}" for status, count in measured.failed.items())
        if measured.median is None:
            lines.append(f"{workload}: no successful runs ({failures or 'no runs'})")
            continue
        parts = [
            f"{workload}: {primary(results, workload)} "
            f"{formatting.median_with_ci(measured, confidence)} n={measured.n}"
            + (f" CV {formatting.fraction(measured.cv)}" if measured.cv is not None else "")
        ]
        if sha == results.baseline:
            parts.append("baseline")
        else:
            parts.append(f"vs previous {formatting.effect_evidence(measured.marginal)}")
            parts.append(f"vs baseline {formatting.effect_evidence(measured.cumulative)}")
            memory = measured.memory
            if memory.vs_baseline is not None:
                flag = " REGRESSION" if memory.regression or memory.cumulative_regression else ""
                parts.append(f"peak memory {formatting.percent(memory.vs_baseline)} vs baseline{flag}")
            tolerance = float(results.thresholds["loss_tolerance"])
            reading = losses.read(results, workload, sha, tolerance)
            if reading is not None and (reading.at_steps or reading.at_tokens):
                parity = "OUTSIDE TOLERANCE" if reading.outside else "ok"
                parts.append(f"loss {reading.cell(tolerance)} vs baseline (steps · tokens) {parity}")
        if failures:
            parts.append(f"failed: {failures}")
        lines.append(" | ".join(parts))
    return "\n".join(lines)


def write_notes(repo: git.Repo, results: Results, ref: str = NOTES_REF) -> None:
    """Attach (or replace) the note of every measured commit under ``refs/notes/<ref>``; written as the
    repository's configured identity, else as the bot (a bare CI runner has none)."""
    env = {}
    reader = repo.config_reader()
    if not reader.get_value("user", "email", default="") or not reader.get_value("user", "name", default=""):
        env = {name: os.environ.get(name, value) for name, value in bot_git_environment().items()}
    with repo.git.custom_environment(**env):
        for commit in results.commits:
            repo.git.notes("--ref", ref, "add", "-f", "-m", note_text(results, commit.sha), commit.sha)


def read_note(repo: git.Repo, sha: str, ref: str = NOTES_REF) -> str | None:
    """The note on ``sha`` under ``refs/notes/<ref>``, or None."""
    try:
        return repo.git.notes("--ref", ref, "show", sha)
    except git.GitCommandError:
        return None
