"""The trainer's per-step bookkeeping paid once (``steady_bookkeeping``): a real ``transformers.Trainer`` on a
tiny LoRA model with dropout trains and clips the same with and without it, through evaluations that switch the
model to eval mode and back; the walks it skips are skipped, a model changed after it was wrapped is seen, and
the cases it must leave alone are left alone."""

from __future__ import annotations

import copy

import pytest
import torch
from peft import LoraConfig, get_peft_model
from test_update_fidelity import VOCAB, llama_base
from torch._dynamo.testing import CompileCounter
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments

from optimizations.steady_bookkeeping.helper import steady_bookkeeping


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


def _train(tmp_path, steady: bool) -> tuple[list[tuple[float, float]], float, Trainer]:
    args = TrainingArguments(
        output_dir=str(tmp_path / ("steady" if steady else "plain")),
        max_steps=6,
        per_device_train_batch_size=4,
        learning_rate=1e-2,
        max_grad_norm=0.05,  # below the gradients' norm: every step is clipped
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
    history = trainer.state.log_history
    losses = [(entry["loss"], entry["grad_norm"]) for entry in history if "loss" in entry]
    return losses, trainer.state.total_flos, trainer


def test_a_trainer_trains_and_clips_the_same_through_evaluations_and_logs_the_same_flops(tmp_path):
    plain_losses, plain_flos, _ = _train(tmp_path, steady=False)
    losses, flos, trainer = _train(tmp_path, steady=True)
    # dropout makes the losses depend on every step being in training mode, after each evaluation too; the
    # gradient norms, and through clipping the losses, on clipping listing every trainable parameter
    assert len(losses) == 6
    assert all(norm > 0.05 for _, norm in plain_losses)
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
    model.train()
    model.base_model.model.model.layers[0].freezer = _FreezesNorms()  # a train() of its own, added later
    model.train()
    assert not model.base_model.model.model.layers[0].freezer.norm.training


def _ids(parameters) -> list[int]:
    return [id(parameter) for parameter in parameters]


def test_parameters_are_listed_without_the_walk_and_see_every_change_to_the_model(monkeypatch):
    model = _lora_model()
    model.base_model.model.lm_head.weight = (
        model.base_model.model.model.embed_tokens.weight
    )  # tied: listed once
    steady_bookkeeping(type("T", (), {"model": model})())
    assert _ids(model.parameters()) == _ids(torch.nn.Module.parameters(model))
    walks = []
    original = torch.nn.Module.named_modules

    def counted(self, *args, **kwargs):
        walks.append(type(self).__name__)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "named_modules", counted)
    listed = _ids(model.parameters())
    assert walks == []
    layers = model.base_model.model.model.layers
    layers[0].mlp.up_proj = torch.nn.Linear(64, 128)  # a module replaced: the list is made again
    layers[1].mlp.down_proj.weight = torch.nn.Parameter(torch.zeros(64, 128))  # a parameter replaced
    layers[1].mlp.gate_proj._parameters["weight"] = torch.nn.Parameter(
        torch.zeros(128, 64)
    )  # behind its back
    assert _ids(model.parameters()) == _ids(torch.nn.Module.parameters(model)) != listed
    del layers[0].mlp.up_proj  # a module removed: no hook sees it, the count of submodules does
    assert _ids(model.parameters()) == _ids(torch.nn.Module.parameters(model))
    assert _ids(model.parameters(recurse=False)) == []
    walks.clear()
    model.parameters()
    assert walks == []


def test_a_compiled_decoder_is_compiled_once_across_steps():
    """Qwen2's forward slices its ModuleList, which builds a module inside the compiled frame: bookkeeping
    that a module's construction changes (a global registration hook, say) would recompile it every step."""
    torch._dynamo.reset()
    model = _lora_model()
    steady_bookkeeping(type("T", (), {"model": model})())
    frames = CompileCounter()
    decoder = model.base_model.model.model
    decoder.forward = torch.compile(decoder.forward, backend=frames, dynamic=False)
    ids = _Tokens(2, 3).ids
    for _ in range(3):
        model.train()
        model(input_ids=ids, labels=ids).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    torch._dynamo.reset()
    assert frames.frame_count == 1


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
    assert set(_ids(reference.parameters())).isdisjoint(_ids(model.parameters()))
    assert _ids(reference.parameters()) == _ids(torch.nn.Module.parameters(reference))


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
    assert ("parameters" in model.__dict__) is not switched_off
    assert steady_bookkeeping(type("T", (), {"model": "a/checkpoint-name"})()).model == "a/checkpoint-name"


class _ListsItsOwnParameters(torch.nn.Sequential):
    def parameters(self, recurse: bool = True):
        return iter(list(super().parameters(recurse))[:1])  # a parameters() of its own


def test_a_model_with_a_parameters_of_its_own_keeps_it():
    model = _ListsItsOwnParameters(torch.nn.Linear(2, 2))
    steady_bookkeeping(type("T", (), {"model": model})())
    assert "parameters" not in model.__dict__
    assert len(list(model.parameters())) == 1
