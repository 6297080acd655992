"""The vendored run-time check behind the liger_guard transform (the attention picker's are in
test_attention_picker.py).

CPU tests stand in a GPU by patching ``torch.cuda`` and put a fake Liger model-type table in ``sys.modules``,
so each test isolates the one condition it checks. The GPU test runs the real liger-kernel.
"""

from __future__ import annotations

import importlib.util
import logging
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from peft import LoraConfig, get_peft_model, inject_adapter_in_model
from transformers import Qwen2Config, Qwen2ForCausalLM

from optimizations.liger_guard.helper import liger_kernel_usable

WHEELS = Path("/work/shared/wheels")
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def tiny_config() -> Qwen2Config:
    return Qwen2Config(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        architectures=["Qwen2ForCausalLM"],
    )


@pytest.fixture
def fake_liger(monkeypatch):
    """A ``liger_kernel`` whose model-type table lists ``model_types``; ``None`` makes the import fail."""

    def install(model_types):
        for name in ("liger_kernel", "liger_kernel.transformers", "liger_kernel.transformers.monkey_patch"):
            monkeypatch.setitem(sys.modules, name, None if model_types is None else types.ModuleType(name))
        if model_types is not None:
            table = {model_type: lambda **kwargs: None for model_type in model_types}
            sys.modules["liger_kernel.transformers.monkey_patch"].MODEL_TYPE_TO_APPLY_LIGER_FN = table

    return install


def tiny_model() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    return Qwen2ForCausalLM(tiny_config())


def test_liger_on_for_a_supported_full_fine_tune(monkeypatch, fake_liger):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    fake_liger({"qwen2", "llama"})
    assert liger_kernel_usable(tiny_model()) is True


def test_liger_off_for_a_lora_model(monkeypatch, fake_liger, caplog):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    fake_liger({"qwen2"})
    lora = get_peft_model(tiny_model(), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    with caplog.at_level(logging.INFO):
        assert liger_kernel_usable(lora) is False
    assert "PEFT adapter" in caplog.text


def test_liger_off_when_lora_targets_lm_head(monkeypatch, fake_liger, caplog):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    fake_liger({"qwen2"})
    model = inject_adapter_in_model(LoraConfig(r=4, target_modules=["lm_head"]), tiny_model())
    with caplog.at_level(logging.INFO):
        assert liger_kernel_usable(model) is False
    assert "LoRA targets lm_head" in caplog.text


def test_liger_off_when_liger_kernel_does_not_import(monkeypatch, fake_liger, caplog):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    fake_liger(None)
    with caplog.at_level(logging.INFO):
        assert liger_kernel_usable(tiny_model()) is False
    assert "liger_kernel does not import" in caplog.text


def test_liger_off_for_an_unsupported_model_type(monkeypatch, fake_liger):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    fake_liger({"llama"})
    assert liger_kernel_usable(tiny_model()) is False


def test_liger_off_without_a_gpu(monkeypatch, fake_liger):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    if hasattr(torch, "xpu"):
        monkeypatch.setattr(torch.xpu, "is_available", lambda: False)
    fake_liger({"qwen2"})
    assert liger_kernel_usable(tiny_model()) is False


def test_liger_off_beside_dpo_precomputed_reference(monkeypatch, fake_liger):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    fake_liger({"qwen2"})
    assert liger_kernel_usable(tiny_model(), precompute_ref_log_probs=True) is False
    assert liger_kernel_usable(tiny_model(), precompute_ref_log_probs=False) is True


def test_liger_reads_the_model_type_of_a_checkpoint_path(monkeypatch, fake_liger, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    tiny_config().save_pretrained(tmp_path)
    fake_liger({"qwen2"})
    assert liger_kernel_usable(str(tmp_path)) is True
    fake_liger({"llama"})
    assert liger_kernel_usable(str(tmp_path)) is False


@pytest.mark.gpu
@gpu
def test_real_liger_kernel_on_gpu(tmp_path, monkeypatch):
    """The real liger-kernel (installed, or from the project's wheel) accepts a Qwen2 model, not its LoRA."""
    if importlib.util.find_spec("liger_kernel") is None:
        wheels = sorted(WHEELS.glob("liger_kernel-*.whl"))
        if not wheels:
            pytest.skip("liger-kernel is not installed and no wheel is in /work/shared/wheels")
        target = tmp_path / "site"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--target",
                str(target),
                str(wheels[-1]),
            ],
            check=True,
        )
        monkeypatch.syspath_prepend(str(target))
    model = tiny_model().cuda()
    assert liger_kernel_usable(model) is True
    lora = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj"]))
    assert liger_kernel_usable(lora) is False
