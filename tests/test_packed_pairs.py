"""DPO pairs packed into one token budget (`optimizations.packed_pairs`, runtime `PackedPairs` in
`_perfbot_compile`). On CPU: which configs and models get the packing, which calls run at the budget and which
run eagerly at their own length, how the budget grows, and that TRL's DPO loss and the LoRA gradients are those of
the padded batch (the update-fidelity check of this change: only rounding differs). On the GPU: the packed decoder
replayed as CUDA graphs trains the LoRA weights the padded eager decoder trains."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from tiny_models import tiny_qwen2

from optimizations.runtime.compile import (
    PackedPairs,
    TrainingGraphs,
    compile_repeated_layers,
    feeds_token_ids,
    pair_budget,
)

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")
peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def dpo_config(**fields):
    settings = {
        "per_device_train_batch_size": 2,
        "max_length": 16,
        "precompute_ref_log_probs": True,
        "use_cpu": True,
    }
    return trl.DPOConfig(output_dir="unused", report_to="none", **{**settings, **fields})


@pytest.mark.parametrize(
    ("config", "budget"),
    [
        (lambda: dpo_config(), 32),
        (lambda: dpo_config(per_device_train_batch_size=4, max_length=8), 32),
        (
            lambda: dpo_config(precompute_ref_log_probs=False),
            None,
        ),  # the reference pass each step would be eager
        (lambda: dpo_config(max_length=None), None),
        (
            lambda: trl.SFTConfig(
                output_dir="unused", per_device_train_batch_size=2, max_length=16, use_cpu=True
            ),
            None,
        ),
        (
            lambda: SimpleNamespace(
                per_device_train_batch_size=2, max_length=16, precompute_ref_log_probs=True
            ),
            None,
        ),
    ],
)
def test_only_a_dpo_config_that_precomputes_its_reference_gets_a_pair_budget(config, budget):
    assert pair_budget(config()) == budget


def test_a_model_that_feeds_its_decoder_embeddings_is_not_packed():
    assert feeds_token_ids(tiny_qwen2())
    lora = peft.get_peft_model(tiny_qwen2(), peft.LoraConfig(r=4, target_modules=["q_proj"]))
    assert feeds_token_ids(lora)
    prompt = peft.get_peft_model(
        tiny_qwen2(), peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4)
    )
    assert not feeds_token_ids(prompt)  # its virtual tokens reach the decoder as embeddings
    vision = SimpleNamespace(config=SimpleNamespace(get_text_config=lambda: "the language model's config"))
    assert not feeds_token_ids(vision)


class Decoder:
    """A decoder that records the rows it runs and returns each token's id and position as its hidden state."""

    def __init__(self):
        self.rows: list[tuple[int, ...]] = []

    def __call__(self, input_ids=None, position_ids=None, inputs_embeds=None, **kwargs):
        if input_ids is None:
            self.rows.append(tuple(inputs_embeds.shape[:2]))
            return transformers.modeling_outputs.BaseModelOutputWithPast(last_hidden_state=inputs_embeds)
        self.rows.append(tuple(input_ids.shape))
        positions = torch.zeros_like(input_ids) if position_ids is None else position_ids
        hidden = torch.stack([input_ids, positions], dim=-1).float()
        return transformers.modeling_outputs.BaseModelOutputWithPast(last_hidden_state=hidden)


def padded(lengths: list[int], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
    return (torch.arange(1, mask.numel() + 1).view(mask.shape) * mask), mask


def test_each_real_token_comes_back_in_its_place_with_its_position_and_padding_as_zeros():
    packed, eager = Decoder(), Decoder()
    pairs = PackedPairs(packed, eager, budget=16)
    ids, mask = padded([3, 5, 1, 4], width=6)
    hidden = pairs(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
    assert packed.rows == [(1, 16)] and eager.rows == []  # 13 real tokens in one row of the budget
    assert torch.equal(hidden[..., 0], ids.float())  # each token's own hidden state, zeros at the padding
    positions = torch.tensor([[0, 1, 2, 0, 0, 0], [0, 1, 2, 3, 4, 0], [0] * 6, [0, 1, 2, 3, 0, 0]])
    assert torch.equal(hidden[..., 1], positions.float())


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_a_real_decoder_packed_gives_each_real_token_its_padded_hidden_state(attention):
    """No token attends across sequences, whatever the caller says of the cache (transformers reads no boundaries
    where it builds one)."""
    decoder = tiny_qwen2(attention=attention).model
    ids, mask = padded([9, 16, 3, 4], width=16)
    ids = ids % 50
    expected = decoder(input_ids=ids, attention_mask=mask).last_hidden_state
    decoder.forward = PackedPairs(decoder.forward, decoder.forward, budget=40)
    for cache in ({}, {"use_cache": False}):
        hidden = decoder(input_ids=ids, attention_mask=mask, **cache).last_hidden_state
        real = mask.bool()
        torch.testing.assert_close(hidden[real], expected[real], rtol=1e-4, atol=1e-5)
        assert not hidden[~real].any()


def test_passes_the_budget_does_not_shape_run_eagerly_at_their_own_length():
    packed, eager = Decoder(), Decoder()
    pairs = PackedPairs(packed, eager, budget=16)
    ids, mask = padded([3, 5, 1, 4], width=6)
    with torch.no_grad():  # a reference pass: no graph to keep to one shape
        pairs(input_ids=ids, attention_mask=mask)
    embeds = torch.zeros(4, 6, 8)
    pairs(inputs_embeds=embeds, attention_mask=mask)  # embeddings given: not packed, passed on as they are
    pairs(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    assert packed.rows == [] and eager.rows == [(1, 13), (4, 6), (4, 6)]


def test_a_step_over_the_budget_runs_eagerly_until_more_than_one_in_16_are():
    packed, eager = Decoder(), Decoder()
    pairs = PackedPairs(packed, eager, budget=16)
    small, large = padded([3, 5, 4, 2], width=6), padded([6, 6, 5, 4], width=6)  # 14 and 21 real tokens
    for _ in range(30):
        pairs(input_ids=small[0], attention_mask=small[1])
    pairs(input_ids=large[0], attention_mask=large[1])
    assert eager.rows == [(1, 21)] and pairs.budget == 16  # one step in 31: stays eager
    pairs(input_ids=large[0], attention_mask=large[1])
    pairs(input_ids=large[0], attention_mask=large[1])
    assert pairs.budget == 32 and packed.rows[-1] == (1, 32)  # 3 in 33: the budget doubles
    assert eager.rows == [(1, 21), (1, 21)]


def preference_data():
    from datasets import Dataset
    from word_tokenizer import word_tokenizer

    words = [f"w{i}" for i in range(40)]
    rows = [(2, 3, 5), (4, 1, 2), (1, 6, 3), (3, 2, 2), (5, 4, 1), (2, 2, 6)]
    dataset = Dataset.from_dict(
        {
            "prompt": [" ".join(words[:p]) for p, _, _ in rows],
            "chosen": [" " + " ".join(words[10 : 10 + c]) for _, c, _ in rows],
            "rejected": [" " + " ".join(words[20 : 20 + r]) for _, _, r in rows],
        }
    )
    return word_tokenizer(words), dataset


def dpo_loss_and_grads(pack: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor], list[tuple[int, ...]]]:
    tokenizer, dataset = preference_data()
    torch.manual_seed(0)
    model = tiny_qwen2(len(tokenizer))
    model = peft.get_peft_model(
        model, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    )
    for name, parameter in model.named_parameters():
        if (
            "lora_B" in name
        ):  # non-zero B: the policy differs from the reference, and the A gradients are not zero
            torch.nn.init.normal_(parameter, std=0.2)
    args = dpo_config(per_device_train_batch_size=3, max_length=12, precompute_ref_log_probs=False)
    trainer = trl.DPOTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    rows: list[tuple[int, ...]] = []
    if pack:
        decoder = model.get_base_model().model
        eager = decoder.forward

        def recorded(**row):
            rows.append(tuple(row["input_ids"].shape))
            return eager(**row)

        decoder.forward = PackedPairs(recorded, recorded, budget=48)
    batch = next(iter(trainer.get_train_dataloader()))
    model.train()
    loss = trainer.compute_loss(model, dict(batch))
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}, rows


def test_packing_keeps_trls_dpo_loss_and_the_adapter_gradients():
    loss, grads, _ = dpo_loss_and_grads(pack=False)
    packed_loss, packed_grads, rows = dpo_loss_and_grads(pack=True)
    # the policy's pass at the budget, then the reference's (no gradients) at its own length
    assert len(rows) == 2 and rows[0] == (1, 48) and rows[1][1] < 48
    torch.testing.assert_close(packed_loss, loss, rtol=1e-5, atol=1e-6)
    assert grads.keys() == packed_grads.keys() and len(grads) == 8
    for name, grad in grads.items():
        assert grad.abs().sum() > 0
        torch.testing.assert_close(packed_grads[name], grad, rtol=1e-4, atol=1e-6)


@pytest.mark.gpu
@NEEDS_CUDA
@pytest.mark.parametrize("attention", ["sdpa", "flex_attention"])
def test_packed_pairs_replayed_as_graphs_train_like_the_padded_eager_decoder(fresh_graphs, attention):
    def lora_model():
        torch.manual_seed(0)
        model = tiny_qwen2(64, attention, hidden_size=64).to(device="cuda", dtype=torch.bfloat16)
        lora = peft.LoraConfig(
            r=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, task_type="CAUSAL_LM"
        )
        model = peft.get_peft_model(model, lora)
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(parameter, std=0.05)
        return model

    eager = lora_model()
    config = dpo_config(use_cpu=False, logging_nan_inf_filter=True, gradient_checkpointing=False)
    graphed = compile_repeated_layers(lora_model(), fixed_budget=config, cuda_graphs=True)
    pairs = graphed.get_base_model().model.forward
    assert isinstance(pairs, PackedPairs) and isinstance(pairs.packed, TrainingGraphs)
    assert config.logging_nan_inf_filter is False
    generator = torch.Generator().manual_seed(1)
    for lengths in (
        [9, 16, 3, 4],
        [16, 2, 5, 7],
        [12, 12, 1, 6],
        [16, 16, 16, 1],
    ):  # the last: over the budget
        ids = torch.randint(1, 64, (4, 16), generator=generator)
        mask = torch.tensor([[1] * n + [0] * (16 - n) for n in lengths])
        labels = ids.masked_fill(mask == 0, -100)
        grads, losses = [], []
        for model in (eager, graphed):
            model.zero_grad(set_to_none=True)
            loss = model(input_ids=ids.cuda(), attention_mask=mask.cuda(), labels=labels.cuda()).loss
            loss.backward()
            losses.append(float(loss))
            grads.append({n: p.grad.float().clone() for n, p in model.named_parameters() if p.requires_grad})
        assert abs(losses[1] - losses[0]) < 0.02 * abs(losses[0])
        for name, grad in grads[0].items():  # bf16 rounding apart, the same LoRA gradients
            assert float((grads[1][name] - grad).norm() / grad.norm()) < 0.05, name
    assert pairs.budget == 32 and pairs.over_budget == 1
