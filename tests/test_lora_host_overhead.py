"""The run-time halves of the LoRA host-overhead transforms: ``compute_adapters_in_bf16`` (bf16_adapters, in
optimizations/runtime/precision.py) and ``compile_repeated_layers`` (regional_compile,
runtime/compile.py).

Adapters: on a bf16 base they compute in bf16 from fp32 weights (fp16, fp32, quantized bases and DoRA left alone),
with fewer elements cast per step; a TRL trainer's adapters so trained with fp32 AdamW state.
Regional compilation, on CPU: which blocks it finds on a LoRA-wrapped transformer and on models without
repeated layers, that it leaves every model as it was without a GPU, with the switch off, or given a
checkpoint name, and that a TRL trainer which loads its model from a checkpoint trains the very layers its
``model`` attribute holds once built (where the transform compiles them for that shape). On a GPU: the
compiled LoRA model's losses and gradients against eager ones over batches of changing lengths, and that the
lengths after the second compile nothing more.
"""

from __future__ import annotations

import math

import pytest
import torch
from peft import LoraConfig, get_peft_model
from torch._dynamo.utils import counters
from transformers import Qwen2Config, Qwen2ForCausalLM
from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

from optimizations.runtime.compile import SWITCH, compile_repeated_layers, repeated_layers
from optimizations.runtime.precision import Bf16ComputeLinear, compute_adapters_in_bf16

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


def adapter_dtypes(model: torch.nn.Module) -> set[torch.dtype]:
    return {p.dtype for name, p in model.named_parameters() if ".lora_A." in name or ".lora_B." in name}


def bf16_compute(model: torch.nn.Module) -> set[bool]:
    """For each LoRA A/B projection of ``model``: whether it computes in its input's dtype."""
    return {
        isinstance(m, Bf16ComputeLinear)
        for n, m in model.named_modules()
        if n.rsplit(".", 2)[-2:-1] in (["lora_A"], ["lora_B"])
    }


def test_adapters_compute_in_bf16_from_fp32_weights_only_on_a_bf16_model():
    kept = compute_adapters_in_bf16(get_peft_model(qwen2(layers=1).to(torch.bfloat16), LoraConfig(**LORA)))
    assert adapter_dtypes(kept) == {torch.float32} and bf16_compute(kept) == {True}
    outputs = []
    for name, module in kept.named_modules():
        if name.endswith("lora_B.default"):
            module.register_forward_hook(lambda module, args, output: outputs.append(output.dtype))
    ids = torch.randint(0, 128, (2, 8))
    assert kept(input_ids=ids).logits.dtype == torch.bfloat16
    assert outputs and set(outputs) == {torch.bfloat16}  # the adapter's matmuls ran in bf16
    made_bf16 = get_peft_model(
        qwen2(layers=1).to(torch.bfloat16), LoraConfig(**LORA), autocast_adapter_dtype=False
    )
    assert adapter_dtypes(compute_adapters_in_bf16(made_bf16)) == {torch.float32}  # fp32 masters again
    for dtype in (torch.float16, torch.float32):
        other = compute_adapters_in_bf16(get_peft_model(qwen2(layers=1).to(dtype), LoraConfig(**LORA)))
        assert adapter_dtypes(other) == {torch.float32} and bf16_compute(other) == {False}


def test_an_adapter_added_later_computes_in_bf16_too():
    # TRL's DPO trainer adds a reference adapter to the PEFT model it is given; without autocast, a plain fp32
    # projection of it could not multiply the layer's bf16 input.
    model = compute_adapters_in_bf16(get_peft_model(qwen2(layers=1).to(torch.bfloat16), LoraConfig(**LORA)))
    model.add_adapter("ref", LoraConfig(**LORA))
    model.set_adapter("ref")
    assert adapter_dtypes(model) == {torch.float32} and bf16_compute(model) == {True}
    assert model(input_ids=torch.randint(0, 128, (2, 8))).logits.dtype == torch.bfloat16
    model.add_adapter("dora", LoraConfig(**LORA, use_dora=True))  # a variant: PEFT's own input cast again
    model.set_adapter("dora")
    assert model(input_ids=torch.randint(0, 128, (2, 8))).logits.dtype == torch.bfloat16


def test_a_quantized_base_and_dora_keep_peft_s_layers():
    quantized = get_peft_model(qwen2(layers=1).to(torch.bfloat16), LoraConfig(**LORA))
    quantized.base_model.model.model.norm.register_parameter(  # a packed 4-bit weight, as bitsandbytes stores it
        "packed", torch.nn.Parameter(torch.zeros(4, dtype=torch.uint8), requires_grad=False)
    )
    assert bf16_compute(compute_adapters_in_bf16(quantized)) == {False}
    flagged = get_peft_model(qwen2(layers=1).to(torch.bfloat16), LoraConfig(**LORA))
    flagged.is_quantized = True  # transformers' flag on a model loaded with a quantization config
    assert bf16_compute(compute_adapters_in_bf16(flagged)) == {False}
    dora = get_peft_model(qwen2(layers=1).to(torch.bfloat16), LoraConfig(**LORA, use_dora=True))
    assert bf16_compute(compute_adapters_in_bf16(dora)) == {False}
    assert compute_adapters_in_bf16("Qwen/Qwen2-0.5B") == "Qwen/Qwen2-0.5B"


def elements_cast_per_step(model: torch.nn.Module) -> int:
    """Elements converted between dtypes (``aten::_to_copy``) in one forward and backward of ``model``."""
    ids = torch.randint(0, 128, (2, 16))
    with torch.profiler.profile(record_shapes=True) as profile:
        model(input_ids=ids, labels=ids).loss.backward()
    return sum(
        math.prod(event.input_shapes[0]) for event in profile.events() if event.name == "aten::_to_copy"
    )


def test_bf16_adapters_cast_weights_instead_of_activations():
    kept = compute_adapters_in_bf16(get_peft_model(qwen2(layers=2).to(torch.bfloat16), LoraConfig(**LORA)))
    upcast = get_peft_model(qwen2(layers=2).to(torch.bfloat16), LoraConfig(**LORA))
    assert elements_cast_per_step(kept) < elements_cast_per_step(upcast)
    assert all(
        p.grad is not None and p.grad.dtype == torch.float32
        for n, p in kept.named_parameters()
        if "lora_B" in n
    )


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


def test_a_quantized_model_is_left_uncompiled(monkeypatch):
    """Compiling bitsandbytes' layers is not measured: a model with integer weights, or one transformers flags as
    quantized, keeps its layers eager where an unquantized one has them compiled."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # compile() is lazy: nothing runs on a GPU
    packed = lora_model()
    packed.base_model.model.model.norm.register_parameter(  # a packed 4-bit weight, as bitsandbytes stores it
        "packed", torch.nn.Parameter(torch.zeros(4, dtype=torch.uint8), requires_grad=False)
    )
    flagged = lora_model()
    flagged.is_quantized = True
    plain = lora_model()
    for model in (packed, flagged, plain):
        assert compile_repeated_layers(model) is model
    assert not any(compiled(b) for b in repeated_layers(packed) + repeated_layers(flagged))
    assert all(compiled(b) for b in repeated_layers(plain))


WORDS = [f"w{i}" for i in range(100)]


def sft_trainer(tmp_path, model, **kwargs):
    """A TRL SFTTrainer on CPU over a word-level tokenizer (saved beside a checkpoint ``model`` names)."""
    trl = pytest.importorskip("trl")
    from datasets import Dataset
    from word_tokenizer import word_tokenizer

    tokenizer = word_tokenizer(WORDS)
    if isinstance(model, str):
        tokenizer.save_pretrained(model)
    args = trl.SFTConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        per_device_train_batch_size=2,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
    )
    dataset = Dataset.from_dict({"text": [" ".join(WORDS[i : i + 6]) for i in range(8)]})
    processing = None if isinstance(model, str) else tokenizer
    return trl.SFTTrainer(
        model=model, args=args, train_dataset=dataset, processing_class=processing, **kwargs
    )


def test_a_trl_trainer_that_loads_its_model_trains_the_layers_its_model_attribute_holds(tmp_path):
    """What ``compile_repeated_layers(trainer.model)`` after a TRL trainer given a checkpoint path relies on: the
    trainer's ``model`` is already the loaded, PEFT-wrapped model, and ``train()`` runs those very layers."""
    checkpoint = tmp_path / "checkpoint"
    qwen2(layers=2).save_pretrained(checkpoint)
    trainer = sft_trainer(tmp_path, str(checkpoint), peft_config=LoraConfig(**LORA))

    layers = repeated_layers(trainer.model)
    assert [type(block) for block in layers] == [Qwen2DecoderLayer, Qwen2DecoderLayer]
    assert any("lora_A" in name for name, _ in layers[0].named_parameters())
    calls = []
    for block in layers:
        block.register_forward_hook(lambda module, args, output: calls.append(module))
    trainer.train()
    assert calls.count(layers[0]) == calls.count(layers[1]) >= 2  # every step runs through these blocks


def test_adapters_a_trl_trainer_made_on_a_bf16_model_compute_in_bf16_with_fp32_adam_state(tmp_path):
    trainer = sft_trainer(tmp_path, qwen2().to(torch.bfloat16), peft_config=LoraConfig(**LORA))
    assert adapter_dtypes(trainer.model) == {torch.float32}  # PEFT's upcast, inside TRL
    assert compute_adapters_in_bf16(trainer.model) is trainer.model
    assert adapter_dtypes(trainer.model) == {torch.float32} and bf16_compute(trainer.model) == {True}
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses and all(torch.isfinite(torch.tensor(losses)))
    # the optimizer steps fp32 adapter weights: AdamW keeps its moments in fp32
    states = [trainer.optimizer.state[p] for p in trainer.model.parameters() if p.requires_grad]
    assert {state["exp_avg"].dtype for state in states} == {torch.float32}


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
