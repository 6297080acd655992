"""The vendored attention picker (optimizations/fa2/helper.py), the fa2 transform's run-time half.

Each branch is driven by a ``Capabilities`` built for the test (the GPU, what transformers registers, which
packages fail and why, the FlexAttention probe's answer); the parts that read the real machine are tested on
their own: a FlashAttention wheel that raises on import, transformers' registered names, the FlexAttention
probe on the CPU and the compilations it saves. The GPU test loads and trains a model with the real pick.
"""

from __future__ import annotations

import logging
import sys
import types

import pytest
import torch
from torch._dynamo.utils import counters
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

from optimizations.fa2 import helper as attention
from optimizations.fa2.helper import (
    OVERRIDE,
    Capabilities,
    flash_attention_error,
    machine_capabilities,
    pick_attention_implementation,
    probe_flex_attention,
    registered_implementations,
)

EVERYTHING = frozenset(attention.PREFERENCE)
OLD_TRANSFORMERS = frozenset({"flash_attention_2", "sdpa"})  # before 4.48: no FlexAttention, no FA3 name
BROKEN_WHEEL = 'raise OSError("flash_attn_2_cuda.so: undefined symbol: _ZN3c104cuda9SetDevice")\n'


def runs(dtype_name, config):
    return None


def machine(gpu=(9, 0), implementations=EVERYTHING, unavailable=(), probe=runs, rocm=False) -> Capabilities:
    """A GPU machine where all but the ``unavailable`` names run (by default, FlexAttention's probe too)."""
    reasons = {name: f"{name} is not installed" for name in unavailable}
    return Capabilities(
        gpu=gpu, rocm=rocm, implementations=implementations, unavailable=reasons, probe_flex=probe
    )


def tiny_config(**overrides) -> Qwen2Config:
    """Qwen2 with the GPU size's layout in small: query heads not a power of two, on two key/value heads."""
    settings = dict(
        vocab_size=128,
        hidden_size=96,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=6,
        num_key_value_heads=2,
        architectures=["Qwen2ForCausalLM"],
    )
    return Qwen2Config(**{**settings, **overrides})


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    """No override in the environment, and no decision logged yet."""
    monkeypatch.delenv(OVERRIDE, raising=False)
    monkeypatch.setattr(attention, "_logged", set())


@pytest.fixture
def fake_packages(tmp_path, monkeypatch):
    """Write packages ``{name: __init__ source}`` to a directory on ``sys.path``, none imported yet."""
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


def pick(capabilities, model_class=Qwen2ForCausalLM, source=None, dtype=torch.bfloat16, **kwargs):
    return pick_attention_implementation(
        model_class, source, dtype=dtype, capabilities=capabilities, **kwargs
    )


# -- the order of preference, GPU by GPU -------------------------------------------------------------------
def test_hopper_prefers_flash_attention_4_then_3_then_2():
    assert pick(machine((9, 0))) == "flash_attention_4"
    assert pick(machine((9, 0), unavailable={"flash_attention_4"})) == "flash_attention_3"
    assert (
        pick(machine((9, 0), unavailable={"flash_attention_4", "flash_attention_3"})) == "flash_attention_2"
    )


def test_ampere_runs_only_flash_attention_2():
    assert pick(machine((8, 0))) == "flash_attention_2"
    assert pick(machine((8, 6), unavailable={"flash_attention_2"})) == "flex_attention"


def test_blackwell_skips_flash_attention_3():
    assert pick(machine((10, 0), unavailable={"flash_attention_4"})) == "flash_attention_2"


def test_rocm_runs_flash_attention_2_only():
    assert pick(machine((9, 4), rocm=True)) == "flash_attention_2"


def test_without_flash_attention_flex_attention_then_sdpa(caplog):
    assert pick(machine((9, 0), unavailable=attention.FLASH_ATTENTION)) == "flex_attention"
    failing = machine((9, 0), unavailable=attention.FLASH_ATTENTION, probe=lambda dtype, config: "no triton")
    with caplog.at_level(logging.INFO, logger=attention.__name__):
        assert pick(failing, fallback="eager") == "sdpa"
    assert "flex_attention: a forward and backward pass failed on this GPU (no triton)" in caplog.text


def test_flex_attention_is_probed_with_the_models_dtype_and_config():
    seen = []
    config = tiny_config()
    capabilities = machine(unavailable=attention.FLASH_ATTENTION, probe=lambda *args: seen.append(args))
    assert pick(capabilities, AutoModelForCausalLM, config, dtype=torch.float16) == "flex_attention"
    assert seen == [("float16", config)]


@pytest.mark.parametrize("fallback", ["sdpa", "eager", None])
def test_no_gpu_keeps_the_calls_own_choice(fallback):
    assert pick(Capabilities(gpu=None, implementations=EVERYTHING), fallback=fallback) == fallback


# -- what a machine, a dtype or a model class rules out ------------------------------------------------------
def test_a_broken_flash_attn_wheel_is_not_picked(fake_packages, caplog):
    fake_packages({"flash_attn": BROKEN_WHEEL})
    error = flash_attention_error("flash_attention_2")
    assert error.startswith("flash_attn does not import (OSError:") and "undefined symbol" in error
    capabilities = Capabilities(
        gpu=(8, 0), implementations=EVERYTHING, unavailable={"flash_attention_2": error}, probe_flex=runs
    )
    with caplog.at_level(logging.INFO, logger=attention.__name__):
        assert pick(capabilities) == "flex_attention"
    assert "undefined symbol" in caplog.text


def test_a_flash_attn_that_imports_without_its_distribution_is_refused_by_transformers(fake_packages):
    fake_packages({"flash_attn": ""})
    assert "is_flash_attn_2_available() says no" in flash_attention_error("flash_attention_2")


def test_old_transformers_offers_neither_flex_attention_nor_flash_attention_3(caplog):
    old = machine((9, 0), implementations=OLD_TRANSFORMERS, unavailable={"flash_attention_2"})
    with caplog.at_level(logging.INFO, logger=attention.__name__):
        assert pick(old) == "sdpa"
    assert "flash_attention_3: this transformers does not offer it" in caplog.text
    assert "flex_attention: this transformers does not offer it" in caplog.text
    assert pick(machine((9, 0), implementations=OLD_TRANSFORMERS)) == "flash_attention_2"


def test_the_installed_transformers_registers_every_candidate():
    assert set(attention.PREFERENCE) <= registered_implementations()


def test_float32_weights_get_sdpa():
    assert pick(machine(), dtype=torch.float32) == "sdpa"
    # No dtype, and a config without one: from_config builds float32 weights.
    assert pick(machine(), AutoModelForCausalLM, tiny_config(), dtype=None, fallback=None) == "sdpa"


def test_model_class_flags_are_checked():
    class NoFlashNoFlex(Qwen2ForCausalLM):
        _supports_flash_attn = False
        _supports_flex_attn = False

    class EagerOnly(NoFlashNoFlex):
        _supports_sdpa = False

    assert pick(machine(), NoFlashNoFlex) == "sdpa"
    assert pick(machine(), EagerOnly, fallback="eager") == "eager"


def test_auto_classes_and_dtype_resolve_through_the_config(tmp_path):
    config = tiny_config(dtype="bfloat16")
    assert pick(machine(), AutoModelForCausalLM, config, dtype=None) == "flash_attention_4"
    checkpoint = tmp_path / "checkpoint"
    config.save_pretrained(checkpoint)
    assert pick(machine(), AutoModelForCausalLM, str(checkpoint), dtype=None) == "flash_attention_4"
    # TRL's model_init_kwargs path: no class, the architecture comes from the checkpoint's config.
    assert pick(machine(), None, str(checkpoint), dtype="bfloat16") == "flash_attention_4"
    # An Auto class with nothing to resolve it: no support can be checked, so the call's own choice.
    assert pick(machine(), AutoModelForCausalLM, fallback="eager") == "eager"
    assert pick(machine(), AutoModelForCausalLM, str(tmp_path / "missing"), fallback=None) is None


def test_the_override_forces_an_implementation(monkeypatch, caplog):
    monkeypatch.setenv(OVERRIDE, "flex_attention")
    with caplog.at_level(logging.INFO, logger=attention.__name__):
        assert pick(Capabilities(gpu=None)) == "flex_attention"
        assert pick(machine()) == "flex_attention"
    assert caplog.text.count(f"{OVERRIDE} is set") == 1  # logged once


def test_the_decision_is_logged_once(caplog):
    with caplog.at_level(logging.INFO, logger=attention.__name__):
        for _ in range(3):
            pick(machine((8, 9), unavailable={"flash_attention_2"}), dtype="float16")
    assert caplog.text.count("attention: flex_attention for Qwen2ForCausalLM in float16") == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a CPU-only machine")
def test_this_cpu_machine_keeps_the_calls_own_choice():
    assert machine_capabilities().gpu is None
    assert pick_attention_implementation(Qwen2ForCausalLM, dtype=torch.bfloat16, fallback="eager") == "eager"


# -- the FlexAttention probe, run on the CPU (forward only: FlexAttention has no backward there) -----------
@pytest.mark.slow
def test_flex_probe_reports_failures_and_spares_the_models_recompilations():
    config = tiny_config()
    assert "does not support backward on CPU" in probe_flex_attention("float32", config, "cpu")
    torch._dynamo.reset()
    model = AutoModelForCausalLM.from_config(config, attn_implementation="flex_attention")
    with torch.no_grad():
        assert probe_flex_attention("float32", config, "cpu") is None
        graphs = []
        for lengths in ([100, 50, 30], [200, 17], [64, 64, 64, 9], [300], [33, 90, 11, 150]):
            ids = torch.randint(0, config.vocab_size, (1, sum(lengths)))
            positions = torch.cat([torch.arange(n) for n in lengths])[None]
            model(input_ids=ids, position_ids=positions)
            graphs.append(counters["stats"]["unique_graphs"])
    # The first packed length compiles the block mask and, reusing the probe's entry, FlexAttention with
    # dynamic lengths; the second recompiles only the block mask; no later length compiles anything.
    assert graphs[1] - graphs[0] <= 1
    assert graphs[-1] == graphs[1]


# -- on a GPU ---------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_pick_loads_and_trains_on_this_gpu():
    config = tiny_config()
    choice = pick_attention_implementation(AutoModelForCausalLM, config, dtype=torch.bfloat16)
    assert choice in attention.PREFERENCE
    model = AutoModelForCausalLM.from_config(config, attn_implementation=choice, dtype=torch.bfloat16).cuda()
    assert model.config._attn_implementation == choice
    for lengths in ([100, 28], [60, 70, 3]):
        ids = torch.randint(0, config.vocab_size, (1, sum(lengths)), device="cuda")
        positions = torch.cat([torch.arange(n) for n in lengths])[None].cuda()
        loss = model(input_ids=ids, position_ids=positions, labels=ids).loss
        loss.backward()
        assert torch.isfinite(loss)
