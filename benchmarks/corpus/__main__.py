"""`python -m benchmarks.corpus`: run perfbot on every corpus repository (or those named with --only), print a
table per repository and the summary, and write every count as JSON with --json OUT (the run's record for the
results reference with --record)."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
from pathlib import Path

from benchmarks.corpus.evaluate import evaluate
from benchmarks.corpus.manifest import REPOS, ManifestError, load_all
from benchmarks.corpus.perfbot import TIMEOUT_S
from benchmarks.corpus.record import write_record
from benchmarks.corpus.table import markdown_summary, repository_table, summary, totals


def main(argv: list[str] | None = None) -> int:
    """Score the corpus; exit 2 when a corpus file is invalid, else 0."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.corpus", description=__doc__)
    parser.add_argument("--repos", type=Path, default=REPOS, help="folder of the repositories' TOML files")
    parser.add_argument("--only", nargs="*", default=(), help="repositories by file stem or source")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write every count and item as JSON")
    parser.add_argument("--markdown", type=Path, metavar="OUT", help="write the summary as a Markdown table")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "perfbot-corpus-wheels")
    parser.add_argument(
        "--mirrors", type=Path, help="fetch mirrors (default: $PERFBOT_MIRRORS or /work/.mirror)"
    )
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per perfbot command")
    parser.add_argument(
        "--record", action="store_true", help="write the run's record into benchmarks/results/corpus/"
    )
    args = parser.parse_args(argv)
    try:
        manifests = load_all(args.repos, args.only)
    except ManifestError as error:
        print(f"corpus: {error}", file=sys.stderr)
        return 2
    if not manifests:
        print(
            f"corpus: no repository in {args.repos}" + (f" named {' '.join(args.only)}" if args.only else "")
        )
        return 0
    scores = []
    started = datetime.datetime.now(datetime.UTC)
    with tempfile.TemporaryDirectory(prefix="perfbot-corpus-") as work:
        for manifest in manifests:
            print(f"… {manifest.name}", file=sys.stderr, flush=True)
            scores.append(evaluate(manifest, Path(work), args.cache, args.timeout, args.mirrors))
            print(repository_table(scores[-1]), flush=True)
    print(summary(scores), end="")
    if args.markdown:
        args.markdown.write_text(markdown_summary(scores), encoding="utf-8")
    if args.record:
        command = "python -m benchmarks.corpus " + " ".join(argv if argv is not None else sys.argv[1:])
        print(f"corpus: wrote {write_record(scores, command.strip(), started)}", file=sys.stderr)
    if args.json:
        data = {"totals": totals(scores), "repositories": [s.to_dict() for s in scores]}
        args.json.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
