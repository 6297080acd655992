"""What the lever studies (``experiments/*/levers.py``, copied into a copy of the example and run there with
perfbot on ``PYTHONPATH``) share: the levers asked for, and handing over to the example's own script."""

from __future__ import annotations

import os
import runpy
import sys


def chosen(known: set[str]) -> set[str]:
    """The comma-separated levers of ``PERFBOT_LEVER`` (default ``none``); exits naming any not in ``known``.
    The example's folder goes on ``sys.path``, so its modules can be imported and patched."""
    levers = {lever.strip() for lever in os.environ.get("PERFBOT_LEVER", "none").split(",") if lever.strip()}
    unknown = levers - known
    if unknown:
        raise SystemExit(f"unknown PERFBOT_LEVER {sorted(unknown)}; choose from {sorted(known)}")
    sys.path.insert(0, os.getcwd())
    return levers


def run_script(script: str) -> None:
    """Run the example's ``script`` as ``python script ARGS`` would, with this program's arguments."""
    sys.argv = [script, *sys.argv[1:]]
    runpy.run_path(script, run_name="__main__")
