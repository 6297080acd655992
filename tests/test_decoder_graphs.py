"""The decoder's training steps as CUDA graphs (`optimizations.decoder_graphs`, runtime `TrainingGraphs` in
`_perfbot_compile`). On CPU: which forwards replay graphs and which run eagerly, the settings under which the
helper compiles without graphs, and the refusal of a script every launch of which checkpoints activations. On
the GPU: a graphed decoder replays graphs and trains the LoRA weights the eager one trains, from the first step
of a shape on, through two forwards before a backward, and beside a second model of its class. Its update
fidelity is in tests/test_update_fidelity.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from optimizations.runtime.compile import (
    GRAPHS_SWITCH,
    TrainingGraphs,
    checkpoints_activations,
    compile_repeated_layers,
    shards_parameters,
    unfilter_logged_loss,
)

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def routed(module: torch.nn.Module) -> tuple[TrainingGraphs, list[str]]:
    """``module``'s forward behind :class:`TrainingGraphs`, its two paths recording which one ran (the graphed
    path runs eagerly here: which forwards take it is under test, not the graphs)."""
    graphs = TrainingGraphs(module.forward)
    calls: list[str] = []
    eager = graphs.eager

    def path(name):
        def run(*args, **kwargs):
            calls.append(name)
            return eager(*args, **kwargs)

        return run

    graphs.eager, graphs.graphed = path("eager"), path("graphed")
    module.forward = graphs
    return graphs, calls


def test_only_a_training_forward_after_its_predecessors_backward_replays_graphs():
    layer = torch.nn.Linear(4, 4)
    graphs, calls = routed(layer)
    x = torch.randn(3, 4)
    with torch.no_grad():
        layer(x)  # a reference pass
    assert calls == ["eager"] and not graphs.pending
    first = layer(x)
    assert calls[-1] == "graphed" and graphs.pending
    second = layer(x)  # before the first one's backward: a replay would overwrite its saved activations
    assert calls[-1] == "eager"
    (first.sum() + second.sum()).backward()
    assert not graphs.pending
    layer(x).sum().backward()
    layer(x)
    assert calls == ["eager", "graphed", "eager", "graphed", "graphed"]


def test_a_forward_that_leaves_no_backward_keeps_the_graphs():
    layer = torch.nn.Linear(4, 4).requires_grad_(False)
    graphs, calls = routed(layer)
    for _ in range(2):
        layer(torch.randn(3, 4))  # gradients on, nothing to train: no backward will come
    assert calls == ["graphed", "graphed"] and not graphs.pending


def test_a_module_whose_parameters_moved_after_its_graphs_recorded_runs_eagerly(fresh_graphs, caplog):
    layer = torch.nn.Linear(4, 4)
    graphs, calls = routed(layer)
    x = torch.randn(3, 4)
    for _ in range(2):
        layer(x).sum().backward()  # graphs recorded at the parameters' addresses, then replayed
    assert torch._inductor.config.size_asserts is False  # the class checks the addresses itself
    layer.weight.data = layer.weight.data.clone()  # a new address, as model.to(...) gives
    for _ in range(2):
        layer(x).sum().backward()
    assert calls == ["graphed", "graphed", "eager", "eager"]
    assert caplog.text.count("parameters moved") == 1


def test_a_model_output_is_followed_to_its_backward():
    model = qwen2_lora("cpu")
    decoder = model.get_base_model().model
    graphs, calls = routed(decoder)
    ids = torch.randint(0, 64, (2, 8))
    model(input_ids=ids, labels=ids).loss.backward()
    assert not graphs.pending  # the hook sat on the ModelOutput's hidden state, and the backward reached it
    model(input_ids=ids, labels=ids)
    assert calls == ["graphed", "graphed"] and graphs.pending


def test_the_logged_loss_is_no_longer_filtered_where_a_config_filters_it():
    filtering, unfiltered, other = (SimpleNamespace(logging_nan_inf_filter=v) for v in (True, False, None))
    for config in (filtering, unfiltered, other):
        unfilter_logged_loss(config)
    assert filtering.logging_nan_inf_filter is False and unfiltered.logging_nan_inf_filter is False
    assert other.logging_nan_inf_filter is None  # not a Trainer config's flag: left alone
    budget = SimpleNamespace()
    unfilter_logged_loss(budget)
    assert not hasattr(budget, "logging_nan_inf_filter")


@pytest.mark.parametrize("name", ["gradient_checkpointing", "activation_checkpointing"])
def test_activation_checkpointing_in_the_config_or_on_the_model_is_seen(name):
    model = qwen2_lora("cpu")
    assert not checkpoints_activations(model, SimpleNamespace(**{name: False}))
    assert checkpoints_activations(model, SimpleNamespace(**{name: True}))
    base = model.get_base_model()  # what a Trainer does for such a config (transformers 5 renamed the call):
    (getattr(base, "activation_checkpointing_enable", None) or base.gradient_checkpointing_enable)()
    assert checkpoints_activations(model, SimpleNamespace())


def test_deepspeed_or_fsdp_by_the_config_or_by_accelerate_launch_is_seen(monkeypatch):
    for name in ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_USE_FSDP"):
        monkeypatch.delenv(name, raising=False)
    assert not shards_parameters(SimpleNamespace(deepspeed=None, fsdp=""))  # a TrainingArguments' defaults
    assert shards_parameters(SimpleNamespace(deepspeed="ds_zero3.json", fsdp=""))
    assert shards_parameters(SimpleNamespace(deepspeed=None, fsdp="full_shard auto_wrap"))
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    assert shards_parameters(SimpleNamespace())


def qwen2_lora(device: str) -> torch.nn.Module:
    config = transformers.Qwen2Config(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        attn_implementation="sdpa",
    )
    model = transformers.Qwen2ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
    lora = peft.LoraConfig(r=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, task_type="CAUSAL_LM")
    model = peft.get_peft_model(model, lora)
    for name, parameter in model.named_parameters():
        if "lora_B" in name:  # non-zero B, so that the A gradients are not all zero
            torch.nn.init.normal_(parameter, std=0.05)
    return model


def budget_config() -> SimpleNamespace:
    return SimpleNamespace(
        packing=True,
        packing_strategy="bfd",
        per_device_train_batch_size=2,
        max_length=16,
        pad_to_multiple_of=None,
        logging_nan_inf_filter=True,
    )


def lora_grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.float().clone() for n, p in model.named_parameters() if p.requires_grad}


def assert_close_grads(grads: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    """bf16 rounding apart (compiled kernels fuse in another order), the same LoRA gradients."""
    assert grads.keys() == expected.keys()
    for name, grad in expected.items():
        assert float((grads[name] - grad).norm() / grad.norm()) < 0.05, name


def graph_launches(model: torch.nn.Module, ids: torch.Tensor) -> int:
    """The CUDA graphs a training step of ``model`` on ``ids`` launches, by ``torch.profiler``."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        model(input_ids=ids, labels=ids).loss.backward()
        torch.cuda.synchronize()
    return sum(event.count for event in profile.key_averages() if event.key == "cudaGraphLaunch")


@pytest.mark.gpu
@NEEDS_CUDA
def test_a_graphed_decoder_replays_graphs_and_trains_like_the_eager_one(fresh_graphs):
    torch.manual_seed(0)
    eager = qwen2_lora("cuda")
    torch.manual_seed(0)
    config = budget_config()
    graphed = compile_repeated_layers(qwen2_lora("cuda"), fixed_budget=config, cuda_graphs=True)
    assert isinstance(graphed.get_base_model().model.forward, TrainingGraphs)
    assert config.logging_nan_inf_filter is False
    torch._dynamo.utils.counters.clear()
    generator = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, 64, (2, 16), generator=generator).cuda() for _ in range(4)]
    for ids in batches:
        grads = []
        for model in (eager, graphed):
            model.zero_grad(set_to_none=True)
            model(input_ids=ids, labels=ids).loss.backward()
            grads.append(lora_grads(model))
        assert_close_grads(grads[1], grads[0])  # the first step too: a new shape's graphs record there
    assert torch._dynamo.utils.counters["inductor"]["cudagraph_skips"] == 0
    assert graph_launches(graphed, batches[0]) >= 2  # the forward's and the backward's graphs replayed


@pytest.mark.gpu
@NEEDS_CUDA
def test_two_forwards_before_a_backward_keep_their_own_activations(fresh_graphs):
    torch.manual_seed(0)
    eager = qwen2_lora("cuda")
    torch.manual_seed(0)
    graphed = compile_repeated_layers(qwen2_lora("cuda"), fixed_budget=budget_config(), cuda_graphs=True)
    first, second = (torch.randint(0, 64, (2, 16), device="cuda") for _ in range(2))
    for model in (eager, graphed):
        model(input_ids=first, labels=first).loss.backward()  # graphs recorded at this shape
        model.zero_grad(set_to_none=True)
    grads = []
    for model in (eager, graphed):
        loss = model(input_ids=first, labels=first).loss + model(input_ids=second, labels=second).loss
        loss.backward()
        grads.append(lora_grads(model))
    assert_close_grads(grads[1], grads[0])


@pytest.mark.gpu
@NEEDS_CUDA
def test_a_graphed_decoder_whose_parameters_moved_trains_like_the_eager_one(fresh_graphs):
    """Replays would read the LoRA weights at their recorded addresses; the helper sees the move and runs the
    decoder eagerly (inductor's own address check is off: see TrainingGraphs)."""
    torch.manual_seed(0)
    eager = qwen2_lora("cuda")
    torch.manual_seed(0)
    graphed = compile_repeated_layers(qwen2_lora("cuda"), fixed_budget=budget_config(), cuda_graphs=True)
    ids = torch.randint(0, 64, (2, 16), device="cuda")
    for _ in range(2):
        graphed(input_ids=ids, labels=ids).loss.backward()  # graphs recorded, then replayed
    for model in (eager, graphed):
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.data = parameter.data * 2  # new values at new addresses: A's gradients double
    grads = []
    for model in (eager, graphed):
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()
        grads.append(lora_grads(model))
    assert_close_grads(grads[1], grads[0])


@pytest.mark.gpu
@NEEDS_CUDA
def test_a_second_model_of_the_class_is_compiled_without_graphs(fresh_graphs):
    """Dynamo would hand the second model the first one's compiled forward, whose graphs read the first
    model's parameters."""
    torch.manual_seed(0)
    eager = qwen2_lora("cuda")
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        models.append(
            compile_repeated_layers(qwen2_lora("cuda"), fixed_budget=budget_config(), cuda_graphs=True)
        )
    ids = torch.randint(0, 64, (2, 16), device="cuda")
    grads = []
    for model in (eager, *models, models[0]):
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()
        grads.append(lora_grads(model))
    for graded in grads[1:]:
        assert_close_grads(graded, grads[0])
    assert graph_launches(models[0], ids) >= 2 and graph_launches(models[1], ids) == 0


@pytest.mark.gpu
@NEEDS_CUDA
@pytest.mark.parametrize(
    ("environment", "settings"),
    [
        ({GRAPHS_SWITCH: "0"}, {}),
        ({}, {"gradient_checkpointing": True}),
        ({}, {"deepspeed": "ds_zero3.json"}),
        ({"ACCELERATE_USE_FSDP": "true"}, {}),
    ],
    ids=["switch", "checkpointing", "deepspeed", "fsdp"],
)
def test_the_decoder_is_compiled_without_graphs_where_they_are_off_or_unsafe(
    monkeypatch, fresh_graphs, environment, settings
):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    config = budget_config()
    vars(config).update(settings)
    model = compile_repeated_layers(qwen2_lora("cuda"), fixed_budget=config, cuda_graphs=True)
    decoder = model.get_base_model().model
    assert not isinstance(decoder.forward, TrainingGraphs) and decoder._compiled_call_impl is not None
    assert config.logging_nan_inf_filter is True


GRAPHED_SCRIPT = """\
from trl import ModelConfig, ScriptArguments, SFTConfig, SFTTrainer, TrlParser
from _perfbot_compile import compile_repeated_layers


def main(script_args, training_args, model_args, model, dataset):
    trainer = SFTTrainer(model=compile_repeated_layers(model, fixed_budget=training_args), args=training_args, train_dataset=dataset)
    trainer.train()


if __name__ == "__main__":
    main(*TrlParser((ScriptArguments, SFTConfig, ModelConfig)).parse_args_and_config(), None, None)
"""


@pytest.mark.parametrize(
    ("launch", "lands"),
    [
        ("--config recipes/full.yaml", False),  # the recipe turns activation checkpointing on
        ("--config recipes/full.yaml --gradient_checkpointing false", True),  # the flag wins over the recipe
        ("--config recipes/lora.yaml", True),
        ("--config recipes/{full,lora}.yaml", True),  # one of the two recipes leaves it off
    ],
)
def test_a_script_every_launch_of_which_checkpoints_activations_is_refused(tmp_path, launch, lands):
    """The helper would compile without graphs in every run such a script makes: the edit is refused, with
    where each launch turns the setting on; a launch that leaves it off keeps the edit."""
    from optimizations.registry import get
    from tests.git_repos import make_repo

    make_repo(
        tmp_path / "r",
        {
            "sft.py": GRAPHED_SCRIPT,
            "run.sh": "accelerate launch sft.py --config recipes/full.yaml\n"
            f"accelerate launch --num_processes 1 sft.py {launch}\n",
            "recipes/full.yaml": "learning_rate: 2.0e-5\ngradient_checkpointing: true\npacking: true\n",
            "recipes/lora.yaml": "learning_rate: 2.0e-4\npacking: true\n",
        },
    )
    (site,) = get("decoder_graphs").find(tmp_path / "r")
    assert (site.path, site.applicable) == ("sft.py", lands)
    if not lands:
        assert "every launch of this script (2: recipes/full.yaml:2, recipes/full.yaml:2)" in site.reason


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ("packing=True, gradient_checkpointing=script_args.gc", "sets from `script_args.gc`"),
        ("**script_args.settings", "may set from `**script_args.settings`"),  # the seed repository's shape
    ],
)
def test_a_site_whose_run_chooses_checkpointing_says_the_graphs_depend_on_it(tmp_path, settings, said):
    from optimizations.registry import get
    from tests.git_repos import make_repo

    chosen = GRAPHED_SCRIPT.replace(
        "def main(script_args, training_args, model_args, model, dataset):\n",
        "def main(script_args, training_args, model_args, model, dataset):\n"
        f"    training_args = SFTConfig(output_dir='out', {settings})\n",
    )
    make_repo(tmp_path / "r", {"sft.py": chosen})
    (site,) = get("decoder_graphs").find(tmp_path / "r")
    assert site.applicable
    assert site.message.endswith(
        f"(graphed only in runs without activation checkpointing, which line 6 {said})"
    )
