"""The trainer's per-step bookkeeping paid once (``steady_bookkeeping``): a real ``transformers.Trainer`` on a
tiny LoRA model with dropout trains the same with and without it, through evaluations that switch the model to
eval mode and back; the walks it skips are skipped, and the cases it must leave alone are left alone."""

from __future__ import annotations

import copy

import pytest
import torch
from peft import LoraConfig, get_peft_model
from test_update_fidelity import VOCAB, llama_base
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments

from optimizations.runtime.trainer_steps import steady_bookkeeping


class _Tokens(Dataset):
    def __init__(self, rows: int, seed: int):
        generator = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, VOCAB, (rows, 16), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


def _lora_model() -> torch.nn.Module:
    """The fidelity tests' tiny Llama in float32 (a CPU Trainer), with dropout on its LoRA adapters."""
    torch.manual_seed(0)
    lora = LoraConfig(r=4, lora_dropout=0.3, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    return get_peft_model(llama_base("cpu").float(), lora)


def _train(tmp_path, steady: bool) -> tuple[list[float], float, Trainer]:
    args = TrainingArguments(
        output_dir=str(tmp_path / ("steady" if steady else "plain")),
        max_steps=6,
        per_device_train_batch_size=4,
        learning_rate=1e-2,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=2,
        report_to=[],
        save_strategy="no",
        seed=0,
        dataloader_num_workers=0,
        use_cpu=True,
    )
    trainer = Trainer(
        model=_lora_model(), args=args, train_dataset=_Tokens(32, 1), eval_dataset=_Tokens(8, 2)
    )
    if steady:
        trainer = steady_bookkeeping(trainer)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return losses, trainer.state.total_flos, trainer


def test_a_trainer_trains_the_same_through_evaluations_and_logs_the_same_flops(tmp_path):
    plain_losses, plain_flos, _ = _train(tmp_path, steady=False)
    losses, flos, trainer = _train(tmp_path, steady=True)
    # dropout makes the losses depend on every step being in training mode, after each evaluation too
    assert len(losses) == 6
    assert losses == plain_losses
    assert flos == plain_flos > 0
    model = trainer.model
    assert "_perfbot_modules" in model.__dict__ and "_perfbot_counted" in model.__dict__
    assert model.__dict__["_perfbot_counted"] == {
        True: model.__dict__["_perfbot_count"](exclude_embeddings=True)
    }


def test_train_skips_the_walk_only_while_every_module_trains(monkeypatch):
    model = _lora_model()
    steady_bookkeeping(type("T", (), {"model": model})())
    walks = []
    original = torch.nn.Module.train

    def counted(self, mode=True):
        walks.append(type(self).__name__)
        return original(self, mode)

    monkeypatch.setattr(torch.nn.Module, "train", counted)
    model.train()
    assert walks == []  # every module trains already: nothing visited
    model.base_model.model.model.layers[1].eval()  # put away behind the model's back
    model.train()
    assert walks and all(module.training for module in model.modules())
    walks.clear()
    model.eval()
    assert walks and not any(module.training for module in model.modules())


def test_parameter_counts_are_counted_once_except_trainable_ones():
    model = _lora_model()
    everything, trainable = model.num_parameters(), model.num_parameters(only_trainable=True)
    steady_bookkeeping(type("T", (), {"model": model})())
    assert model.num_parameters() == everything
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    assert model.num_parameters(only_trainable=True) == 0 != trainable  # freezing is seen
    assert model.num_parameters(exclude_embeddings=True) < everything


def test_a_deep_copy_keeps_its_own_mode():
    model = _lora_model()
    steady_bookkeeping(type("T", (), {"model": model})())
    reference = copy.deepcopy(model)
    reference.eval()
    model.train()
    assert all(module.training for module in model.modules())
    assert not any(module.training for module in reference.modules())


class _FreezesNorms(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(4)

    def train(self, mode: bool = True):
        super().train(mode)
        self.norm.eval()  # a train() of its own that does more than set flags
        return self


@pytest.mark.parametrize("switched_off", [False, True])
def test_models_it_must_not_touch_are_left_as_they_were(monkeypatch, switched_off):
    if switched_off:
        monkeypatch.setenv("PERFBOT_STEADY_BOOKKEEPING", "0")
        model = _lora_model()
    else:
        model = torch.nn.Sequential(_FreezesNorms())
    steady_bookkeeping(type("T", (), {"model": model})())
    assert "train" not in model.__dict__
    assert steady_bookkeeping(type("T", (), {"model": "a/checkpoint-name"})()).model == "a/checkpoint-name"
