"""The example target repository trains at the tiny size, and its PLAN.md points at the right lines.

The example's modules (``data``, ``cli``, ``trainer`` ...) are run in subprocesses from the example's own
directory, never imported here, so their generic names cannot shadow anything in the test session.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "trainer_repo"
STEPS = 3
LOSS_LINE = re.compile(r"^step=(\d+) loss=(\S+)$", re.MULTILINE)


def workload_commands() -> dict[str, list[str]]:
    """The example's own training workloads from ``[tool.bot]``, at the tiny size, plus the standalone ``sft.py``."""
    settings = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["tool"]["bot"]
    commands = {
        name: shlex.split(workload["command"].format(size=settings["size"], steps=STEPS, seed=0))
        for name, workload in settings["workloads"].items()
        if name in {"sft", "dpo", "loop"}
    }
    commands["loop"] += ["--log-every", "1"]
    commands["sft_standalone"] = shlex.split(f"python sft.py --size tiny --max-steps {STEPS} --seed 0")
    return commands


def run_example(command: list[str], cache: Path, output_dir: Path) -> dict:
    """Run one command in the example directory with its model cache under ``cache``."""
    env = {
        **os.environ,
        "PERFBOT_EXAMPLE_CACHE": str(cache),
        "OMP_NUM_THREADS": "1",  # two runs at a time, one core each
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONDONTWRITEBYTECODE": "1",  # keep the example tree clean
    }
    argv = [
        sys.executable if command[0] == "python" else command[0],
        *command[1:],
        "--output-dir",
        str(output_dir),
    ]
    result = subprocess.run(argv, cwd=EXAMPLE, env=env, capture_output=True, text=True, timeout=300)
    return {"result": result, "output_dir": output_dir}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Every training command, two at a time, against one fresh model cache that the first ones build."""
    root = tmp_path_factory.mktemp("example")
    commands = workload_commands()
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            name: pool.submit(run_example, command, root / "cache", root / "outputs" / name)
            for name, command in commands.items()
        }
        return {name: future.result() for name, future in futures.items()}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sft", "dpo", "sft_standalone", "loop"])
def test_entry_point_trains_tiny_model(runs: dict[str, dict], name: str) -> None:
    run = runs[name]
    result = run["result"]
    assert result.returncode == 0, result.stderr[-3000:]
    losses = {int(step): float(loss) for step, loss in LOSS_LINE.findall(result.stdout)}
    assert sorted(losses) == list(range(1, STEPS + 1)), result.stdout[-2000:]
    assert all(math.isfinite(loss) and loss > 0 for loss in losses.values()), losses
    saved = {path.name for path in run["output_dir"].iterdir()}
    assert ("config.json" if name == "loop" else "adapter_config.json") in saved, saved


@pytest.mark.slow
def test_cache_build_is_deterministic_and_data_is_long_tailed(tmp_path: Path) -> None:
    probe = """
import hashlib, json, os, sys
from data import dpo_dataset, sft_dataset
from model_loading import ensure_model

import torch

digests, draws = [], []
for cache in sys.argv[1:]:
    os.environ["PERFBOT_EXAMPLE_CACHE"] = cache
    torch.manual_seed(7)
    digests.append(hashlib.sha256((ensure_model("tiny") / "model.safetensors").read_bytes()).hexdigest())
    draws.append(torch.rand(4).tolist())
torch.manual_seed(7)
draws.append(torch.rand(4).tolist())
sft = sft_dataset("gpu")
sft_lengths = [len(p.split()) + len(c.split()) + 1 for p, c in zip(sft["prompt"], sft["completion"])]
dpo = dpo_dataset("gpu")
print(json.dumps({"digests": digests, "draws": draws, "sft_lengths": sft_lengths, "dpo_rows": len(dpo),
                  "same_data_twice": sft_dataset("gpu")[0] == sft[0]}))
"""
    caches = [str(tmp_path / "a"), str(tmp_path / "b")]
    result = subprocess.run(
        [sys.executable, "-c", probe, *caches], cwd=EXAMPLE, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["digests"][0] == report["digests"][1]
    first_build, second_build, untouched = report["draws"]
    assert first_build == second_build == untouched, "building the cache must not move the caller's RNG"
    assert report["same_data_twice"], "the generated data must be the same on every call"
    lengths = sorted(report["sft_lengths"])
    mean = sum(lengths) / len(lengths)
    median = lengths[len(lengths) // 2]
    assert len(lengths) == 800 and 240 <= mean <= 275, mean
    assert median < 0.85 * mean, "lengths must be right-skewed (long tail)"
    assert lengths[-1] >= 1000 and lengths[0] >= 16
    assert report["dpo_rows"] == 400


def plan_hints() -> dict[str, list[tuple[str, int, int]]]:
    """``{item key: [(file, first line, last line), ...]}`` from the File:Line column of PLAN.md's tables."""
    hints = {}
    for line in (EXAMPLE / "PLAN.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and re.fullmatch(r"[A-Z]", cells[0]):
            hints[cells[0]] = [
                (path, int(first), int(last or first))
                for path, first, last in re.findall(r"([\w./]+\.\w+):(\d+)(?:-(\d+))?", cells[1])
            ]
    return hints


# What each plan item's File:Line hint must point at: a call (its whole extent for a range) or a text.
PLAN_TARGETS = {
    "A": ["attn_implementation="],
    "B": ["packing=False"],
    "C": ["SFTConfig("],
    "D": ["SFTConfig(", "DPOConfig("],
    "E": ["DPOConfig("],
    "F": ['"config.json").exists()'],
    "G": ["SFTConfig("],
    "H": ["beta: 0.1"],
    "I": ["epochs: 1"],
}


def test_plan_hints_point_at_what_they_claim() -> None:
    hints = plan_hints()
    assert sorted(hints) == sorted(PLAN_TARGETS)
    for key, expected in PLAN_TARGETS.items():
        assert len(hints[key]) == len(expected), (key, hints[key])
        for (path, first, last), text in zip(hints[key], expected, strict=True):
            source = (EXAMPLE / path).read_text()
            assert text in source.splitlines()[first - 1], (key, path, first, text)
            if last != first:
                calls = {
                    (node.lineno, node.end_lineno)
                    for node in ast.walk(ast.parse(source))
                    if isinstance(node, ast.Call)
                }
                assert (first, last) in calls, f"{key}: {path}:{first}-{last} is not one whole call"
