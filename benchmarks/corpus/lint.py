"""ruff's F rules (names and imports: undefined, unused, redefined) on what the applies changed: the violations
the last commit has that the pinned snapshot did not, read from each file's text through ruff's stdin."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterable


def violations(path: str, text: str | None) -> Counter[tuple[str, str]]:
    """ruff's F violations of `text` as the file `path` (isolated from any configuration), as (code, message)
    counted, so that moved lines still match; none for a missing file."""
    if text is None:
        return Counter()
    command = [sys.executable, "-m", "ruff", "check", "--select", "F", "--isolated", "--exit-zero"]
    command += ["--output-format", "json", "--stdin-filename", path, "-"]
    done = subprocess.run(command, input=text, capture_output=True, text=True)
    found = json.loads(done.stdout or "[]")
    return Counter((v["code"], v["message"]) for v in found)


def new_lint(
    paths: Iterable[str], before: Callable[[str], str | None], after: Callable[[str], str | None]
) -> list[str]:
    """`path: CODE message` for each F violation of `after(path)` that `before(path)` did not have."""
    new = []
    for path in sorted(set(paths)):
        if path.endswith(".py"):
            added = violations(path, after(path)) - violations(path, before(path))
            new += [f"{path}: {code} {message}" for code, message in added.elements()]
    return new
