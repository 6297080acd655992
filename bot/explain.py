"""``bot scan --explain``: the effective run configuration of each training entry point, each value with its
source, as text for a terminal and as data for ``--json``."""

from __future__ import annotations

from typing import Any

from optimizations.program.runs.resolve import EntryRuns
from optimizations.program.runs.settings import SETTINGS


def explain_data(entries: list[EntryRuns]) -> list[dict[str, Any]]:
    """Each entry point, its runs and their settings (value, source, what is written there), and the settings
    its runs disagree on."""
    return [
        {
            "entry": entry.entry,
            "runs": [
                {
                    "launch": run.name,
                    "command": None if run.launch is None else run.launch.launcher,
                    "settings": {
                        name: {"value": s.value, "source": s.source, "written": s.written}
                        for name in SETTINGS
                        if (s := run.settings.get(name)) is not None
                    },
                }
                for run in entry.runs
            ],
            "disagree": sorted(entry.disagreements()),
        }
        for entry in entries
    ]


def explain_text(entries: list[EntryRuns]) -> str:
    """One table per run of each entry point: setting, value, source; then what its runs disagree on."""
    if not entries:
        return "No training entry point found (no file with a backward pass, a trainer or a fit is run).\n"
    lines: list[str] = []
    for entry in entries:
        lines.append(f"{entry.entry}: {len(entry.runs)} run(s)")
        for run in entry.runs:
            lines.append(f"  run: {run.name}")
            width = max(len(name) for name in SETTINGS)
            settings = [run.settings[name] for name in SETTINGS if name in run.settings]
            column = max(len(setting.value) for setting in settings)
            for setting in settings:
                written = f"  `{setting.written}`" if setting.written else ""
                lines.append(
                    f"    {setting.name:<{width}}  {setting.value:<{column}}  {setting.source}{written}"
                )
        for name, values in entry.disagreements().items():
            by_value: dict[str, list[str]] = {}
            for value in values:
                by_value.setdefault(value.value, []).append(value.source)
            shown = "; ".join(
                f"{value} in {len(sources)} run(s) ({sources[0]}{', ...' if len(set(sources)) > 1 else ''})"
                for value, sources in by_value.items()
            )
            lines.append(f"  launches disagree on {name}: {shown}: each launch is a run of its own")
        lines.append("")
    return "\n".join(lines)
