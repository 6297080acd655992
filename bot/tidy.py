"""Keeping the bot's edits as clean as the code around them, under the target's own ruff, black or isort
settings.

Transforms keep the file's own layout, but imports added by libcst land at the end of the import block, a long
added argument is not wrapped, and a vendored helper is written at perfbot's own width. Where the target
configures ruff (or black/isort, whose settings are handed to ruff), the bot's edits are tidied the way its
tools would, without touching what the bot did not write:

* a file perfbot wrote whole (new, or a vendored ``_perfbot_*`` helper) gets the target's safe ruff fixes,
  ``ruff format``, and its comments, docstrings and strings fitted under the line limits ruff reports
  (:mod:`bot.rewrap`);
* an edited file gets sorted only the import blocks the bot added a line to and that were sorted before, each by
  ruff's own fix for it (sorting another block would reorder imports the commit does not name), and is
  formatted whole when it was format-clean before; otherwise only the statements the bot changed are
  formatted (``ruff format --range``), so a file that black passes but ruff's formatter would change elsewhere
  (tloen/alpaca-lora's ``finetune.py``) still gets the calls the bot wrapped laid out as black lays them out.

A target that configures none of these tools gets only that import sort, under ruff's defaults, which sort
imports too (and which ``bot review`` lints it with).
"""

from __future__ import annotations

import configparser
import difflib
import json
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

from bot.rewrap import rewrap
from bot.ruff_pin import RuffPinMismatch, ruff_for
from optimizations.program.repository import VENDORED_PREFIX

RUFF_CONFIGS = ("ruff.toml", ".ruff.toml")
# isort settings (as isort spells them) and the ruff ``lint.isort`` setting each one is.
ISORT_SETTINGS = {
    "known_first_party": "known-first-party",
    "known_third_party": "known-third-party",
    "known_local_folder": "known-local-folder",
    "force_single_line": "force-single-line",
    "force_sort_within_sections": "force-sort-within-sections",
    "combine_as_imports": "combine-as-imports",
    "lines_after_imports": "lines-after-imports",
    "order_by_type": "order-by-type",
    "case_sensitive": "case-sensitive",
}
# isort's section names (its ``default_section``, where imports of no known kind go) and ruff's.
ISORT_SECTIONS = {
    "FUTURE": "future",
    "STDLIB": "standard-library",
    "THIRDPARTY": "third-party",
    "FIRSTPARTY": "first-party",
    "LOCALFOLDER": "local-folder",
}
_LIMIT = re.compile(r"\((\d+) > (\d+)\)")
_FIT_ROUNDS = 3


def uses_ruff(root: Path) -> bool:
    """True when the repository configures ruff (``ruff.toml`` or ``[tool.ruff]`` in pyproject.toml)."""
    if any((root / name).exists() for name in RUFF_CONFIGS):
        return True
    pyproject = root / "pyproject.toml"
    return pyproject.exists() and "[tool.ruff" in pyproject.read_text(encoding="utf-8")


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, list)):
        return json.dumps(value)
    return json.dumps(str(value))


def _ini_value(name: str, text: str) -> Any:
    """An isort setting read from an INI file: a list for ``known_*``, else a bool or an int where it is one."""
    if name.startswith("known_"):
        return [part.strip() for part in re.split(r"[,\n]", text) if part.strip()]
    if text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    return int(text) if text.strip().isdigit() else text.strip()


def _isort_settings(root: Path, pyproject: dict[str, Any]) -> dict[str, Any] | None:
    """The target's isort settings: ``[tool.isort]``, ``.isort.cfg`` or setup.cfg's ``[isort]``; None if none."""
    if isinstance(pyproject.get("tool", {}).get("isort"), dict):
        return pyproject["tool"]["isort"]
    for name, section in ((".isort.cfg", "settings"), ("setup.cfg", "isort"), ("tox.ini", "isort")):
        parser = configparser.ConfigParser()
        try:
            parser.read(root / name, encoding="utf-8")
        except configparser.Error:
            continue
        if parser.has_section(section):
            return {key: _ini_value(key, value) for key, value in parser.items(section)}
    return None


def style_settings(root: Path) -> list[str] | None:
    """The ruff arguments that check and format like the target's tools: none besides its own config where it
    configures ruff; black's and isort's settings as ``--config`` overrides where it configures only those;
    None when it configures none of them (then nothing is tidied)."""
    if uses_ruff(root):
        return []
    try:
        pyproject = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        pyproject = {}
    black = pyproject.get("tool", {}).get("black")
    isort = _isort_settings(root, pyproject)
    if not isinstance(black, dict) and isort is None:
        return None
    black, isort = black if isinstance(black, dict) else {}, isort or {}
    overrides: dict[str, Any] = {}
    length = black.get("line-length", isort.get("line_length"))
    if isinstance(length, int):
        overrides["line-length"] = length
    if black.get("skip-string-normalization"):
        overrides["format.quote-style"] = "preserve"
    if black.get("skip-magic-trailing-comma"):
        overrides["format.skip-magic-trailing-comma"] = True
    for name, setting in ISORT_SETTINGS.items():
        if name in isort:
            overrides[f"lint.isort.{setting}"] = isort[name]
    if section := ISORT_SECTIONS.get(str(isort.get("default_section", "")).upper()):
        overrides["lint.isort.default-section"] = section
    return [
        part for key, value in overrides.items() for part in ("--config", f"{key} = {_toml_value(value)}")
    ]


def _ruff(root: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """The target's ruff (:func:`bot.ruff_pin.ruff_for`), run directly: a ``python -m ruff`` would start an
    interpreter per call."""
    return subprocess.run(
        [ruff_for(root), *args],
        cwd=root,
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )


def was_format_clean(root: Path, path: str, original: str, settings: tuple[str, ...] = ()) -> bool:
    """Whether ``original`` (the file before the change) passed ``ruff format --check``."""
    args = ("format", *settings, "--check", "--stdin-filename", path, "-")
    return _ruff(root, *args, stdin=original).returncode == 0


def line_limits(root: Path, path: str, settings: tuple[str, ...] = ()) -> tuple[int | None, int | None]:
    """The limits the target's ruff holds ``path`` to, as its diagnostics name them: ``E501``'s line length
    and ``W505``'s doc length; None for one it does not report."""
    completed = _ruff(root, "check", *settings, "--exit-zero", "--output-format", "json", path)
    limits: dict[str, int] = {}
    for item in json.loads(completed.stdout or "[]"):
        if item.get("code") in ("E501", "W505") and (match := _LIMIT.search(item["message"])):
            limits[item["code"]] = int(match.group(2))
    return limits.get("E501"), limits.get("W505")


def _fit(root: Path, path: str, settings: tuple[str, ...]) -> None:
    """Fit a file perfbot wrote whole under the target's line limits: rewrap, re-format, until it fits."""
    for _ in range(_FIT_ROUNDS):
        limit, doc_limit = line_limits(root, path, settings)
        if limit is None and doc_limit is None:
            return
        file = root / path
        source = file.read_text(encoding="utf-8")
        fitted = rewrap(source, limit or 10**6, doc_limit)
        if fitted == source:
            return
        file.write_text(fitted, encoding="utf-8")
        _ruff(root, "format", *settings, "--quiet", path)


def format_changed_lines(root: Path, path: str, original: str, settings: tuple[str, ...] = ()) -> None:
    """Format the lines of ``path`` that differ from ``original``, and nothing else.

    One ``ruff format --range`` per run of changed lines (ruff widens a range to the logical lines it cuts),
    the last run first, so the runs above keep their line numbers.
    """
    current = (root / path).read_text(encoding="utf-8").splitlines()
    matcher = difflib.SequenceMatcher(None, original.splitlines(), current, autojunk=False)
    changed = [(j1, j2) for tag, _, _, j1, j2 in matcher.get_opcodes() if tag in ("replace", "insert")]
    for first, end in reversed(changed):
        _ruff(root, "format", *settings, "--quiet", f"--range={first + 1}-{end + 1}", path)


def _unsorted_blocks(root: Path, path: str, source: str, settings: tuple[str, ...]) -> list[dict[str, Any]]:
    """ruff's ``I001`` diagnostics of ``source``: one per unsorted import block, with the fix that sorts it."""
    args = ("check", *settings, "--select", "I001", "--exit-zero", "--output-format", "json")
    return json.loads(_ruff(root, *args, "--stdin-filename", path, "-", stdin=source).stdout or "[]")


def sort_added_import_blocks(root: Path, path: str, original: str, settings: tuple[str, ...] = ()) -> None:
    """Sort the import blocks of ``path`` that the bot added a line to, or put a line right after (the blank
    lines a target's ``lines-after-imports`` asks for), and that were sorted before it did (ruff's ``I001`` fix
    for each); a block that was unsorted before keeps its order, and so does every other block."""
    file = root / path
    source = file.read_text(encoding="utf-8")
    source_lines = source.splitlines()
    matcher = difflib.SequenceMatcher(None, original.splitlines(), source.splitlines(), autojunk=False)
    kept = {  # a line of the edited file that the original has: its line number there (1-based)
        new + 1: old_start + new - new_start + 1
        for tag, old_start, _, new_start, new_end in matcher.get_opcodes()
        if tag == "equal"
        for new in range(new_start, new_end)
    }
    unsorted_before = [
        (d["location"]["row"], d["end_location"]["row"])
        for d in _unsorted_blocks(root, path, original, settings)
    ]
    edits = []
    for block in _unsorted_blocks(root, path, source, settings):
        after = block["end_location"]["row"] + 1  # the first line of code after the block's blank lines
        while after <= len(source_lines) and not source_lines[after - 1].strip():
            after += 1
        lines = range(block["location"]["row"], block["end_location"]["row"] + 1)
        added = any(line not in kept for line in range(lines.start, min(after, len(source_lines)) + 1))
        was_unsorted = any(
            first <= kept[line] <= last for line in lines if line in kept for first, last in unsorted_before
        )
        if block.get("fix") and added and not was_unsorted:
            edits += block["fix"]["edits"]
    if edits:
        file.write_text(_apply_edits(source, edits), encoding="utf-8")


def _apply_edits(source: str, edits: list[dict[str, Any]]) -> str:
    """``source`` with ruff's fix edits (1-based rows and columns) applied, the last first."""
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def offset(at: dict[str, int]) -> int:
        return starts[at["row"] - 1] + at["column"] - 1

    for edit in sorted(edits, key=lambda e: offset(e["location"]), reverse=True):
        source = (
            source[: offset(edit["location"])]
            + (edit["content"] or "")
            + source[offset(edit["end_location"]) :]
        )
    return source


def tidy(root: Path, originals: dict[str, str | None]) -> str | None:
    """Tidy the changed Python files the way the target's ruff/black/isort would, leaving alone what the bot
    did not write. ``None``, or why nothing was tidied (the target pins a ruff that is not to be found).

    ``originals`` maps each changed path to its text before the change (``None`` for a new file).
    """
    try:
        ruff_for(root)
    except RuffPinMismatch as mismatch:
        return str(mismatch)
    found = style_settings(root)
    settings = tuple(found or ())
    python = [p for p in originals if p.endswith(".py")]
    ours = [p for p in python if originals[p] is None or Path(p).name.startswith(VENDORED_PREFIX)]
    edited = {p: original for p in python if p not in ours and (original := originals[p]) is not None}
    for path, original in edited.items():
        sort_added_import_blocks(root, path, original, settings)
    if found is None:
        return None
    if ours:  # the target's own rule set where it configures ruff, else only the import order
        rules = () if uses_ruff(root) else ("--select", "I001")
        _ruff(root, "check", *settings, "--fix", *rules, "--quiet", *ours)
    clean_before = ours + [
        p for p, original in edited.items() if was_format_clean(root, p, original, settings)
    ]
    if clean_before:
        _ruff(root, "format", *settings, "--quiet", *clean_before)
    for path, original in edited.items():
        if path not in clean_before:
            format_changed_lines(root, path, original, settings)
    for path in ours:
        _fit(root, path, settings)
    return None
