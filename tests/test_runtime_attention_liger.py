"""The vendored run-time checks behind the fa2 and liger_guard transforms: attention picker and Liger guard.

CPU tests stand in a GPU by patching ``torch.cuda`` and put fake packages on ``sys.path`` (a flash-attn
wheel that raises on import, one that imports) or in ``sys.modules`` (Liger's model-type table), so each test
isolates the one condition it checks. The GPU tests load real models with what the helpers pick.
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
import transformers.utils
from peft import LoraConfig, get_peft_model, inject_adapter_in_model
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

from optimizations.runtime.attention import pick_attention_implementation
from optimizations.runtime.liger import liger_kernel_usable

WHEELS = Path("/work/shared/wheels")
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def tiny_config(**overrides) -> Qwen2Config:
    settings = dict(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        architectures=["Qwen2ForCausalLM"],
    )
    return Qwen2Config(**{**settings, **overrides})


@pytest.fixture
def fake_gpu(monkeypatch):
    """A CUDA device of the given compute capability that transformers' FlashAttention checks accept."""

    def install(capability=(8, 0)):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: capability)
        monkeypatch.setattr(transformers.utils, "is_flash_attn_2_available", lambda *a, **k: True)
        monkeypatch.setattr(transformers.utils, "is_flash_attn_3_available", lambda *a, **k: True)

    return install


@pytest.fixture
def fake_packages(tmp_path, monkeypatch):
    """Write packages ``{name: __init__ source}`` to a directory on ``sys.path``, none of them imported yet.

    Whatever the test imported from them is dropped afterwards, so no later test sees a fake package.
    """
    originals: dict[str, types.ModuleType | None] = {}

    def install(packages: dict[str, str]):
        for name, source in packages.items():
            (tmp_path / name).mkdir()
            (tmp_path / name / "__init__.py").write_text(source)
            originals.setdefault(name, sys.modules.pop(name, None))
        monkeypatch.syspath_prepend(str(tmp_path))

    yield install
    for name, module in originals.items():
        if module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = module


BROKEN_WHEEL = 'raise OSError("flash_attn_2_cuda.so: undefined symbol: _ZN3c104cuda9SetDevice")\n'


# -- attention picker -----------------------------------------------------------------------------------
@pytest.mark.parametrize("fallback", ["sdpa", "eager", None])
def test_picker_without_cuda_keeps_the_calls_own_choice(monkeypatch, fallback):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    choice = pick_attention_implementation(Qwen2ForCausalLM, dtype=torch.bfloat16, fallback=fallback)
    assert choice == fallback


def test_picker_falls_back_when_flash_attn_raises_on_import(fake_gpu, fake_packages, caplog):
    fake_gpu((8, 0))
    fake_packages({"flash_attn": BROKEN_WHEEL})
    with caplog.at_level(logging.INFO):
        assert pick_attention_implementation(Qwen2ForCausalLM, dtype=torch.bfloat16) == "sdpa"
    assert "undefined symbol" in caplog.text


def test_picker_picks_flash_attention_2_when_everything_holds(fake_gpu, fake_packages):
    fake_gpu((8, 0))
    fake_packages({"flash_attn": "", "flash_attn_interface": ""})
    assert pick_attention_implementation(Qwen2ForCausalLM, dtype=torch.bfloat16) == "flash_attention_2"
    assert pick_attention_implementation(Qwen2ForCausalLM, dtype="float16") == "flash_attention_2"


def test_picker_prefers_flash_attention_3_on_hopper(fake_gpu, fake_packages):
    fake_gpu((9, 0))
    fake_packages({"flash_attn": "", "flash_attn_interface": ""})
    assert pick_attention_implementation(Qwen2ForCausalLM, dtype=torch.bfloat16) == "flash_attention_3"


def test_picker_uses_flash_attention_2_on_hopper_when_fa3_is_broken(fake_gpu, fake_packages):
    fake_gpu((9, 0))
    fake_packages({"flash_attn": "", "flash_attn_interface": BROKEN_WHEEL})
    assert pick_attention_implementation(Qwen2ForCausalLM, dtype=torch.bfloat16) == "flash_attention_2"


def test_picker_needs_ampere(fake_gpu, fake_packages):
    fake_gpu((7, 5))
    fake_packages({"flash_attn": ""})
    assert pick_attention_implementation(Qwen2ForCausalLM, dtype=torch.bfloat16, fallback="eager") == "eager"


def test_picker_needs_half_precision(fake_gpu, fake_packages):
    fake_gpu((8, 0))
    fake_packages({"flash_attn": ""})
    assert pick_attention_implementation(Qwen2ForCausalLM, dtype=torch.float32) == "sdpa"
    # No dtype and a config without one: from_config builds float32 weights.
    assert pick_attention_implementation(AutoModelForCausalLM, tiny_config(), fallback=None) is None


def test_picker_checks_the_model_class_flag(fake_gpu, fake_packages):
    fake_gpu((8, 0))
    fake_packages({"flash_attn": ""})

    class NoFlash(Qwen2ForCausalLM):
        _supports_flash_attn = False

    assert pick_attention_implementation(NoFlash, dtype=torch.bfloat16) == "sdpa"


def test_picker_resolves_auto_classes_and_dtype_through_the_config(fake_gpu, fake_packages, tmp_path):
    fake_gpu((8, 0))
    fake_packages({"flash_attn": ""})
    config = tiny_config(dtype="bfloat16")
    assert pick_attention_implementation(AutoModelForCausalLM, config) == "flash_attention_2"
    checkpoint = tmp_path / "checkpoint"
    config.save_pretrained(checkpoint)
    assert pick_attention_implementation(AutoModelForCausalLM, str(checkpoint), fallback=None) == (
        "flash_attention_2"
    )
    # TRL's model_init_kwargs path: no class, the architecture comes from the checkpoint's config.
    assert pick_attention_implementation(source=str(checkpoint), dtype="bfloat16") == "flash_attention_2"
    # An Auto class with nothing to resolve it: the support cannot be checked, so no FlashAttention.
    assert pick_attention_implementation(AutoModelForCausalLM, dtype=torch.bfloat16) == "sdpa"
    assert pick_attention_implementation(
        AutoModelForCausalLM, str(tmp_path / "missing"), dtype="bfloat16"
    ) == ("sdpa")


@pytest.mark.gpu
@gpu
def test_picked_attention_loads_and_runs_on_this_gpu():
    config = tiny_config()
    choice = pick_attention_implementation(AutoModelForCausalLM, config, dtype=torch.bfloat16)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=choice, dtype=torch.bfloat16).cuda()
    ids = torch.randint(0, config.vocab_size, (2, 16), device="cuda")
    assert torch.isfinite(model(input_ids=ids).logits.float()).all()
    assert model.config._attn_implementation == choice


# -- Liger guard -----------------------------------------------------------------------------------------
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
