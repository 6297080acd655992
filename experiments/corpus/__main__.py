"""``python -m experiments.corpus``: install the corpus programs, run perfbot on each, print the tables."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from experiments.corpus.corpus import Unavailable, build_repository, run_program, wheel_for
from experiments.corpus.programs import PROGRAMS
from experiments.corpus.table import render, summary
from optimizations.registry import registry


def main(argv: list[str] | None = None) -> int:
    """Run every program (or those named with --only) and print the summary and the corpus table."""
    parser = argparse.ArgumentParser(prog="python -m experiments.corpus", description=__doc__)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "perfbot-corpus-wheels")
    parser.add_argument("--only", nargs="*", default=None, help="program names (as in the table)")
    args = parser.parse_args(argv)
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="perfbot-corpus-") as work:
        for program in PROGRAMS:
            if args.only and program.name not in args.only:
                continue
            try:
                wheel = wheel_for(program, args.cache)
            except Unavailable as reason:
                print(f"skipped {program.name}: {reason}")
                continue
            repo = build_repository(program, wheel, Path(work) / program.slug)
            outcomes.append(run_program(program, repo, Path(work)))
    print(summary(outcomes))
    ordered = sorted(registry().values(), key=lambda o: o.tier)
    print(render(outcomes, {o.id: o.tier for o in ordered}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
