"""The run-time halves of the LoRA host-overhead transforms: ``upcast_adapters`` (bf16_adapters, in
optimizations/runtime/precision.py) and ``compile_repeated_layers`` (regional_compile, runtime/compile.py).

Adapters: the dtype PEFT gives them on bf16, fp16, fp32 and quantized bases, and the casts that leaves in a step.
Regional compilation, on CPU: which blocks it finds on a LoRA-wrapped transformer and on models without
repeated layers, and that it leaves every model as it was without a GPU, with the switch off, or given a
checkpoint name. On a GPU: the compiled LoRA model's losses and gradients against eager ones over batches of
changing lengths, and that the lengths after the second compile nothing more.
"""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model
from torch._dynamo.utils import counters
from transformers import Qwen2Config, Qwen2ForCausalLM
from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

from optimizations.runtime.compile import SWITCH, compile_repeated_layers, repeated_layers
from optimizations.runtime.precision import upcast_adapters

LORA = dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")


def qwen2(layers: int = 3, attn: str = "sdpa") -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        attn_implementation=attn,
    )
    return Qwen2ForCausalLM(config)


def lora_model(layers: int = 3, attn: str = "sdpa") -> torch.nn.Module:
    return get_peft_model(qwen2(layers, attn), LoraConfig(**LORA))


def compiled(block: torch.nn.Module) -> bool:
    return getattr(block, "_compiled_call_impl", None) is not None


@pytest.mark.parametrize(
    ("dtype", "adapters"),
    [(torch.bfloat16, torch.bfloat16), (torch.float16, torch.float32), (torch.float32, torch.float32)],
)
def test_adapters_stay_in_bf16_only_on_a_bf16_model(dtype, adapters):
    base = qwen2(layers=1).to(dtype)
    model = get_peft_model(base, LoraConfig(**LORA), autocast_adapter_dtype=upcast_adapters(base))
    lora = {p.dtype for n, p in model.named_parameters() if "lora_" in n}
    assert lora == {adapters}
    default = get_peft_model(qwen2(layers=1).to(dtype), LoraConfig(**LORA))
    if dtype != torch.bfloat16:  # elsewhere PEFT's default is kept
        assert {p.dtype for n, p in default.named_parameters() if "lora_" in n} == lora


def test_a_quantized_base_keeps_the_fp32_upcast():
    base = qwen2(layers=1).to(torch.bfloat16)
    assert upcast_adapters(base) is False
    base.model.layers[0].mlp.down_proj.weight = torch.nn.Parameter(
        torch.zeros(64, 96, dtype=torch.uint8), requires_grad=False
    )  # a packed 4-bit weight, as bitsandbytes stores it
    assert upcast_adapters(base) is True
    flagged = qwen2(layers=1).to(torch.bfloat16)
    flagged.is_quantized = True  # transformers' flag on a model loaded with a quantization config
    assert upcast_adapters(flagged) is True


def casts_per_step(model: torch.nn.Module) -> int:
    """dtype conversions (``aten::_to_copy``) in one forward and backward of ``model``."""
    ids = torch.randint(0, 128, (2, 16))
    with torch.profiler.profile() as profile:
        model(input_ids=ids, labels=ids).loss.backward()
    return sum(1 for event in profile.events() if event.name == "aten::_to_copy")


def test_bf16_adapters_take_the_casts_out_of_a_step():
    base = qwen2(layers=2).to(torch.bfloat16)
    kept = get_peft_model(base, LoraConfig(**LORA), autocast_adapter_dtype=upcast_adapters(base))
    upcast = get_peft_model(qwen2(layers=2).to(torch.bfloat16), LoraConfig(**LORA))
    assert casts_per_step(kept) < casts_per_step(upcast)
    assert all(p.grad is not None for n, p in kept.named_parameters() if "lora_B" in n)


def test_the_repeated_layers_of_a_lora_model_are_its_decoder_layers():
    model = lora_model(layers=3)
    blocks = repeated_layers(model)
    assert [type(b) for b in blocks] == [Qwen2DecoderLayer] * 3
    assert blocks == list(model.get_base_model().model.layers)


def test_a_model_without_a_list_of_like_blocks_has_none():
    mixed = torch.nn.Sequential(torch.nn.ModuleList([torch.nn.Linear(2, 2), torch.nn.ReLU()]))
    single = torch.nn.ModuleList([torch.nn.Linear(2, 2)])
    assert repeated_layers(mixed) == []
    assert repeated_layers(torch.nn.Sequential(single)) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only path")
def test_without_a_gpu_the_model_is_left_as_it_was():
    model = lora_model()
    assert compile_repeated_layers(model) is model
    assert not any(compiled(b) for b in repeated_layers(model))


def test_the_switch_and_checkpoint_names_pass_through(monkeypatch):
    monkeypatch.setenv(SWITCH, "off")
    model = lora_model()
    assert compile_repeated_layers(model) is model
    assert not any(compiled(b) for b in repeated_layers(model))
    monkeypatch.delenv(SWITCH)
    assert compile_repeated_layers("Qwen/Qwen2-0.5B") == "Qwen/Qwen2-0.5B"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_compiled_lora_layers_match_eager_and_stop_recompiling():
    eager = lora_model(attn="sdpa").cuda()
    regional = lora_model(attn="sdpa").cuda()
    compile_repeated_layers(regional)
    assert all(compiled(b) for b in repeated_layers(regional))
    torch._dynamo.reset()
    graphs = []
    for length in (96, 130, 70, 200, 150):
        ids = torch.randint(0, 128, (2, length), device="cuda")
        losses = []
        for model in (eager, regional):
            model.zero_grad()
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            losses.append(loss)
        torch.testing.assert_close(losses[1], losses[0], rtol=1e-4, atol=1e-4)
        grads = [
            next(p.grad for n, p in m.named_parameters() if "lora_B" in n and p.grad is not None)
            for m in (eager, regional)
        ]
        torch.testing.assert_close(grads[1], grads[0], rtol=1e-3, atol=1e-5)
        graphs.append(counters["stats"]["unique_graphs"])
    # the first length compiles, the second recompiles with a dynamic length; later lengths reuse that graph
    assert graphs[-1] == graphs[1]
