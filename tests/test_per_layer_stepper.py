"""PerLayerAdamW: grouping, validation and state-dict format on CPU; exactness and memory on a GPU."""

from __future__ import annotations

import copy
import types
import warnings

import pytest
import torch
from torch import nn

from optimizations.per_layer_stepper.helper import (
    PerLayerAdamW,
    adamw_defaults,
    per_layer_adamw,
    plan_layer_groups,
    remap_saved_state,
    trainer_adamw_blocker,
    with_per_layer_adamw,
)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.attn = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Linear(dim, 3 * dim)


class TinyDecoder(nn.Module):
    """Qwen2-shaped: embeddings, a ModuleList of blocks, a final norm and an untied head."""

    def __init__(self, dim: int = 32, layers: int = 3, vocab: int = 64) -> None:
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(vocab, dim)
        self.model.layers = nn.ModuleList(Block(dim) for _ in range(layers))
        self.model.norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)


def decay_groups(model: nn.Module, lr: float = 1e-2) -> list[dict]:
    """Trainer-style groups: weight decay on matrices only, a different lr for the rest."""
    named = list(model.named_parameters())
    return [
        {"params": [p for _, p in named if p.dim() >= 2], "weight_decay": 0.1, "lr": lr},
        {"params": [p for _, p in named if p.dim() < 2], "weight_decay": 0.0, "lr": lr / 3},
    ]


# --- CPU ---------------------------------------------------------------------------------------------


def test_layer_groups_follow_the_model_blocks():
    model = TinyDecoder(layers=3)
    groups = plan_layer_groups(list(model.parameters()), model=model)

    assert [(g.name, g.kind) for g in groups] == [
        ("embeddings", "embeddings"),
        ("model.layers.0", "layer"),
        ("model.layers.1", "layer"),
        ("model.layers.2", "layer"),
        ("rest", "rest"),
    ]
    assert groups[1].params == tuple(model.model.layers[0].parameters())
    assert groups[0].params == (model.model.embed_tokens.weight,)
    rest_ids = {id(p) for p in groups[-1].params}
    assert rest_ids == {id(p) for p in [*model.model.norm.parameters(), model.lm_head.weight]}
    every = [id(p) for g in groups for p in g.params]
    assert sorted(every) == sorted(id(p) for p in model.parameters())


def test_layer_groups_from_names_alone_match_the_model_based_ones():
    model = TinyDecoder(layers=2)
    named = list(model.named_parameters())
    by_names = plan_layer_groups([p for _, p in named], names=[n for n, _ in named])
    by_model = plan_layer_groups([p for _, p in named], model=model)

    assert [(g.name, [id(p) for p in g.params]) for g in by_names] == [
        (g.name, [id(p) for p in g.params]) for g in by_model
    ]


def test_layer_groups_skip_frozen_params_and_pick_the_largest_list():
    model = TinyDecoder(layers=2)
    model.heads = nn.ModuleList([nn.Linear(2, 2)])  # a smaller list that must not be taken for the layers
    model.model.layers[1].requires_grad_(False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    groups = plan_layer_groups(trainable, model=model)

    assert [g.name for g in groups] == ["embeddings", "model.layers.0", "rest"]
    assert set(map(id, groups[-1].params)) >= set(map(id, model.heads.parameters()))


def test_layer_groups_without_structure_make_one_group():
    params = [nn.Parameter(torch.zeros(3)), nn.Parameter(torch.zeros(4))]
    groups = plan_layer_groups(params)
    assert [(g.name, g.params) for g in groups] == [("params", tuple(params))]


def test_cpu_parameters_are_refused_with_a_hint():
    model = TinyDecoder()
    with pytest.raises(ValueError, match=r"on cpu: move the model to CUDA"):
        PerLayerAdamW(model.parameters(), model=model)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"amsgrad": True}, "amsgrad=True"),
        ({"capturable": True}, "capturable=True"),
        ({"differentiable": True}, "differentiable=True"),
        ({"foreach": True}, "foreach=True"),
        ({"fused": False}, "fused=False"),
        ({"betas": (0.9, 1.0)}, "beta parameter at index 1"),
        ({"lr": -1.0}, "Invalid learning rate"),
    ],
)
def test_unsupported_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        adamw_defaults(**kwargs)


def test_bad_prefetch_depth_is_refused_before_anything_else():
    with pytest.raises(ValueError, match="prefetch_depth"):
        PerLayerAdamW([nn.Parameter(torch.zeros(2))], prefetch_depth=-1)


def test_param_group_format_matches_fused_adamw():
    params = [nn.Parameter(torch.zeros(2))]
    kwargs = {"lr": 3e-4, "betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": 0.05, "maximize": True}
    reference = torch.optim.AdamW(params, fused=True, **kwargs).state_dict()["param_groups"][0]
    reference.pop("params")
    assert adamw_defaults(**kwargs) == reference


def _stepped_cpu_adamw(model: nn.Module, **kwargs) -> torch.optim.AdamW:
    optimizer = torch.optim.AdamW(decay_groups(model), **kwargs)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    optimizer.step()
    return optimizer


def test_saved_adamw_state_maps_onto_live_params_and_normalizes_settings():
    saved_model, live_model = TinyDecoder(), TinyDecoder()
    state_dict = _stepped_cpu_adamw(saved_model, foreach=True).state_dict()
    live_groups = decay_groups(live_model)

    id_map, groups = remap_saved_state(state_dict, live_groups)

    live_params = [p for g in live_groups for p in g["params"]]
    assert [id_map[i] for g in state_dict["param_groups"] for i in g["params"]] == live_params
    assert [(g["fused"], g["foreach"], g["weight_decay"]) for g in groups] == [
        (True, None, 0.1),
        (True, None, 0.0),
    ]
    assert state_dict["param_groups"][0]["foreach"] is True  # the caller's dict is left alone


def test_saved_state_that_does_not_fit_is_refused():
    model = TinyDecoder()
    with pytest.raises(ValueError, match="amsgrad=True"):
        remap_saved_state(_stepped_cpu_adamw(model, amsgrad=True).state_dict(), decay_groups(model))
    with pytest.raises(ValueError, match="different number of parameter groups"):
        remap_saved_state(_stepped_cpu_adamw(model).state_dict(), decay_groups(model)[:1])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback")
def test_per_layer_adamw_without_cuda_is_plain_adamw_with_the_same_groups():
    model = TinyDecoder()
    groups = [
        {"params": model.model.layers.parameters(), "weight_decay": 0.1},
        {"params": model.lm_head.parameters(), "lr": 1e-4},
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the CPU fallback is silent
        optimizer = per_layer_adamw(groups, lr=3e-3, model=model, prefetch_depth=2)
    assert type(optimizer) is torch.optim.AdamW
    assert [len(g["params"]) for g in optimizer.param_groups] == [
        len(list(model.model.layers.parameters())),
        1,
    ]
    assert [(g["lr"], g["weight_decay"]) for g in optimizer.param_groups] == [(3e-3, 0.1), (1e-4, 0.01)]


def _trainer(args=(), **attributes):
    """A stand-in with the attributes of a transformers Trainer that the blocker reads."""
    fields = {"optimizer": None, "optimizer_cls_and_kwargs": None, "model_init": None, **attributes}
    return types.SimpleNamespace(
        args=types.SimpleNamespace(**{"optim": "adamw_torch_fused", **dict(args)}), **fields
    )


@pytest.mark.parametrize(
    ("trainer", "reason"),
    [
        (_trainer(), None),
        (_trainer(args={"optim": "adamw_torch"}), None),
        (_trainer(args={"optim": "adafactor"}), "args.optim is 'adafactor'"),
        (_trainer(optimizer=object()), "given an optimizer"),
        (_trainer(model_init=lambda: None), "model_init"),
        (_trainer(is_deepspeed_enabled=True), "shard the optimizer state"),
    ],
)
def test_trainer_optimizer_is_replaced_only_where_it_is_plain_adamw(trainer, reason):
    blocker = trainer_adamw_blocker(trainer)
    if reason is None:
        assert blocker is None
    else:
        assert reason in blocker


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback")
def test_trainer_is_left_alone_without_cuda():
    trainer = _trainer()
    assert with_per_layer_adamw(trainer) is trainer
    assert trainer.optimizer is None


# --- GPU ---------------------------------------------------------------------------------------------


def _twins(seed: int = 0) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(seed)
    reference = TinyDecoder(dim=64, layers=4, vocab=256).cuda()
    return reference, copy.deepcopy(reference)


def _random_grads(models: tuple[nn.Module, ...], generator: torch.Generator) -> None:
    for params in zip(*(m.parameters() for m in models), strict=True):
        grad = torch.randn(params[0].shape, device="cuda", generator=generator)
        for p in params:
            p.grad = grad.clone()


def _same_params(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("depth", [0, 1, 2])
@pytest.mark.parametrize("bucket_bytes", [None, 4096])
def test_gpu_bitwise_equal_to_fused_adamw(depth, bucket_bytes):
    reference_model, model = _twins()
    reference = torch.optim.AdamW(decay_groups(reference_model), fused=True)
    stepper = PerLayerAdamW(decay_groups(model), model=model, prefetch_depth=depth, bucket_bytes=bucket_bytes)
    generator = torch.Generator(device="cuda").manual_seed(1)
    for _ in range(10):
        _random_grads((reference_model, model), generator)
        reference.step()
        stepper.step()
    assert _same_params(reference_model, model)
    expected, got = reference.state_dict(), stepper.state_dict()
    assert expected["param_groups"] == got["param_groups"]
    assert expected["state"].keys() == got["state"].keys()
    for index, state in expected["state"].items():
        assert got["state"][index]["exp_avg"].is_pinned()
        assert got["state"][index]["step"].device == state["step"].device
        for key, value in state.items():
            assert torch.equal(value.cpu(), got["state"][index][key].cpu()), (index, key)


@pytest.mark.gpu
@needs_cuda
def test_gpu_state_dict_round_trips_both_ways():
    reference_model, model = _twins()
    generator = torch.Generator(device="cuda").manual_seed(2)
    reference = torch.optim.AdamW(decay_groups(reference_model), fused=True)
    for _ in range(3):
        _random_grads((reference_model,), generator)
        reference.step()
    model.load_state_dict(reference_model.state_dict())

    # AdamW -> stepper (through a copy, as a checkpoint file would be), then both continue.
    stepper = PerLayerAdamW(decay_groups(model), model=model)
    stepper.load_state_dict(copy.deepcopy(reference.state_dict()))
    assert all(s["exp_avg"].is_pinned() for s in stepper.state.values())
    for _ in range(3):
        _random_grads((reference_model, model), generator)
        reference.step()
        stepper.step()
    assert _same_params(reference_model, model)

    # stepper -> AdamW, then both continue.
    resumed = torch.optim.AdamW(decay_groups(reference_model), fused=True)
    resumed.load_state_dict(copy.deepcopy(stepper.state_dict()))
    for _ in range(3):
        _random_grads((reference_model, model), generator)
        resumed.step()
        stepper.step()
    assert _same_params(reference_model, model)


@pytest.mark.gpu
@needs_cuda
def test_gpu_memory_is_a_fixed_pool_of_depth_plus_two_groups():
    torch.manual_seed(0)
    model = TinyDecoder(dim=64, layers=8, vocab=256).cuda()
    depth = 2
    stepper = PerLayerAdamW(decay_groups(model), model=model, prefetch_depth=depth)
    generator = torch.Generator(device="cuda").manual_seed(3)
    grads = []
    for p in model.parameters():
        p.grad = torch.randn(p.shape, device="cuda", generator=generator)
        grads.append(p.grad)
    torch.cuda.synchronize()
    before_first_step = torch.cuda.memory_allocated()
    stepper.step()
    torch.cuda.synchronize()
    after_first_step = torch.cuda.memory_allocated()
    for _ in range(50):
        for g in grads:
            g.normal_(generator=generator)
        stepper.step()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == after_first_step

    def state_bytes(params):  # exp_avg + exp_avg_sq, each tensor 256-byte aligned
        return 2 * sum(-(-p.numel() * p.element_size() // 256) * 256 for p in params)

    largest_layer = max(state_bytes(g.params) for g in stepper.layer_groups if g.kind == "layer")
    step_counters = 512 * len(grads)  # one 0-dim float32 step tensor per parameter, as fused AdamW keeps
    assert after_first_step - before_first_step <= (depth + 2) * largest_layer + step_counters
    assert state_bytes(model.parameters()) > 2 * (depth + 2) * largest_layer


@pytest.mark.gpu
@needs_cuda
def test_gpu_lr_scheduler_and_grad_clipping_behave_as_with_fused_adamw():
    reference_model, model = _twins()
    reference = torch.optim.AdamW(decay_groups(reference_model), fused=True)
    stepper = PerLayerAdamW(decay_groups(model), model=model)
    schedulers = [
        torch.optim.lr_scheduler.LambdaLR(o, lambda step: 1.0 / (step + 1)) for o in (reference, stepper)
    ]
    generator = torch.Generator(device="cuda").manual_seed(4)
    for _ in range(5):
        _random_grads((reference_model, model), generator)
        for m, optimizer, scheduler in zip(
            (reference_model, model), (reference, stepper), schedulers, strict=True
        ):
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
            optimizer.step()
            scheduler.step()
    assert stepper.param_groups[0]["lr"] == reference.param_groups[0]["lr"] < 1e-2
    assert _same_params(reference_model, model)


@pytest.mark.gpu
@needs_cuda
def test_gpu_grad_scaler_skips_steps_with_inf_like_fused_adamw():
    reference_model, model = _twins()
    optimizers = (
        torch.optim.AdamW(decay_groups(reference_model), fused=True),
        PerLayerAdamW(decay_groups(model), model=model),
    )
    scalers = [torch.amp.GradScaler("cuda", init_scale=4.0) for _ in optimizers]
    for scaler in scalers:
        scaler.scale(torch.ones((), device="cuda"))  # sets up the scale, as scaling the loss does
    generator = torch.Generator(device="cuda").manual_seed(5)
    for step in range(4):
        _random_grads((reference_model, model), generator)
        for m, optimizer, scaler in zip((reference_model, model), optimizers, scalers, strict=True):
            if step == 2:
                next(m.parameters()).grad[0] = float("inf")
            scaler.step(optimizer)
            scaler.update()
    assert _same_params(reference_model, model)
    steps = {float(s["step"]) for s in optimizers[1].state.values()}
    assert steps == {3.0}


@pytest.mark.gpu
@needs_cuda
def test_gpu_a_model_moved_off_the_gpu_is_refused():
    _, model = _twins()
    stepper = PerLayerAdamW(model.parameters(), model=model)
    model.cpu()
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    with pytest.raises(ValueError, match="do not move the model"):
        stepper.step()


@pytest.mark.gpu
@needs_cuda
def test_gpu_per_layer_adamw_builds_the_stepper_or_warns_and_falls_back():
    _, model = _twins()
    assert isinstance(per_layer_adamw(model.parameters(), lr=1e-3, model=model), PerLayerAdamW)
    with pytest.warns(UserWarning, match="amsgrad=True"):
        fallback = per_layer_adamw(model.parameters(), lr=1e-3, amsgrad=True, model=model)
    assert type(fallback) is torch.optim.AdamW and fallback.param_groups[0]["amsgrad"]


@pytest.mark.gpu
@needs_cuda
def test_gpu_trainer_trains_with_the_stepper(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.Qwen2Config(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(config)
    rows = [{"input_ids": list(range(i, i + 16)), "labels": list(range(i, i + 16))} for i in range(8)]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=3,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        weight_decay=0.1,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
    )
    trainer = with_per_layer_adamw(transformers.Trainer(model=model, args=args, train_dataset=rows))
    optimizer = trainer.optimizer
    assert isinstance(optimizer, PerLayerAdamW)
    assert [g.name for g in optimizer.layer_groups] == [
        "embeddings",
        "model.layers.0",
        "model.layers.1",
        "rest",
    ]
    decay = set(trainer.get_decay_parameter_names(model))
    names = {p: n for n, p in model.named_parameters()}
    assert all(names[p] in decay for p in optimizer.param_groups[0]["params"])
    assert optimizer.param_groups[1]["weight_decay"] == 0.0 and optimizer.param_groups[1]["params"]
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    assert trainer.state.global_step == 3
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
    assert {float(s["step"]) for s in optimizer.state.values()} == {3.0}
