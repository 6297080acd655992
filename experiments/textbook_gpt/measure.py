"""Tokens/s of a textbook GPT-2 training loop before and after perfbot's tier 1, measured on the program as it is.

Each version is a folder holding the program's own ``gpt_train.py`` and ``previous_chapters.py`` (and, at the
bot's head, the ``_perfbot_*.py`` helpers its commits add), exported from git and never committed here. Every
run imports that folder's ``gpt_train`` in a fresh Python process and calls its own
``main(GPT_CONFIG_124M, OTHER_SETTINGS)``, with the two dicts read from the script's ``__main__`` block. What the
GPU machine lacks is stood in for at the edges only: ``tiktoken`` by a byte-level tokenizer (the BPE file needs
the network), ``requests`` and ``matplotlib`` by empty modules, ``the-verdict.txt`` by a generated file of random
words. The loop is observed, not changed: ``evaluate_model`` (called every ``eval_freq`` steps) is wrapped to
synchronise the GPU, read the loop's own ``tokens_seen``/``global_step``/``epoch`` from the caller's frame and
record the time and the losses it returns; ``generate_and_print_sample`` (end of each epoch) is timed likewise.

Tokens/s = the loop's ``tokens_seen`` over wall time from the first evaluation of the second epoch to the last
one (the first epoch holds ``torch.compile``'s compilation, of the training, evaluation and generation graphs).

    python3 experiments/textbook_gpt/measure.py --versions .gpu --out $OUT   # on the GPU machine
    python experiments/textbook_gpt/measure.py --versions .gpu --out /tmp/t --tiny --repeats 1   # CPU smoke test
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

PROGRAM_DICTS = ("GPT_CONFIG_124M", "OTHER_SETTINGS")
# A tiny model and text for checking the harness on a CPU; never used for a reported number.
TINY_CONFIG = {"vocab_size": 256, "emb_dim": 64, "n_heads": 2, "n_layers": 2, "context_length": 64}


class StopRun(Exception):
    """Raised from the evaluation hook once a run has used its time, ending ``main`` early."""


def program_settings(script: Path) -> dict[str, dict]:
    """The literal ``GPT_CONFIG_124M`` and ``OTHER_SETTINGS`` dicts assigned in ``script``'s ``__main__`` block."""
    found = {}
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in PROGRAM_DICTS:
                found[node.targets[0].id] = ast.literal_eval(node.value)
    missing = set(PROGRAM_DICTS) - set(found)
    if missing:
        raise SystemExit(f"{script}: no literal {', '.join(sorted(missing))}")
    return found


def write_random_words(path: Path, n_bytes: int, seed: int) -> None:
    """Write about ``n_bytes`` of ASCII text: Zipf-distributed made-up words, sentences and line breaks."""
    rng = random.Random(seed)
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    vocabulary = ["".join(rng.choices(letters, k=rng.randint(2, 10))) for _ in range(5000)]
    weights = [1.0 / rank for rank in range(1, len(vocabulary) + 1)]
    parts, size = [], 0
    while size < n_bytes:
        sentence = " ".join(rng.choices(vocabulary, weights, k=rng.randint(5, 20))).capitalize() + "."
        sentence += "\n" if rng.random() < 0.15 else " "
        parts.append(sentence)
        size += len(sentence)
    path.write_text("".join(parts))


class ByteTokenizer:
    """Stands in for ``tiktoken.get_encoding("gpt2")``: one token per UTF-8 byte (ids 0-255)."""

    def encode(self, text: str, allowed_special=()) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


def install_stubs() -> None:
    """Put stand-ins for ``tiktoken``, ``requests`` and ``matplotlib.pyplot`` into ``sys.modules``."""
    tiktoken = types.ModuleType("tiktoken")
    tiktoken.get_encoding = lambda name: ByteTokenizer()
    requests = types.ModuleType("requests")

    def no_network(*args, **kwargs):
        raise RuntimeError("no network here: the-verdict.txt is generated beforehand")

    requests.get = no_network
    matplotlib = types.ModuleType("matplotlib")
    pyplot = types.ModuleType("matplotlib.pyplot")
    matplotlib.pyplot = pyplot
    sys.modules.update(tiktoken=tiktoken, requests=requests, matplotlib=matplotlib)
    sys.modules["matplotlib.pyplot"] = pyplot


def run_child(
    version: Path,
    workdir: Path,
    result: Path,
    stop_at: float,
    window_s: float,
    warmup_epochs: int,
    tiny: bool,
) -> None:
    """Train once with ``version``'s own ``main`` in this process and write what the hooks saw to ``result``.

    The run ends (``StopRun`` from the hook) ``window_s`` seconds into epoch ``warmup_epochs`` or at ``stop_at``.
    """
    install_stubs()
    version = version.resolve()
    sys.path.insert(0, str(version))
    os.chdir(workdir)
    import gpt_train
    import torch

    settings = program_settings(version / "gpt_train.py")
    config, other = settings["GPT_CONFIG_124M"], settings["OTHER_SETTINGS"]
    if tiny:
        config = {**config, **TINY_CONFIG}
    cuda = torch.cuda.is_available()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    started = time.perf_counter()
    evaluations, samples, model_info = [], [], {}
    evaluate_model, generate_and_print_sample = gpt_train.evaluate_model, gpt_train.generate_and_print_sample

    def timed_evaluate_model(model, train_loader, val_loader, device, eval_iter):
        sync()
        now = time.perf_counter()
        loop = sys._getframe(1)
        assert loop.f_code.co_name == "train_model_simple", loop.f_code.co_name
        if not model_info:
            embeddings = {id(p) for m in (model.tok_emb, model.pos_emb) for p in m.parameters()}
            params = list(model.parameters())
            model_info.update(
                parameters=sum(p.numel() for p in params),
                non_embedding_parameters=sum(p.numel() for p in params if id(p) not in embeddings),
                steps_per_epoch=len(train_loader),
                tokens_per_step=train_loader.batch_size * config["context_length"],
            )
        window_start = next((e["t"] for e in evaluations if e["epoch"] >= warmup_epochs), None)
        if time.time() > stop_at or (window_start is not None and now - started - window_start > window_s):
            raise StopRun
        train_loss, val_loss = evaluate_model(model, train_loader, val_loader, device, eval_iter)
        evaluated = time.perf_counter()  # evaluate_model ends with .item(), a sync
        evaluations.append(
            {
                "t": now - started,
                "eval_s": evaluated - now,
                "epoch": loop.f_locals["epoch"],
                "step": loop.f_locals["global_step"],
                "tokens_seen": loop.f_locals["tokens_seen"],
                "train_loss": train_loss,
                "val_loss": val_loss,
            }
        )
        return train_loss, val_loss

    def timed_generate_and_print_sample(*args, **kwargs):
        sync()
        begin = time.perf_counter()
        generate_and_print_sample(*args, **kwargs)
        sync()
        samples.append({"t": begin - started, "seconds": time.perf_counter() - begin})

    gpt_train.evaluate_model = timed_evaluate_model
    gpt_train.generate_and_print_sample = timed_generate_and_print_sample
    try:
        returned = gpt_train.main(config, other)
        completed, tokens_returned = True, returned[2]
    except StopRun:
        completed, tokens_returned = False, None
    if tokens_returned is not None:
        assert tokens_returned == [e["tokens_seen"] for e in evaluations], "hook and main disagree on tokens"
    dynamo = {}
    if "torch._dynamo" in sys.modules:
        from torch._dynamo.utils import counters

        dynamo = {key: dict(counters[key]) for key in ("stats", "graph_break") if key in counters}
        dynamo["recompiles"] = sum(counters["recompiles"].values()) if "recompiles" in counters else 0
    result.write_text(
        json.dumps(
            {
                "completed": completed,
                "config": config,
                "settings": other,
                "model": model_info,
                "evaluations": evaluations,
                "samples": samples,
                "torch": torch.__version__,
                "device": torch.cuda.get_device_name() if cuda else "cpu",
                "peak_memory_gb": torch.cuda.max_memory_allocated() / 1e9 if cuda else None,
                "dynamo": {k: v for k, v in dynamo.items() if v},
            }
        )
    )


def cuda_time(fn, *args, repeats: int) -> float:
    """Seconds per call of ``fn(*args)``, from replays of a CUDA graph of ``repeats`` calls (no launch gaps)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn(*args)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(repeats):
            fn(*args)
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / repeats)
    return statistics.median(times)


def run_limits(result: Path, config: dict, tokens_per_step: int) -> None:
    """Measure this card's ceilings and the GEMM time of one training step's linear layers at the program's shapes.

    Ceilings: a bf16 8192^3 matrix product and a 1 GiB device-to-device copy. The step's GEMMs: each linear
    layer of the model (per block Wq, Wk, Wv, out_proj, the two feed-forward layers; then the output head) as
    forward, input-gradient and weight-gradient products of ``tokens_per_step`` rows, in float32 without TF32
    (the baseline's default), TF32 and bf16, each timed as CUDA-graph replays.
    """
    import torch

    big = [torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    matmul_s = cuda_time(torch.mm, *big, repeats=5)
    source = torch.randn(2**28, device="cuda")
    target = torch.empty_like(source)
    copy_s = cuda_time(torch.Tensor.copy_, target, source, repeats=5)
    d, v, m = config["emb_dim"], config["vocab_size"], tokens_per_step
    per_block = [(d, d)] * 4 + [(d, 4 * d), (4 * d, d)]
    shapes = per_block * config["n_layers"] + [(d, v)]
    gemms = {}
    for precision, dtype in (("ieee", torch.float32), ("tf32", torch.float32), ("bf16", torch.bfloat16)):
        torch.backends.cuda.matmul.fp32_precision = "tf32" if precision == "tf32" else "ieee"
        forward = backward = 0.0
        for k, n in sorted(set(shapes)):
            count = shapes.count((k, n))
            x, w = (
                torch.randn(m, k, device="cuda", dtype=dtype),
                torch.randn(n, k, device="cuda", dtype=dtype),
            )
            dy = torch.randn(m, n, device="cuda", dtype=dtype)
            forward += count * cuda_time(torch.mm, x, w.t(), repeats=20)
            backward += count * (
                cuda_time(torch.mm, dy, w, repeats=20) + cuda_time(torch.mm, dy.t(), x, repeats=20)
            )
        gemms[precision] = {"forward_s": forward, "backward_s": backward}
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    result.write_text(
        json.dumps(
            {
                "device": torch.cuda.get_device_name(),
                "bf16_matmul_tflops": 2 * 8192**3 / matmul_s / 1e12,
                "copy_gb_s": 2 * 2**28 * 4 / copy_s / 1e9,
                "step_gemms": gemms,
            }
        )
    )


def window(run: dict, warmup_epochs: int) -> dict | None:
    """Tokens/s from the first evaluation of epoch ``warmup_epochs`` (0-based) to the last, and per epoch."""
    evaluations = run["evaluations"]
    starts = {}
    for e in evaluations:
        starts.setdefault(e["epoch"], e)
    later = [e for e in evaluations if e["epoch"] >= warmup_epochs]
    if len(later) < 2:
        return None
    first, last = later[0], later[-1]
    epochs = sorted(starts)
    per_epoch = [
        (starts[b]["tokens_seen"] - starts[a]["tokens_seen"]) / (starts[b]["t"] - starts[a]["t"])
        for a, b in itertools.pairwise(epochs)
        if a >= warmup_epochs
    ]
    return {
        "tokens_per_s": (last["tokens_seen"] - first["tokens_seen"]) / (last["t"] - first["t"]),
        "seconds": last["t"] - first["t"],
        "tokens": last["tokens_seen"] - first["tokens_seen"],
        "warmup_s": first["t"],
        "eval_share": sum(e["eval_s"] for e in later[:-1]) / (last["t"] - first["t"]),
        "per_epoch_tokens_per_s": per_epoch,
    }


def spread(values: list[float]) -> dict:
    """Median, extremes and coefficient of variation of ``values``."""
    mean = statistics.fmean(values)
    cv = statistics.stdev(values) / mean if len(values) > 1 else 0.0
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "cv": cv,
        "n": len(values),
    }


def limits_floor(
    limits: dict, model: dict, eval_freq: int, train_precision: str, eval_precision: str
) -> dict:
    """Tokens/s that the step's GEMMs plus AdamW's memory traffic alone would allow, and the MFU scale."""
    gemms = limits["step_gemms"]
    train = gemms[train_precision]["forward_s"] + gemms[train_precision]["backward_s"]
    evaluation = 2 * gemms[eval_precision]["forward_s"]  # eval_iter=1: one train and one val batch
    # AdamW on float32 weights: read weight, gradient, both moments; write weight and both moments.
    adamw = 7 * 4 * model["parameters"] / (limits["copy_gb_s"] * 1e9)
    cycle = eval_freq * (train + adamw) + evaluation
    return {
        "train_gemms_ms": train * 1e3,
        "eval_gemms_ms": evaluation * 1e3,
        "adamw_ms": adamw * 1e3,
        "tokens_per_s": eval_freq * model["tokens_per_step"] / cycle,
    }


def run_driver(args: argparse.Namespace) -> None:
    """Generate the text, measure the card, then run the versions interleaved and summarise."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    write_random_words(work / "the-verdict.txt", args.text_bytes, seed=0)
    deadline = time.time() + args.budget_s
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PERFBOT_COMPILE", None)
    me = str(Path(__file__).resolve())
    versions = {name: Path(args.versions) / name for name in ("base", "head")}
    files = {
        name: {f.name: hashlib.sha256(f.read_bytes()).hexdigest()[:16] for f in sorted(path.glob("*.py"))}
        for name, path in versions.items()
    }
    settings = program_settings(versions["base"] / "gpt_train.py")
    config = {**settings["GPT_CONFIG_124M"], **(TINY_CONFIG if args.tiny else {})}
    log = open(out / "runs.log", "w")
    limits = None
    if not args.tiny:
        limits_path = work / "limits.json"
        tokens_per_step = settings["OTHER_SETTINGS"]["batch_size"] * config["context_length"]
        try:
            subprocess.run(
                [sys.executable, me, "--limits", str(limits_path), "--tokens-per-step", str(tokens_per_step)]
                + ["--versions", args.versions],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                check=True,
                timeout=90,
            )
            limits = json.loads(limits_path.read_text())
        except subprocess.SubprocessError as error:
            print(f"limits not measured: {error}", flush=True)
        print(f"limits: {json.dumps(limits)}", flush=True)
    runs = []
    for index, name in enumerate(["base", "head"] * args.repeats):
        if time.time() > deadline - args.min_run_s:
            print(f"run {index} ({name}) skipped: budget spent", flush=True)
            continue
        result = work / f"run{index}_{name}.json"
        stop_at = min(time.time() + args.max_run_s, deadline)
        log.write(f"\n===== run {index}: {name}\n")
        log.flush()
        began = time.time()
        command = [sys.executable, me, "--child", str(versions[name]), "--workdir", str(work)]
        command += ["--result", str(result), "--stop-at", str(stop_at), "--window-s", str(args.window_s)]
        command += ["--warmup-epochs", str(args.warmup_epochs)] + (["--tiny"] if args.tiny else [])
        try:
            code = subprocess.run(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=stop_at - time.time() + 30
            ).returncode
        except subprocess.TimeoutExpired:
            code = "killed"
        run = json.loads(result.read_text()) if code == 0 else {"evaluations": [], "completed": False}
        run.update(version=name, index=index, returncode=code, process_s=time.time() - began)
        run["window"] = window(run, args.warmup_epochs)
        runs.append(run)
        w = run["window"]
        rate = (
            f"{w['tokens_per_s']:,.0f} tokens/s over {w['seconds']:.1f} s, warm-up {w['warmup_s']:.1f} s, "
            f"evaluation {w['eval_share']:.0%} of it"
            if w
            else "-"
        )
        print(
            f"run {index} {name}: rc {code}, completed {run['completed']}, {rate}, {run['process_s']:.0f} s",
            flush=True,
        )
    summary = summarise(runs, limits, args.min_window_s)
    (out / "results.json").write_text(
        json.dumps(
            {"files": files, "args": vars(args), "limits": limits, "summary": summary, "runs": runs}, indent=1
        )
    )
    table = render(summary, limits)
    (out / "summary.md").write_text(table)
    print(table)


def summarise(runs: list[dict], limits: dict | None, min_window_s: float) -> dict:
    """Per version: tokens/s spread, losses at the last evaluation every run reached; ratio and MFU.

    Runs whose measured window is shorter than ``min_window_s`` (cut short by the budget) are left out.
    """
    measured = [r for r in runs if r["window"] and r["window"]["seconds"] >= min_window_s]
    left_out = [r["index"] for r in runs if r not in measured]
    common_step = min((r["evaluations"][-1]["step"] for r in measured), default=None)
    summary = {"common_step": common_step, "versions": {}, "left_out_runs": left_out}
    eval_freq = 5  # main() passes eval_freq=5 to train_model_simple
    for name, train_precision, eval_precision in (("base", "ieee", "ieee"), ("head", "bf16", "tf32")):
        mine = [r for r in measured if r["version"] == name]
        if not mine:
            continue
        rates = [r["window"]["tokens_per_s"] for r in mine]
        at_common = [next(e for e in r["evaluations"] if e["step"] == common_step) for r in mine]
        last_ten = [[e for e in r["evaluations"] if e["step"] <= common_step][-10:] for r in mine]
        entry = {
            "tokens_per_s": spread(rates),
            "runs": [round(x) for x in rates],
            "within_run_epoch_cv": [
                spread(r["window"]["per_epoch_tokens_per_s"])["cv"]
                for r in mine
                if len(r["window"]["per_epoch_tokens_per_s"]) > 1
            ],
            "warmup_s": [round(r["window"]["warmup_s"], 1) for r in mine],
            "eval_share": [round(r["window"].get("eval_share", float("nan")), 3) for r in mine],
            "train_loss_at_common_step": [e["train_loss"] for e in at_common],
            "val_loss_at_common_step": [e["val_loss"] for e in at_common],
            "train_loss_last10_mean": [statistics.fmean(e["train_loss"] for e in ten) for ten in last_ten],
            "val_loss_last10_mean": [statistics.fmean(e["val_loss"] for e in ten) for ten in last_ten],
            "tokens_at_common_step": at_common[0]["tokens_seen"],
            "dynamo": mine[-1].get("dynamo"),
            "peak_memory_gb": mine[-1].get("peak_memory_gb"),
        }
        model = mine[0]["model"]
        if limits:
            flops_per_token = 6 * model["non_embedding_parameters"]
            entry["mfu_vs_measured_bf16"] = (
                entry["tokens_per_s"]["median"] * flops_per_token / (limits["bf16_matmul_tflops"] * 1e12)
            )
            entry["floor"] = limits_floor(limits, model, eval_freq, train_precision, eval_precision)
        summary["versions"][name] = entry
    summary["model"] = measured[0]["model"] if measured else None
    versions = summary["versions"]
    if "base" in versions and "head" in versions:
        b, h = versions["base"]["tokens_per_s"], versions["head"]["tokens_per_s"]
        summary["ratio"] = {
            "median": h["median"] / b["median"],
            "low": h["min"] / b["max"],
            "high": h["max"] / b["min"],
        }
    return summary


def render(summary: dict, limits: dict | None) -> str:
    """The short table printed last."""
    lines = [
        "| version | tokens/s median | min-max | CV | runs | warm-up s | train/val loss at common step | MFU | floor tokens/s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, v in summary["versions"].items():
        t = v["tokens_per_s"]
        losses = ", ".join(
            f"{a:.4f}/{b:.4f}"
            for a, b in zip(v["train_loss_at_common_step"], v["val_loss_at_common_step"], strict=True)
        )
        mfu = f"{v['mfu_vs_measured_bf16']:.1%}" if "mfu_vs_measured_bf16" in v else "-"
        floor = f"{v['floor']['tokens_per_s']:,.0f}" if "floor" in v else "-"
        lines.append(
            f"| {name} | {t['median']:,.0f} | {t['min']:,.0f}-{t['max']:,.0f} | {t['cv']:.1%} | {t['n']} | {v['warmup_s']} | {losses} | {mfu} | {floor} |"
        )
    if "ratio" in summary:
        r = summary["ratio"]
        lines.append(
            f"\nhead/base: {r['median']:.2f}x (min/max bounds {r['low']:.2f}x-{r['high']:.2f}x); common step {summary['common_step']}"
        )
    if limits:
        lines.append(
            f"card: {limits['device']}, bf16 8192^3 {limits['bf16_matmul_tflops']:.0f} TFLOP/s, copy {limits['copy_gb_s']:.0f} GB/s"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", default=".gpu", help="folder holding base/ and head/")
    parser.add_argument("--out", default="out")
    parser.add_argument("--workdir", default="/tmp/textbook_gpt")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each version, interleaved base/head")
    parser.add_argument("--text-bytes", type=int, default=320_000)
    parser.add_argument("--warmup-epochs", type=int, default=1)
    parser.add_argument(
        "--budget-s", type=float, default=550, help="wall time for the card's limits and all runs together"
    )
    parser.add_argument(
        "--window-s", type=float, default=40, help="seconds measured after the warm-up epochs"
    )
    parser.add_argument("--max-run-s", type=float, default=150, help="wall time one run may take at most")
    parser.add_argument("--min-run-s", type=float, default=40, help="don't start a run with less budget left")
    parser.add_argument("--min-window-s", type=float, default=10, help="shorter windows are left out")
    parser.add_argument("--resummarise", type=Path, help="print the table again from a results.json")
    parser.add_argument("--tiny", action="store_true", help="tiny model for a CPU check of the harness")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--stop-at", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--limits", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--tokens-per-step", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.resummarise:
        saved = json.loads(args.resummarise.read_text())
        print(render(summarise(saved["runs"], saved["limits"], args.min_window_s), saved["limits"]), end="")
    elif args.child:
        run_child(
            args.child,
            Path(args.workdir),
            args.result,
            args.stop_at,
            args.window_s,
            args.warmup_epochs,
            args.tiny,
        )
    elif args.limits:
        config = program_settings(Path(args.versions) / "base" / "gpt_train.py")["GPT_CONFIG_124M"]
        run_limits(args.limits, config, args.tokens_per_step)
    else:
        run_driver(args)


if __name__ == "__main__":
    main()
