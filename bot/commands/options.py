"""Options shared by several commands (not a command itself): the benchmark settings and the tier."""

from __future__ import annotations

import argparse

from benchmarks.spec import check_size
from benchmarks.stats import DEFAULT_THRESHOLDS
from bot.benchmarking import BenchOptions
from bot.errors import BadInput


def tier_number(text: str) -> int:
    """``--tier``: a plan's tiers are numbered 0 and up."""
    try:
        tier = int(text)
    except ValueError:
        tier = -1
    if tier < 0:
        raise argparse.ArgumentTypeError(f"a tier is a number, 0 or more (got {text!r})")
    return tier


def workload_size(text: str) -> str:
    """``--size``: a name (:func:`benchmarks.spec.check_size`), filled into a workload command as one argument."""
    try:
        return check_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """``--runner``, ``--address``, ``--workload``, ``--size``, ``--steps``, ``--repeats``, ``--warmup-rounds``,
    ``--max-host-load``, ``--resolve``, ``--interleave``, ``--warm-up-together`` and ``--drop-regressions``."""
    parser.add_argument(
        "--runner",
        choices=("local", "ray"),
        default="local",
        help="where benchmarks run: this machine's GPUs, or one Ray task per run on a Ray cluster",
    )
    parser.add_argument(
        "--address",
        help="with --runner ray: the cluster (host:port or ray://host:port; default $RAY_ADDRESS)",
    )
    parser.add_argument(
        "--workload", action="append", metavar="NAME", help="only these workloads (repeatable)"
    )
    parser.add_argument(
        "--size",
        type=workload_size,
        help="workload size from [tool.bot] (e.g. tiny, gpu): a name, one argument",
    )
    parser.add_argument(
        "--steps", type=int, help="at least this many steps per run (calibration may add more)"
    )
    parser.add_argument("--repeats", type=int, help="rounds at least (each commit once per round)")
    parser.add_argument(
        "--max-repeats", type=int, help="rounds at most, while an effect's interval is not yet precise"
    )
    parser.add_argument(
        "--resolve",
        type=float,
        metavar="FRACTION",
        help="add rounds until every interval is narrow enough to detect a change of this size 95%% of the time "
        "(e.g. 0.05; above the 3%% minimum effect; default: until each interval is within ±3%%)",
    )
    parser.add_argument(
        "--min-time",
        type=float,
        metavar="SECONDS",
        help="measured time per run the calibration aims for (default 10 on a GPU, 3 on CPU; 0: no calibration)",
    )
    parser.add_argument(
        "--time-budget",
        type=float,
        metavar="SECONDS",
        help="no round starts that would end after this (default 1800 on a GPU, 600 on CPU)",
    )
    parser.add_argument(
        "--warmup-rounds", type=int, help="whole rounds run first and discarded (GPU machines)"
    )
    parser.add_argument(
        "--max-host-load",
        type=float,
        metavar="FRACTION",
        help="leave out runs made while other processes kept more than this share of the host's CPUs busy, "
        "and wait for a quieter host before each run (default 0.10; 1 keeps every run, e.g. on a shared CI box)",
    )
    parser.add_argument(
        "--interleave",
        type=int,
        default=0,
        metavar="WINDOWS",
        help="start each round's runs together on one GPU and let them take turns, measuring this many windows "
        "each in ABBA order: start-up overlaps and every commit is measured in every stretch of the round "
        "(default 0: one run at a time; the GPU must hold one run's peak memory plus the others' weights and "
        "optimizer state; a run out of memory there runs again alone)",
    )
    parser.add_argument(
        "--warm-up-together",
        action="store_true",
        help="with --interleave: the round's runs warm up (compile, capture graphs) at the same time, not in "
        "turns, and take turns only to measure; faster for compiled programs, but the GPU must hold every "
        "run's peak memory at once",
    )
    parser.add_argument(
        "--drop-regressions",
        action="store_true",
        help="revert each commit that measured a significant slowdown (a new revert commit with the evidence; "
        "history is never rewritten), then benchmark the head again",
    )


def bench_options(args: argparse.Namespace) -> BenchOptions:
    """The parsed benchmark options as typed values; a value out of range is bad input."""
    if args.interleave < 0 or args.interleave == 1:
        raise BadInput("--interleave takes 2 or more windows per run (0: one run at a time)")
    if args.warm_up_together and not args.interleave:
        raise BadInput("--warm-up-together is a way of taking turns: use it with --interleave WINDOWS")
    if args.resolve is not None and not DEFAULT_THRESHOLDS.min_effect < args.resolve < 1:
        raise BadInput(
            f"--resolve is a change to detect, above the {DEFAULT_THRESHOLDS.min_effect:.0%} minimum effect (no "
            f"smaller change is ever named a win or a regression) and below 1, got {args.resolve:g}"
        )
    if args.max_host_load is not None and not 0 < args.max_host_load <= 1:
        raise BadInput(
            "--max-host-load is a share of the host's CPUs: above 0, at most 1 (1 keeps every run)"
        )
    return BenchOptions(
        workloads=tuple(args.workload) if args.workload else None,
        size=args.size,
        steps=args.steps,
        repeats=args.repeats,
        warmup_rounds=args.warmup_rounds,
        max_repeats=args.max_repeats,
        min_time_s=args.min_time,
        time_budget_s=args.time_budget,
        max_host_load=args.max_host_load,
        resolve=args.resolve,
        runner=args.runner,
        address=args.address,
        drop_regressions=args.drop_regressions,
        interleave=args.interleave,
        warm_up_together=args.warm_up_together,
    )
