"""The example's SFT LoRA workload at the tier-2 head with one host-time lever pulled, to measure a lever's
upper bound before anything becomes a transform. Run inside a copy of the example repository, e.g.

    PERFBOT_LEVER=no-step-metrics python -m benchmarks.profiling --host-time --out o --skip 10 --steps 20 -- \\
        python levers.py --size gpu --max-steps 32

Levers (``PERFBOT_LEVER``, comma-separated):

- ``none``: the workload as it is;
- ``no-step-metrics``: TRL's ``compute_loss`` without its per-step entropy, token-accuracy and token-count reads
  (each an ``.item()``, a device sync between the forward and the backward); the loss is the same. Under
  ``PERFBOT_WORKLOAD=dpo``, DPO's sigmoid loss against the precomputed reference log-probs without its eleven
  metric reads (rewards, margins, log-probs, logits, entropy, accuracy, tokens);
- ``log-every-10``: ``logging_steps=10`` instead of 1: the Trainer reads the loss and the gradient norm, and
  runs its logging callbacks, every tenth step;
- ``no-compact``: TRL's fused LM head scores every position instead of gathering the labelled ones
  (``hidden_states[mask]``, a device sync between the decoder and the loss: its size depends on the data);
  the padding and prompt positions are scored and then zeroed, so the loss is the same;
- ``no-nan-filter``: ``logging_nan_inf_filter=False``: the Trainer no longer reads each step's loss to keep a
  NaN or inf out of the logged mean (``torch.isnan(loss) or torch.isinf(loss)``, a device sync after the
  backward); training is the same, only a non-finite loss would be logged as it is;
- ``pad-to-budget``: every padding-free packed batch padded to the same token budget (``pad_to_multiple_of`` =
  batch size × max length), so every step has one shape: no per-step dynamic shapes in the compiled layers;
- ``pad-to-max`` (DPO): every preference batch padded to the config's ``max_length`` (``pad_to_multiple_of`` =
  ``max_length``), so every DPO step has one shape, at the cost of computing the padding;
- ``pad-to-bucket`` (DPO): every preference batch padded to a multiple of 128 tokens, so DPO steps have at
  most ``max_length / 128`` shapes, at the cost of under 128 padded positions a row;
- ``cuda-graphs``: the decoder layers compiled with ``mode="reduce-overhead"`` (CUDA graphs), which needs one
  shape per step (``pad-to-budget``);
- ``compile-decoder``: the whole decoder (the module holding the layers: embedding, layers, final norm)
  compiled as one region instead of each layer: one guard check and one autograd wrapper per step (an SFT
  config's token budget fixed first, as the head's ``compile_repeated_layers`` does);
- ``graph-decoder``: ``compile-decoder`` with ``mode="reduce-overhead"``: the decoder's forward and backward
  each replayed as one CUDA graph per shape, which needs few shapes (the SFT token budget, or a DPO pad lever);
- ``flat-graphs``: with ``graph-decoder``, inductor's CUDA graphs without trees
  (``torch._inductor.config.triton.cudagraph_trees = False``): each compiled graph records once into a pool of
  its own, with static inputs and outputs, and has none of the trees' liveness checks (pytorch#194124); with
  AOTAutograd's donated buffers on, as here, each new shape's first step gets wrong gradients (step times only:
  the shipped ``decoder_graphs`` turns them off);
- ``train-graphs-only``: with ``compile-decoder`` or ``graph-decoder``, the compiled decoder runs only where
  gradients are on; under ``no_grad`` (DPO's reference pass, evaluation) the decoder runs eagerly, so no graph is
  compiled or recorded there (``flat-graphs`` crashed DPO's no-grad reference pass in Dynamo's grad-mode check);
- ``cublas``: ``torch.backends.cuda.preferred_blas_library("cublas")``: matmuls through cuBLAS rather than
  cuBLASLt, whose per-call heuristic query costs host time.
- ``cpp-wrapper``: inductor's C++ wrapper (``torch._inductor.config.cpp_wrapper = True``): every compiled
  graph launches its kernels from generated C++ instead of generated Python, the same kernels with less host
  time per launch (a C++ compilation per graph at start-up);
- ``sdpa``: attention through SDPA instead of the picker's choice (``PERFBOT_ATTENTION=sdpa``): no block
  mask built per batch, as FlexAttention builds one;
- ``no-prologue-fusion``: inductor's prologue fusion off (``torch._inductor.config.prologue_fusion = False``):
  pointwise work before a template kernel (RoPE before FlexAttention's) runs as a kernel of its own instead of
  inside the template's loads, where each block of the template may compute it again.
- ``no-size-asserts``: inductor's size asserts off (``torch._inductor.config.size_asserts = False``): a graph
  without trees then replays without checking each static input's address and each input's size and stride in
  Python, as it does with them on for every input at every replay;
- ``cached-clip-params``: Accelerate's ``clip_grad_norm_``, given a model's ``parameters()`` generator (as the
  Trainer passes it every step), clips that model's trainable parameters from a list made once instead of
  walking every module each step (upper bound: a parameter added or replaced later would not be clipped);
- ``packed-pairs`` (DPO): the shipped helper given the DPO config and ``cuda_graphs=True``
  (``compile_repeated_layers(model, fixed_budget=dpo_config, cuda_graphs=True)``): each step's chosen and
  rejected sequences packed into one row of batch × max length tokens, the decoder compiled whole and replayed
  as CUDA graphs (measured before ``packed_pairs`` shipped; a head with its commit packs already).

``PERFBOT_WORKLOAD=dpo`` runs ``train_dpo.py`` instead of ``train_sft.py`` (the SFT config levers do not apply).
"""

from __future__ import annotations

import os

from experiments.levers import chosen, run_script

LEVERS = {
    "none",
    "no-step-metrics",
    "no-compact",
    "no-nan-filter",
    "log-every-10",
    "pad-to-budget",
    "pad-to-max",
    "pad-to-bucket",
    "cuda-graphs",
    "compile-decoder",
    "graph-decoder",
    "flat-graphs",
    "train-graphs-only",
    "cublas",
    "cpp-wrapper",
    "sdpa",
    "no-prologue-fusion",
    "packed-pairs",
    "no-size-asserts",
    "cached-clip-params",
}
CONFIGS: list = []  # the configs the workload built, latest last


def loss_only(self, model, inputs, return_outputs=False, num_items_in_batch=None):
    """TRL 1.16's SFT loss on its default path (fused LM head, NLL), with no metric read."""
    import torch

    inputs["use_cache"] = False
    outputs = model(**inputs, fused_lm_head=True)
    num_tokens = outputs.label_mask.sum() if num_items_in_batch is None else num_items_in_batch
    loss = (-outputs.log_probs).sum() / torch.as_tensor(num_tokens).clamp(min=1)
    if self.args.average_tokens_across_devices and num_items_in_batch is not None:
        loss = loss * self.accelerator.num_processes
    return (loss, outputs) if return_outputs else loss


def dpo_loss_only(self, model, inputs, return_outputs=False):
    """TRL 1.16's sigmoid DPO loss against precomputed reference log-probs (its default path), with no metric
    read."""
    import torch.nn.functional as F

    unused = {"completion_mask", "ref_chosen_logps", "ref_rejected_logps"}
    model_kwargs = {key: value for key, value in inputs.items() if key not in unused}
    model_kwargs["use_cache"] = False
    completion_mask = inputs["completion_mask"]
    labels = inputs["input_ids"].masked_fill(completion_mask == 0, -100)
    outputs = model(**model_kwargs, labels=labels, fused_lm_head=True)
    logps = outputs.log_probs[:, -(completion_mask.size(1) - 1) :].sum(dim=1)
    chosen, rejected = logps.chunk(2, dim=0)
    delta = (chosen - inputs["ref_chosen_logps"]) - (rejected - inputs["ref_rejected_logps"])
    loss = -F.logsigmoid(self.beta * delta).mean()
    return (loss, outputs) if return_outputs else loss


def cache_clipped_parameters() -> None:
    """Accelerate's ``clip_grad_norm_`` with a model's ``parameters()`` generator clips a list of that model's
    trainable parameters made at its first call (the ``cached-clip-params`` lever)."""
    import inspect

    import accelerate

    clip = accelerate.Accelerator.clip_grad_norm_
    trainable: dict[int, list] = {}

    def cached(self, parameters, max_norm, norm_type=2):
        frame = parameters.gi_frame if inspect.isgenerator(parameters) else None
        model = (
            frame.f_locals.get("self")
            if frame is not None and parameters.gi_code.co_name == "parameters"
            else None
        )
        if model is not None:
            if id(model) not in trainable:
                trainable[id(model)] = [p for p in model.parameters() if p.requires_grad]
            parameters = trainable[id(model)]
        return clip(self, parameters, max_norm, norm_type)

    accelerate.Accelerator.clip_grad_norm_ = cached


def configured(config_class, levers: set[str]):
    """``config_class`` with the config levers among ``levers`` applied to its keyword arguments."""

    def config(**kwargs):
        if "log-every-10" in levers:
            kwargs["logging_steps"] = 10
        if "no-nan-filter" in levers:
            kwargs["logging_nan_inf_filter"] = False
        if "pad-to-budget" in levers:
            kwargs["pad_to_multiple_of"] = kwargs["per_device_train_batch_size"] * kwargs["max_length"]
        if "pad-to-max" in levers:
            kwargs["pad_to_multiple_of"] = kwargs["max_length"]
        if "pad-to-bucket" in levers:
            kwargs["pad_to_multiple_of"] = 128
        CONFIGS.append(config_class(**kwargs))
        return CONFIGS[-1]

    return config


def main() -> None:
    levers = chosen(LEVERS)
    import trainer

    if "no-step-metrics" in levers:
        trainer.SFTTrainer.compute_loss = loss_only
        trainer.DPOTrainer._compute_loss = dpo_loss_only
    if "no-compact" in levers:
        import trl.trainer.utils

        trl.trainer.utils._use_triton = lambda device: False
    for name in ("SFTConfig", "DPOConfig"):
        setattr(trainer, name, configured(getattr(trainer, name), levers))
    if "cuda-graphs" in levers:

        def compile_layers(model, fixed_budget=None):
            from _perfbot_compile import repeated_layers

            for block in repeated_layers(model):
                block.compile(mode="reduce-overhead")
            return model

        trainer.compile_repeated_layers = compile_layers
    if levers & {"compile-decoder", "graph-decoder"}:

        def compile_decoder(model, fixed_budget=None):
            from _perfbot_compile import _holder, fix_token_budget, repeated_layers

            if fixed_budget is not None:
                fix_token_budget(fixed_budget)
            mode = "reduce-overhead" if "graph-decoder" in levers else None
            decoder = _holder(model, repeated_layers(model))
            if "train-graphs-only" in levers:
                import torch

                eager = decoder.forward
                compiled = torch.compile(eager, mode=mode)
                decoder.forward = lambda *args, **kwargs: (compiled if torch.is_grad_enabled() else eager)(
                    *args, **kwargs
                )
            else:
                decoder.compile(mode=mode)
            return model

        trainer.compile_repeated_layers = compile_decoder
    if "packed-pairs" in levers:
        from _perfbot_compile import compile_repeated_layers as shipped

        trainer.compile_repeated_layers = lambda model, **_: shipped(
            model, fixed_budget=CONFIGS[-1], cuda_graphs=True
        )
    if "flat-graphs" in levers:
        import torch._inductor.config

        torch._inductor.config.triton.cudagraph_trees = False
    if "cublas" in levers:
        import torch

        torch.backends.cuda.preferred_blas_library("cublas")
    if "cpp-wrapper" in levers:
        import torch._inductor.config

        torch._inductor.config.cpp_wrapper = True
    if "sdpa" in levers:
        os.environ["PERFBOT_ATTENTION"] = "sdpa"
    if "no-size-asserts" in levers:
        import torch._inductor.config

        torch._inductor.config.size_asserts = False
    if "cached-clip-params" in levers:
        cache_clipped_parameters()
    if "no-prologue-fusion" in levers:
        import torch._inductor.config

        torch._inductor.config.prologue_fusion = False
    run_script(f"train_{os.environ.get('PERFBOT_WORKLOAD', 'sft')}.py")


if __name__ == "__main__":
    main()
