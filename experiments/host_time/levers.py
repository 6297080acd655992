"""The example's SFT LoRA workload at the tier-2 head with one host-time lever pulled, to measure a lever's
upper bound before anything becomes a transform. Run inside a copy of the example repository, e.g.

    PERFBOT_LEVER=no-step-metrics python -m benchmarks.profiling --host-time --out o --skip 10 --steps 20 -- \\
        python levers.py --size gpu --max-steps 32

Levers (``PERFBOT_LEVER``, comma-separated):

- ``none``: the workload as it is;
- ``no-step-metrics``: TRL's ``compute_loss`` without its per-step entropy, token-accuracy and token-count reads
  (each an ``.item()``, a device sync between the forward and the backward); the loss is the same;
- ``log-every-10``: ``logging_steps=10`` instead of 1: the Trainer reads the loss and the gradient norm, and
  runs its logging callbacks, every tenth step;
- ``pad-to-budget``: every padding-free packed batch padded to the same token budget (``pad_to_multiple_of`` =
  batch size × max length), so every step has one shape: no per-step dynamic shapes in the compiled layers;
- ``pad-to-max`` (DPO): every preference batch padded to the config's ``max_length`` (``pad_to_multiple_of`` =
  ``max_length``), so every DPO step has one shape, at the cost of computing the padding;
- ``cuda-graphs``: the decoder layers compiled with ``mode="reduce-overhead"`` (CUDA graphs), which needs one
  shape per step (``pad-to-budget``);
- ``compile-decoder``: the whole decoder (the module holding the layers: embedding, layers, final norm)
  compiled as one region instead of each layer: one guard check and one autograd wrapper per step;
- ``cublas``: ``torch.backends.cuda.preferred_blas_library("cublas")``: matmuls through cuBLAS rather than
  cuBLASLt, whose per-call heuristic query costs host time.

``PERFBOT_WORKLOAD=dpo`` runs ``train_dpo.py`` instead of ``train_sft.py`` (the SFT config levers do not apply).
"""

from __future__ import annotations

import os

from experiments.levers import chosen, run_script

LEVERS = {
    "none",
    "no-step-metrics",
    "log-every-10",
    "pad-to-budget",
    "pad-to-max",
    "cuda-graphs",
    "compile-decoder",
    "cublas",
}


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


def main() -> None:
    levers = chosen(LEVERS)
    import trainer

    if "no-step-metrics" in levers:
        trainer.SFTTrainer.compute_loss = loss_only
    if levers & {"log-every-10", "pad-to-budget"}:
        config = trainer.SFTConfig

        def sft_config(**kwargs):
            if "log-every-10" in levers:
                kwargs["logging_steps"] = 10
            if "pad-to-budget" in levers:
                kwargs["pad_to_multiple_of"] = kwargs["per_device_train_batch_size"] * kwargs["max_length"]
            return config(**kwargs)

        trainer.SFTConfig = sft_config
    if "pad-to-max" in levers:
        dpo_config = trainer.DPOConfig

        def padded_dpo_config(**kwargs):
            kwargs["pad_to_multiple_of"] = kwargs["max_length"]
            return dpo_config(**kwargs)

        trainer.DPOConfig = padded_dpo_config
    if "cuda-graphs" in levers:

        def compile_layers(model):
            from _perfbot_compile import repeated_layers

            for block in repeated_layers(model):
                block.compile(mode="reduce-overhead")
            return model

        trainer.compile_repeated_layers = compile_layers
    if "compile-decoder" in levers:

        def compile_decoder(model):
            from _perfbot_compile import repeated_layers

            layers = repeated_layers(model)
            [decoder] = [m for m in model.modules() if any(c is layers[0] for c in getattr(m, "layers", []))]
            decoder.compile()
            return model

        trainer.compile_repeated_layers = compile_decoder
    if "cublas" in levers:
        import torch

        torch.backends.cuda.preferred_blas_library("cublas")
    run_script(f"train_{os.environ.get('PERFBOT_WORKLOAD', 'sft')}.py")


if __name__ == "__main__":
    main()
