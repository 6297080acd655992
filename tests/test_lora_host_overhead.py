"""The run-time halves of the LoRA host-overhead transforms: ``upcast_adapters`` and ``keep_adapters_in_bf16``
(bf16_adapters, in optimizations/runtime/precision.py) and ``compile_repeated_layers`` (regional_compile,
runtime/compile.py).

Adapters: the dtype PEFT gives them on bf16, fp16, fp32 and quantized bases, and the casts that leaves in a step;
the fp32 adapters a TRL trainer makes on a bf16 model cast to bf16 and trained so (other bases left alone).
Regional compilation, on CPU: which blocks it finds on a LoRA-wrapped transformer and on models without
repeated layers, that it leaves every model as it was without a GPU, with the switch off, or given a
checkpoint name, and that a TRL trainer which loads its model from a checkpoint trains the very layers its
``model`` attribute holds once built (where the transform compiles them for that shape). On a GPU: the
compiled LoRA model's losses and gradients against eager ones over batches of changing lengths, and that the
lengths after the second compile nothing more.
"""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model
from torch._dynamo.utils import counters
from transformers import Qwen2Config, Qwen2ForCausalLM
from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

from optimizations.runtime.compile import SWITCH, compile_repeated_layers, repeated_layers
from optimizations.runtime.precision import keep_adapters_in_bf16, upcast_adapters

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


WORDS = [f"w{i}" for i in range(100)]


def sft_trainer(tmp_path, model, **kwargs):
    """A TRL SFTTrainer on CPU over a word-level tokenizer (saved beside a checkpoint ``model`` names)."""
    trl = pytest.importorskip("trl")
    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2} | {w: i + 3 for i, w in enumerate(WORDS)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
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


def adapter_dtypes(model: torch.nn.Module) -> set[torch.dtype]:
    return {p.dtype for name, p in model.named_parameters() if ".lora_A." in name or ".lora_B." in name}


def test_adapters_a_trl_trainer_made_on_a_bf16_model_are_cast_and_trained_in_bf16(tmp_path):
    trainer = sft_trainer(tmp_path, qwen2().to(torch.bfloat16), peft_config=LoraConfig(**LORA))
    assert adapter_dtypes(trainer.model) == {torch.float32}  # PEFT's upcast, inside TRL
    assert keep_adapters_in_bf16(trainer.model) is trainer.model
    assert adapter_dtypes(trainer.model) == {torch.bfloat16}
    assert {p.dtype for p in trainer.model.parameters()} == {torch.bfloat16}
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses and all(torch.isfinite(torch.tensor(losses)))
    # no fp32 copy of the adapters anywhere: AdamW keeps its moments in their bf16 too
    states = [trainer.optimizer.state[p] for p in trainer.model.parameters() if p.requires_grad]
    assert {state["exp_avg"].dtype for state in states} == {torch.bfloat16}


def test_keep_adapters_in_bf16_leaves_other_models_as_they_were():
    for dtype in (torch.float16, torch.float32):
        model = get_peft_model(qwen2().to(dtype), LoraConfig(**LORA))
        before = {name: p.dtype for name, p in model.named_parameters()}
        keep_adapters_in_bf16(model)
        assert {name: p.dtype for name, p in model.named_parameters()} == before
    quantized = get_peft_model(qwen2().to(torch.bfloat16), LoraConfig(**LORA))
    quantized.base_model.model.model.norm.register_parameter(  # a stand-in for a quantized weight
        "packed", torch.nn.Parameter(torch.zeros(4, dtype=torch.uint8), requires_grad=False)
    )
    keep_adapters_in_bf16(quantized)
    assert adapter_dtypes(quantized) == {torch.float32}
    dora = get_peft_model(qwen2().to(torch.bfloat16), LoraConfig(**LORA, use_dora=True))
    keep_adapters_in_bf16(dora)
    assert adapter_dtypes(dora) == {torch.bfloat16}
    magnitudes = {p.dtype for name, p in dora.named_parameters() if "lora_magnitude_vector" in name}
    assert magnitudes == {torch.float32}
    assert keep_adapters_in_bf16("Qwen/Qwen2-0.5B") == "Qwen/Qwen2-0.5B"


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
