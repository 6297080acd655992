"""The token budget (`optimizations.token_budget`, runtime `fix_token_budget` in `_perfbot_compile`): the config
is padded to batch × max length only where packing is padding-free and nothing pads already, and padding a
packed batch to that budget leaves TRL's loss and the LoRA adapter's gradients as they were (the update-fidelity
check of this change, on CPU: the only difference is rounding)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from tiny_models import tiny_qwen2

from optimizations.runtime.compile import compile_repeated_layers, fix_token_budget

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")


def config(**fields):
    base = {"packing": True, "packing_strategy": "bfd", "padding_free": False, "max_length": 16}
    return SimpleNamespace(**{**base, "per_device_train_batch_size": 2, "pad_to_multiple_of": None, **fields})


@pytest.mark.parametrize(
    ("fields", "budget", "padded_to"),
    [
        ({}, True, 32),
        ({"packing_strategy": "wrapped"}, False, None),  # rows are full already, and not padding-free
        ({"packing": False}, False, None),  # padded batches: the budget would pad every row to it
        ({"packing": False, "padding_free": True}, True, 32),
        ({"pad_to_multiple_of": 8}, False, 8),  # the user's own padding is kept
        ({"max_length": None}, False, None),
    ],
)
def test_only_padding_free_packing_gets_the_budget(fields, budget, padded_to):
    settings = config(**fields)
    assert fix_token_budget(settings) is budget
    assert settings.pad_to_multiple_of == padded_to


def test_without_a_gpu_the_model_is_left_as_it_was():
    model = torch.nn.Sequential(torch.nn.ModuleList([torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)]))
    settings = config()
    assert compile_repeated_layers(model, fixed_budget=settings) is model
    assert settings.pad_to_multiple_of is None  # nothing is compiled, so nothing is padded


def words_and_tokenizer():
    """A word-level tokenizer over 60 words, and 7 texts of 2-9 of them: packed rows of at most 18 tokens."""
    from datasets import Dataset
    from word_tokenizer import word_tokenizer

    words = [f"w{i}" for i in range(60)]
    tokenizer = word_tokenizer(words)
    return tokenizer, Dataset.from_dict({"text": [" ".join(words[:n]) for n in (3, 7, 2, 5, 4, 6, 9)]})


def packed_config():
    """bfd packing of rows of at most 18 tokens, two rows a batch: no two fill the budget of 40."""
    return trl.SFTConfig(
        output_dir="unused",
        packing=True,
        packing_strategy="bfd",
        max_length=20,
        per_device_train_batch_size=2,
        report_to="none",
        use_cpu=True,
    )


def test_a_built_trainers_collator_is_padded_to_the_budget_too():
    """A trainer that loads its checkpoint itself is compiled once built (``compile_repeated_layers(trainer.model,
    fixed_budget=trainer)``): its collator read the config already, so the budget goes to the collator as well."""
    from optimizations.runtime.compile import _config_and_collator

    tokenizer, dataset = words_and_tokenizer()
    model = tiny_qwen2(len(tokenizer))
    args = packed_config()
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    assert next(iter(trainer.get_train_dataloader()))["input_ids"].shape[1] < 40
    config, collator = _config_and_collator(trainer)
    assert (config, collator) == (trainer.args, trainer.data_collator)
    assert fix_token_budget(config, collator)
    assert next(iter(trainer.get_train_dataloader()))["input_ids"].shape[1] == 40
    # a collator the budget cannot reach (no pad_to_multiple_of) keeps the per-layer compilation
    assert not fix_token_budget(config, object())


def test_padding_to_the_budget_keeps_the_loss_and_the_adapter_gradients():
    from peft import LoraConfig, get_peft_model

    tokenizer, dataset = words_and_tokenizer()
    results = []
    for budget in (False, True):
        torch.manual_seed(0)
        model = tiny_qwen2(len(tokenizer))
        model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
        for name, parameter in model.named_parameters():
            if "lora_B" in name:  # non-zero B, so that the A gradients are not all zero
                torch.nn.init.normal_(parameter, std=0.1)
        args = packed_config()
        if budget:
            assert fix_token_budget(args)
        trainer = trl.SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
        batch = next(iter(trainer.get_train_dataloader()))
        assert (batch["input_ids"].shape[1] == 40) is budget
        model.train()
        loss = trainer.compute_loss(model, dict(batch))
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
        results.append((loss.detach(), grads, int((batch["labels"] != -100).sum())))
    (loss, grads, tokens), (padded_loss, padded_grads, padded_tokens) = results
    assert padded_tokens == tokens  # the pad tokens carry no label
    torch.testing.assert_close(padded_loss, loss, rtol=1e-5, atol=1e-6)
    assert grads.keys() == padded_grads.keys() and len(grads) == 8
    for name, grad in grads.items():
        assert grad.abs().sum() > 0
        torch.testing.assert_close(padded_grads[name], grad, rtol=1e-4, atol=1e-6)
