"""experiments.ddp_scaling.ddp_summary on two fake ddp_on_gpu.sh output folders (one per call, other shas)."""

from __future__ import annotations

import io
import json
import math
import statistics
import tarfile
from pathlib import Path

import pytest

from experiments.ddp_scaling.ddp_summary import load_runs, main, summarize

# call one: the 1-GPU `sft` workload; call two: the 2-GPU `sft_ddp` workload (shas differ between calls)
ONE = {"baseline": "a1" * 20, "tier-1 head": "b2" * 20, "ddp_static_graph": "c3" * 20}
TWO = {"baseline": "d4" * 20, "tier-1 head": "e5" * 20, "ddp_static_graph": "f6" * 20}
SFT_TOKENS = {"baseline": [100.0, 120.0, 110.0], "tier-1 head": [300.0, 330.0, 310.0]}
DDP_TOKENS = {
    "baseline": [150.0, 170.0],
    "tier-1 head": [500.0, 540.0, 520.0],
    "ddp_static_graph": [510.0, 530.0],
}
WAITS_MS = [2.0, 4.0, 3.0]  # the tier-1 head's 2-GPU runs
PEAKS = [12e9, 13e9, 12.5e9]
WARMUP_TOKENS = 1e6  # would move every median if the warm-up run were kept


def metrics(tokens: float, *, step_s: float = 0.3, world_size: int = 1, **extra: object) -> dict:
    return {
        "schema": "perfbot.run/v1",
        "status": "ok",
        "tokens_per_s": tokens,
        "step_time_s": {"mean": step_s, "median": step_s, "p95": step_s},
        "peak_memory_bytes": None,
        "mfu": 0.02,
        "world_size": world_size,
        **extra,
    }


def write_folder(
    folder: Path, roles: dict[str, str], runs: dict[str, dict | None], results: dict | None = None
):
    """roles.json, runs.tar.gz (metrics.json unless None, always a log.txt) and an optional results JSON."""
    folder.mkdir()
    (folder / "roles.json").write_text(json.dumps({sha: role for role, sha in roles.items()}))
    with tarfile.open(folder / "runs.tar.gz", "w:gz") as tar:
        for key, record in runs.items():
            files = {"log.txt": b"last lines\n"}
            if record is not None:
                files["metrics.json"] = json.dumps(record).encode()
            for name, data in files.items():
                info = tarfile.TarInfo(f"runs/{key}/{name}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    if results is not None:
        (folder / "two.json").write_text(json.dumps(results))


def key(sha: str, workload: str, repeat: int) -> str:
    return f"{sha[:12]}-{workload}-r{repeat}"


@pytest.fixture
def folders(tmp_path: Path) -> list[Path]:
    one_runs: dict[str, dict | None] = {key(ONE["baseline"], "sft", -1): metrics(WARMUP_TOKENS)}
    for role, values in SFT_TOKENS.items():
        for repeat, tokens in enumerate(values):
            one_runs[key(ONE[role], "sft", repeat)] = metrics(tokens)
    crashed = {**metrics(1.0), "status": "crashed", "error": "RuntimeError: boom"}
    one_runs[key(ONE["tier-1 head"], "sft", len(SFT_TOKENS["tier-1 head"]))] = crashed

    two_runs: dict[str, dict | None] = {}
    for role, values in DDP_TOKENS.items():
        for repeat, tokens in enumerate(values):
            extra = {"world_size": 2}
            if role == "tier-1 head":
                extra.update(allreduce_wait={"median_ms": WAITS_MS[repeat]}, peak_memory_bytes=PEAKS[repeat])
            two_runs[key(TWO[role], "sft_ddp", repeat)] = metrics(tokens, **extra)
    unfinished = key(TWO["ddp_static_graph"], "sft_ddp", len(DDP_TOKENS["ddp_static_graph"]))
    two_runs[unfinished] = None  # stopped at the time limit: a log, no metrics
    two_runs[key(TWO["ddp_static_graph"], "sft_ddp", -1)] = None  # a warm-up run that wrote no metrics
    # the runner saw this one exit non-zero although its metrics say ok: the results JSON's status wins
    overruled = key(TWO["baseline"], "sft_ddp", len(DDP_TOKENS["baseline"]))
    two_runs[overruled] = metrics(1.0, world_size=2)
    results = {
        "schema": "perfbot.results/v1",
        "runs": [{"commit": TWO["baseline"], "workload": "sft_ddp", "repeat": 2, "status": "crashed"}],
    }
    write_folder(tmp_path / "one", ONE, one_runs)
    write_folder(tmp_path / "two", TWO, two_runs, results)
    return [tmp_path / "one", tmp_path / "two"]


def test_groups_by_role_and_workload_across_calls(folders):
    summary = summarize([run for folder in folders for run in load_runs(folder)])
    groups = {(g["workload"], g["role"]): g for g in summary["groups"]}
    expected = {("sft", role) for role in SFT_TOKENS} | {("sft_ddp", role) for role in DDP_TOKENS}
    assert set(groups) == expected
    for workload, table in (("sft", SFT_TOKENS), ("sft_ddp", DDP_TOKENS)):
        for role, values in table.items():
            group = groups[(workload, role)]
            assert group["n"] == len(values)
            assert sorted(group["tokens_per_s"]) == sorted(values)  # warm-up and failed runs left out
            assert group["median_tokens_per_s"] == pytest.approx(statistics.median(values))
            assert (group["min_tokens_per_s"], group["max_tokens_per_s"]) == (min(values), max(values))
    tier1_ddp = groups[("sft_ddp", "tier-1 head")]
    assert tier1_ddp["median_allreduce_wait_ms"] == pytest.approx(statistics.median(WAITS_MS))
    assert tier1_ddp["max_peak_memory_gb"] == pytest.approx(max(PEAKS) / 1e9)
    assert tier1_ddp["world_sizes"] == [2]
    assert groups[("sft", "baseline")]["median_allreduce_wait_ms"] is None  # absent on one GPU
    assert groups[("sft", "baseline")]["max_peak_memory_gb"] is None


def test_warmup_dropped_and_failures_listed(folders):
    runs = [run for folder in folders for run in load_runs(folder)]
    summary = summarize(runs)
    assert summary["warmup_runs_dropped"] == 2
    assert [f["key"] for f in summary["warmup_failures"]] == [key(TWO["ddp_static_graph"], "sft_ddp", -1)]
    assert WARMUP_TOKENS not in groups_tokens(summary)
    failures = {(f["key"], f["role"], f["status"]) for f in summary["failures"]}
    assert failures == {
        (key(ONE["tier-1 head"], "sft", 3), "tier-1 head", "crashed"),
        (key(TWO["ddp_static_graph"], "sft_ddp", 2), "ddp_static_graph", "no metrics"),
        (key(TWO["baseline"], "sft_ddp", 2), "baseline", "crashed"),
    }
    assert any(f["error"] == "RuntimeError: boom" for f in summary["failures"])


def groups_tokens(summary: dict) -> list[float]:
    return [t for g in summary["groups"] for t in g["tokens_per_s"]]


def test_efficiency_and_welch_tests(folders):
    summary = summarize([run for folder in folders for run in load_runs(folder)])
    one = {role: statistics.median(values) for role, values in SFT_TOKENS.items()}
    two = {role: statistics.median(values) for role, values in DDP_TOKENS.items()}
    efficiency = summary["efficiency"]
    assert efficiency["baseline"]["efficiency"] == pytest.approx(two["baseline"] / (2 * one["baseline"]))
    assert efficiency["tier-1 head"]["efficiency"] == pytest.approx(
        two["tier-1 head"] / (2 * one["tier-1 head"])
    )
    # ddp_static_graph is a no-op on one GPU: its 1-GPU figure is the tier-1 head's
    assert efficiency["ddp_static_graph"]["one_gpu_tokens_per_s"] == pytest.approx(one["tier-1 head"])
    assert efficiency["ddp_static_graph"]["efficiency"] == pytest.approx(
        two["ddp_static_graph"] / (2 * one["tier-1 head"])
    )
    tests = {(c["workload"], c["candidate"], c["reference"]): c for c in summary["comparisons"]}
    assert set(tests) == {
        ("sft", "tier-1 head", "baseline"),
        ("sft_ddp", "tier-1 head", "baseline"),
        ("sft_ddp", "ddp_static_graph", "tier-1 head"),
    }
    for (workload, candidate, reference), test in tests.items():
        table = SFT_TOKENS if workload == "sft" else DDP_TOKENS
        assert 0.0 <= test["p_value"] <= 1.0
        geometric = statistics.geometric_mean(table[candidate]) / statistics.geometric_mean(table[reference])
        assert test["ratio"] == pytest.approx(geometric)
    assert tests[("sft", "tier-1 head", "baseline")]["verdict"] == "win"  # ~2.8x with little spread


def test_command_line_text_and_json(folders, capsys):
    assert main([str(f) for f in folders]) == 0
    text = capsys.readouterr().out
    assert "| commit | 1 GPU tokens/s" in text
    assert "(no-op on 1 GPU)" in text
    assert "Welch sft_ddp: ddp_static_graph vs tier-1 head" in text
    assert main([*map(str, folders), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"groups", "failures", "comparisons", "efficiency", "markdown"} <= set(data)
    assert not math.isnan(data["efficiency"]["tier-1 head"]["efficiency"])
