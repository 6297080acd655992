"""Update fidelity of every optimization that touches weights, optimizers or precision (issue #27).

Each optimization is applied as its commit runs it: the runtime helper its codemod vendors, called the way the
codemod writes the call. A tiny bf16 LoRA model (Llama shapes, PEFT's fp32 adapters) and a tiny full fine-tune
(GPT-2 shapes, fp32 weights) train 8 AdamW steps at lr 5e-6 (a usual DPO LoRA rate) and 2e-4 from the same
seed, with and without the optimization (``benchmarks.fidelity``); at least 99% of the trainable elements the
unmodified program moves must move, and the update error must stay within the tolerance of the change's
numerics:

- ``exact``: the same weights and losses bit for bit. What a GPU-gated switch does on this CPU (``fused`` only
  on CUDA tensors, ``PerLayerAdamW`` only with CUDA, CUDA autocast, TF32 flags that CPU matmuls ignore).
- ``rounding``: the same math at bf16 compute. AdamW's update is ``lr * m / sqrt(v)``, a ratio of gradient
  moments; at bf16 (8 bits of mantissa) a matmul's gradient is off by ~2^-8 relative per element, which moves the
  ratio far on elements whose gradient is near zero, so the update error is bounded by what bf16 autocast, tier
  1's reference rounding change (loss within 0.005 of fp32 over 200 GPU steps), gives on these models: 0.016 to
  0.041 on CPU, so < 0.1. A step rounded away shows as an error of 0.5 or more and as unmoved elements.

decoder_graphs replays the compiled decoder from CUDA graphs, whose static memory a stale input or
activation would show here as an update error (CUDA only). vocab_padding (``dynamics``) adds embedding rows: the
rows both models have are compared. Left out, with why:
sdpa, fa2, torch_norm_gelu and compile_model/regional_compile change kernels of the forward pass, not weights,
optimizer or precision; packing and the host-side ones (workers, prefetcher, logging, dpo_precompute,
ddp_static_graph) leave the step's math alone.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from benchmarks.fidelity import TrainingStep, UpdateFidelity, update_fidelity
from optimizations.per_layer_stepper.helper import per_layer_adamw
from optimizations.runtime.compile import GRAPHED_FORWARDS, TrainingGraphs, compile_repeated_layers
from optimizations.runtime.gpu_flags import enable_tf32, fused_optimizer_supported
from optimizations.runtime.precision import bf16_supported, compute_adapters_in_bf16
from optimizations.vocab_padding.edit import padded

STEPS = 8
VOCAB = 128
ROUNDING = 0.1  # update error of a bf16-compute change: see the module docstring
MOVED = 0.99
LEARNING_RATES = (5e-6, 2e-4)
GPU = pytest.mark.gpu
NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
DEVICES = ("cpu", pytest.param("cuda", marks=(GPU, NEEDS_CUDA)))


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One intra-op thread: these matmuls are tiny, and threads contending on a shared CPU make them 50x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def llama_base(device: str) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
    )
    return LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16)


LORA = dict(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")


def bf16_lora(device: str) -> torch.nn.Module:
    """The unmodified LoRA program: PEFT's default fp32 adapters on a bf16 base."""
    return get_peft_model(llama_base(device), LoraConfig(**LORA))


def gpt2_full(device: str) -> torch.nn.Module:
    # No dropout: its masks are drawn per kernel and dtype (CUDA draws a bf16 tensor's mask unlike a float32
    # one's), so two programs with dropout differ by their random streams, not by their numerics. With GPT-2's
    # default 0.1, even float32 on the CPU against float32 on CUDA differed by 0.81 (24% of signs flipped).
    config = GPT2Config(
        vocab_size=VOCAB,
        n_embd=64,
        n_layer=2,
        n_head=4,
        n_positions=32,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return GPT2LMHeadModel(config).to(device)


MODELS = {"bf16_lora": bf16_lora, "full_fp32": gpt2_full}


def causal_lm_loss(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids, labels=ids).loss


def batches(device: str) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, VOCAB, (2, 16), generator=generator).to(device) for _ in range(STEPS)]


def adamw_program(model: torch.nn.Module, lr: float, loss=causal_lm_loss) -> TrainingStep:
    return TrainingStep(model, torch.optim.AdamW(model.parameters(), lr=lr), loss)


def measure(model: str, device: str, lr: float, modified: Callable[[], TrainingStep]) -> UpdateFidelity:
    baseline = lambda: adamw_program(MODELS[model](device), lr)  # noqa: E731
    return update_fidelity(baseline, modified, batches(device))


def assert_exact(result: UpdateFidelity) -> None:
    assert result.update_error == 0, result.describe()
    assert result.losses == result.baseline_losses


def assert_rounding(result: UpdateFidelity) -> None:
    assert result.moved_as_before >= MOVED, result.describe()
    assert result.update_error < ROUNDING, result.describe()


def assert_within(result: UpdateFidelity, device: str) -> None:
    """Exact where the optimization's run-time guard keeps it off (CPU), rounding-level where it is on."""
    assert result.baseline_moved > 0.9, result.describe()  # the baseline itself trains
    if device == "cpu":
        assert_exact(result)
    else:
        assert_rounding(result)


@pytest.mark.parametrize("lr", LEARNING_RATES)
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("device", DEVICES)
def test_fused_adamw(model, device, lr):
    def modified() -> TrainingStep:
        net = MODELS[model](device)
        model_parameters = list(net.parameters())
        optimizer = torch.optim.AdamW(
            model_parameters, lr=lr, fused=fused_optimizer_supported(model_parameters)
        )
        assert optimizer.defaults["fused"]  # torch >= 2.4 fuses on the CPU too: the change is live here
        return TrainingStep(net, optimizer, causal_lm_loss)

    assert_rounding(measure(model, device, lr, modified))


@pytest.mark.parametrize("lr", LEARNING_RATES)
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("device", DEVICES)
def test_per_layer_stepper(model, device, lr):
    def modified() -> TrainingStep:
        net = MODELS[model](device)
        return TrainingStep(net, per_layer_adamw(net.parameters(), lr=lr, model=net), causal_lm_loss)

    assert_within(measure(model, device, lr, modified), device)


@pytest.mark.parametrize("lr", LEARNING_RATES)
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("device", DEVICES)
def test_bf16_autocast_as_committed(model, device, lr):
    """The loop's loss under the autocast the codemod writes: CUDA autocast, on where bf16 is native."""

    def autocast_loss(net: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=bf16_supported()):
            return causal_lm_loss(net, ids)

    result = measure(model, device, lr, lambda: adamw_program(MODELS[model](device), lr, autocast_loss))
    assert_within(result, device)


@pytest.mark.parametrize("lr", LEARNING_RATES)
@pytest.mark.parametrize("model", MODELS)
def test_bf16_autocast_math_on_cpu(model, lr):
    """The same autocast on the device the model is on (CPU autocast is bf16 too): what it does on a GPU."""

    def autocast_loss(net: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            return causal_lm_loss(net, ids)

    result = measure(model, "cpu", lr, lambda: adamw_program(MODELS[model]("cpu"), lr, autocast_loss))
    assert result.update_error > 0  # autocast ran
    assert_rounding(result)


@pytest.fixture
def restored_matmul_flags():
    """TF32 and cuDNN settings put back as they were after the test."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (matmul.fp32_precision, cudnn.conv.fp32_precision, cudnn.rnn.fp32_precision, cudnn.benchmark)
    yield
    matmul.fp32_precision, cudnn.conv.fp32_precision, cudnn.rnn.fp32_precision, cudnn.benchmark = saved


@pytest.mark.usefixtures("restored_matmul_flags")
@pytest.mark.parametrize("lr", LEARNING_RATES)
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("device", DEVICES)
def test_tf32(model, device, lr):
    def modified() -> TrainingStep:
        enable_tf32()
        return adamw_program(MODELS[model](device), lr)

    assert_within(measure(model, device, lr, modified), device)


@pytest.mark.parametrize("lr", LEARNING_RATES)
@pytest.mark.parametrize("device", DEVICES)
def test_liger_guard(device, lr):
    """Liger's fused kernels (cross-entropy, RMSNorm, RoPE, SwiGLU) on the LoRA model, as the guard's flag
    turns them on in a trainer."""
    pytest.importorskip("liger_kernel", reason="liger-kernel is not installed here")
    if device == "cpu":
        pytest.skip("Liger's kernels are Triton kernels: they need a GPU")
    from liger_kernel.transformers import _apply_liger_kernel_to_instance

    def modified() -> TrainingStep:
        net = bf16_lora(device)
        _apply_liger_kernel_to_instance(model=net.get_base_model())
        return adamw_program(net, lr)

    assert_rounding(measure("bf16_lora", device, lr, modified))


@pytest.mark.parametrize("lr", LEARNING_RATES)
@pytest.mark.parametrize("device", DEVICES)
def test_bf16_adapters_keep_training_the_adapters(device, lr):
    """``compute_adapters_in_bf16(get_peft_model(...))``, as the commit writes it (``trainer.model`` after a TRL
    trainer wraps the model is the same call on the same PEFT model)."""

    def modified() -> TrainingStep:
        return adamw_program(
            compute_adapters_in_bf16(get_peft_model(llama_base(device), LoraConfig(**LORA))), lr
        )

    result = measure("bf16_lora", device, lr, modified)
    assert result.baseline_moved > 0.9, result.describe()
    assert result.update_error > 0  # the adapters computed in bf16
    assert_rounding(result)


@pytest.mark.parametrize("lr", LEARNING_RATES)
@pytest.mark.parametrize("device", DEVICES)
def test_decoder_graphs(device, lr):
    """``compile_repeated_layers(model, fixed_budget=args, cuda_graphs=True)`` as decoder_graphs writes it: the
    LoRA model's decoder compiled whole, its training steps replayed as CUDA graphs (on CUDA only)."""
    budget = SimpleNamespace(
        packing=True,
        packing_strategy="bfd",
        per_device_train_batch_size=2,
        max_length=16,
        pad_to_multiple_of=None,
    )

    def modified() -> TrainingStep:
        torch._dynamo.reset()  # the process's first graphed model: only the first of its class is graphed
        GRAPHED_FORWARDS.clear()
        model = compile_repeated_layers(bf16_lora(device), fixed_budget=budget, cuda_graphs=True)
        graphed = isinstance(model.get_base_model().model.forward, TrainingGraphs)
        assert graphed is (device == "cuda")
        return adamw_program(model, lr)

    assert_within(measure("bf16_lora", device, lr, modified), device)


@pytest.mark.parametrize("lr", LEARNING_RATES)
def test_bf16_adapters_leave_a_full_fine_tune_alone(lr):
    def modified() -> TrainingStep:
        return adamw_program(compute_adapters_in_bf16(gpt2_full("cpu")), lr)

    assert_exact(measure("full_fp32", "cpu", lr, modified))


def test_a_step_rounded_away_is_caught():
    """The check itself: bf16 weights stepped at 5e-6 in place of the fp32 baseline keep few of its moves."""

    def rounded() -> TrainingStep:
        return adamw_program(gpt2_full("cpu").to(torch.bfloat16), 5e-6)

    result = measure("full_fp32", "cpu", 5e-6, rounded)
    assert result.moved_as_before < 0.5
    assert result.update_error > 0.5
    with pytest.raises(AssertionError):
        assert_rounding(result)


@pytest.mark.parametrize("lr", LEARNING_RATES)
def test_vocab_padding_keeps_the_real_rows_training(lr):
    """A from-scratch model's vocabulary padded to a multiple of 64 (a dynamics change: the padded logits join
    the softmax). The padded model is the unmodified one with rows added (``resize_token_embeddings`` keeps the
    rows it has), so the update of the rows both have is compared; every element that moved still moves."""
    vocab = 100  # padded to 128

    def gpt2(size: int) -> TrainingStep:
        model = gpt2_full("cpu")
        model.resize_token_embeddings(vocab)
        if size != vocab:
            model.resize_token_embeddings(size)
        return adamw_program(model, lr)

    generator = torch.Generator().manual_seed(1)
    data = [torch.randint(0, vocab, (2, 16), generator=generator) for _ in range(STEPS)]
    result = update_fidelity(lambda: gpt2(vocab), lambda: gpt2(padded(vocab)), data)
    assert padded(vocab) == 128 and result.elements == sum(p.numel() for p in gpt2(vocab).model.parameters())
    assert result.moved_as_before >= MOVED, result.describe()
    assert 0 < result.update_error < 1, result.describe()  # the normaliser moved, the step did not turn
