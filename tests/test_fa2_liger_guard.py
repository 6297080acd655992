"""The fa2 and liger_guard transforms on the example repository (examples/trainer_repo)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from git_repos import copy_example

from optimizations.fa2.edit import RUNTIME as ATTENTION
from optimizations.registry import get


@pytest.fixture
def repo(tmp_path):
    return copy_example(tmp_path / "repo")


def test_fa2_sites_on_the_example(repo):
    sites = get("fa2").find(repo)
    applied = sorted((s.path, s.message.split(":")[0]) for s in sites if s.applicable)
    assert applied == [
        ("model_loading.py", "AutoModelForCausalLM.from_pretrained"),
        ("sft.py", "AutoModelForCausalLM.from_pretrained"),
    ]
    refused = [s for s in sites if not s.applicable]
    assert [(s.path, s.message.split(":")[0]) for s in refused] == [
        ("model_loading.py", "AutoModelForCausalLM.from_config")
    ]
    assert "float32" in refused[0].reason


def test_fa2_applied_example_still_loads_its_model_on_cpu(repo, tmp_path):
    change = get("fa2").apply(repo)
    assert change is not None
    assert set(change.files) == {"model_loading.py", "sft.py", "_perfbot_attention.py"}
    assert (repo / "_perfbot_attention.py").read_text() == ATTENTION.source()
    assert (
        "from _perfbot_attention import pick_attention_implementation"
        in (repo / "model_loading.py").read_text()
    )
    assert get("fa2").apply(repo) is None  # idempotent, the vendored helper included

    load = "from model_loading import load_model; print(load_model('tiny').config._attn_implementation)"
    env = {**os.environ, "PERFBOT_EXAMPLE_CACHE": str(tmp_path / "cache"), "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, "-c", load], cwd=repo, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "sdpa"


def test_liger_guard_refuses_every_lora_path_of_the_example(repo):
    sites = get("liger_guard").find(repo)
    assert sites and not any(s.applicable for s in sites)
    assert sorted((s.path, s.message.split("(")[0]) for s in sites) == [
        ("sft.py", "trl.SFTConfig"),
        ("trainer.py", "DPOConfig"),
        ("trainer.py", "SFTConfig"),
    ]
    assert all("LoRA" in s.reason and "2x" in s.reason for s in sites)
    assert get("liger_guard").apply(repo) is None
