"""The example's SFT LoRA workload with one host-overhead lever pulled, for measuring levers before writing
their transforms. Run inside a copy of the example repository (at the tier-1 head), e.g.

    PERFBOT_LEVER=regional-compile python -m benchmarks.launch --out m.json -- \\
        python levers.py --size gpu --max-steps 30

Levers (``PERFBOT_LEVER``, comma-separated):

- ``none``: the workload as it is;
- ``bf16-adapters``: LoRA adapters kept in the model's bf16 (``get_peft_model(..., autocast_adapter_dtype=False)``)
  instead of PEFT's fp32 upcast, which casts every LoRA layer's input and output;
- ``regional-compile``: ``torch.compile`` on each decoder layer (``layer.compile()``), so one compiled graph
  serves every repeated layer;
- ``cuda-graphs``: the same with ``mode="reduce-overhead"``: each layer's compiled graph replayed as a CUDA
  graph (re-recorded for every new packed length);
- ``liger``: Liger's fused linear cross-entropy on the untouched ``lm_head`` of the LoRA model.
"""

from __future__ import annotations

import functools

from experiments.levers import chosen, run_script

LEVERS = {"none", "bf16-adapters", "regional-compile", "cuda-graphs", "liger"}


def main() -> None:
    levers = chosen(LEVERS)
    import peft
    import trainer

    if "bf16-adapters" in levers:
        trainer.get_peft_model = functools.partial(peft.get_peft_model, autocast_adapter_dtype=False)
    if levers & {"regional-compile", "cuda-graphs", "liger"}:
        wrap = trainer.apply_lora

        def apply_lora(model):
            if "liger" in levers:
                from liger_kernel.transformers import _apply_liger_kernel_to_instance

                _apply_liger_kernel_to_instance(model=model, rope=False, rms_norm=False, swiglu=False)
            wrapped = wrap(model)
            if levers & {"regional-compile", "cuda-graphs"}:
                mode = "reduce-overhead" if "cuda-graphs" in levers else None
                for layer in wrapped.get_base_model().model.layers:
                    layer.compile(mode=mode)
            return wrapped

        trainer.apply_lora = apply_lora
    run_script("train_sft.py")


if __name__ == "__main__":
    main()
