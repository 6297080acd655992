"""The programs of the corpus, pinned, and what a maintainer would do in each for every optimization, found by
reading the main scripts by hand (an optimization left out: no site expected)."""

from __future__ import annotations

from experiments.corpus.corpus import Expect, Program

TRL_SCRIPTS = ("sft.py", "dpo.py", "grpo.py", "kto.py", "reward.py", "rloo.py", "distillation.py")
TORCHTUNE_CONFIGS = ("configs/llama3_2/*.yaml",)

PROGRAMS: tuple[Program, ...] = (
    Program(
        name="trl scripts",
        requirement="trl==1.16.0",
        root="trl/scripts",
        include=("*.py",),
        expected={
            "fa2": Expect(
                "change", TRL_SCRIPTS, "`model_init_kwargs = dict(attn_implementation=...)` in each"
            ),
            "packing": Expect(
                "refuse",
                ("sft.py",),
                "`TrlParser` fills SFTConfig from flags, no recipe here: `--packing true` at launch",
            ),
            "dataloader_workers": Expect(
                "refuse", TRL_SCRIPTS, "`TrlParser` flags: `--dataloader_num_workers` at launch"
            ),
            "dpo_precompute": Expect(
                "refuse",
                ("dpo.py",),
                "`--precompute_ref_log_probs true` at launch "
                "(`dataset_streaming` is false unless a flag sets it)",
            ),
            "bf16_adapters": Expect("change", TRL_SCRIPTS, "after each trainer given `peft_config`"),
            "regional_compile": Expect("change", TRL_SCRIPTS, "`trainer.model` after each trainer is built"),
        },
    ),
    Program(
        name="torchtune recipes",
        requirement="torchtune==0.6.1",
        root="recipes",
        include=("*.py", "dev/*.py", "configs/llama3_2/*.yaml"),
        expected={
            "packing": Expect("change", TORCHTUNE_CONFIGS, "`dataset: packed: False` in the recipe YAMLs"),
            "compile_model": Expect(
                "change",
                TORCHTUNE_CONFIGS,
                "`compile: False` in the recipe YAMLs (the recipes compile per layer when it is true)",
            ),
            "dataloader_workers": Expect(
                "change",
                ("full_finetune_single_device.py", "lora_finetune_single_device.py"),
                "`StatefulDataLoader(...)` in `_setup_data`: no `num_workers`, no `pin_memory`",
            ),
            "bf16_autocast": Expect(
                "already", TORCHTUNE_CONFIGS, "`dtype: bf16`: parameters and activations already bf16"
            ),
            "fused_adamw": Expect(
                "already",
                ("configs/llama3_2/*lora*.yaml",),
                "`optimizer: _component_: torch.optim.AdamW` with `fused: True` in every LoRA YAML (corrected "
                "2026-11-27: the first reading said it was missing)",
            ),
        },
    ),
    Program(
        name="litgpt",
        requirement="litgpt==0.5.13",
        root="",
        include=("litgpt/*.py", "litgpt/*/*.py"),
        expected={
            "bf16_autocast": Expect(
                "already",
                ("litgpt/finetune/*.py", "litgpt/pretrain.py"),
                "`precision=get_default_supported_precision(training=True)`: bf16 on Fabric",
            ),
            "compile_model": Expect(
                "change",
                ("litgpt/finetune/*.py",),
                "finetune scripts never compile: "
                "`torch.compile(model)` before `fabric.setup` as pretrain.py does",
            ),
            "dataloader_workers": Expect(
                "change",
                ("litgpt/data/*.py",),
                "`DataLoader(num_workers=self.num_workers)` (default 4): only `pin_memory` is missing",
            ),
            "fused_adamw": Expect(
                "change",
                ("litgpt/finetune/*.py",),
                "`instantiate_torch_optimizer(optimizer, ...)`: pass `fused` as pretrain.py:216 does",
            ),
            "sdpa": Expect(
                "already", ("litgpt/model.py",), "`F.scaled_dot_product_attention` in `CausalSelfAttention`"
            ),
            "tf32": Expect(
                "already",
                ("litgpt/__main__.py",),
                '`torch.set_float32_matmul_precision("high")` in the CLI entry point',
            ),
            "vocab_padding": Expect(
                "already", ("litgpt/config.py",), "`padded_vocab_size` (padding_multiple)"
            ),
        },
    ),
    Program(
        name="llama-cookbook finetuning",
        requirement="llama-cookbook==0.0.5.post1",
        root="",
        include=("llama_cookbook/*.py", "llama_cookbook/*/*.py", "llama_cookbook/*/*/*.py"),
        expected={
            "dataloader_workers": Expect(
                "change",
                ("llama_cookbook/configs/training.py",),
                "`num_workers_dataloader: int=1` in `train_config`",
            ),
            "fa2": Expect(
                "change",
                ("llama_cookbook/configs/training.py", "llama_cookbook/finetuning.py"),
                "`use_fast_kernels: bool = False`, read by `from_pretrained(attn_implementation="
                '"sdpa" if ... else None)`',
            ),
            "packing": Expect(
                "already", ("llama_cookbook/configs/training.py",), '`batching_strategy: str="packing"`'
            ),
            "bf16_autocast": Expect(
                "change",
                ("llama_cookbook/utils/train_utils.py",),
                "`autocast = torch.cuda.amp.autocast if use_fp16 else nullcontext`: the "
                "non-FSDP default runs in fp32 (the GradScaler is only made for fp16)",
            ),
            "compile_model": Expect(
                "change",
                ("llama_cookbook/finetuning.py", "llama_cookbook/utils/train_utils.py"),
                "the model built in `main()` before it is wrapped",
            ),
            "fused_adamw": Expect(
                "change", ("llama_cookbook/finetuning.py",), "`optim.AdamW(...)` in `main()`"
            ),
            "tf32": Expect(
                "change",
                ("llama_cookbook/finetuning.py", "llama_cookbook/utils/train_utils.py"),
                "nothing sets it; at the start of `main()`",
            ),
            "bf16_adapters": Expect("change", ("llama_cookbook/finetuning.py",), "`get_peft_model(...)`"),
            "sync_free_logging": Expect(
                "change",
                ("llama_cookbook/utils/train_utils.py",),
                "`loss.detach().float()` accumulated each step in `train()`",
            ),
        },
    ),
    Program(
        name="torchtitan trainer",
        requirement="torchtitan==0.3.0",
        root="",
        include=(
            "torchtitan/*.py",
            "torchtitan/components/*.py",
            "torchtitan/components/optimizer/*.py",
            "torchtitan/config/*.py",
            "torchtitan/models/*.py",
            "torchtitan/models/llama3/*.py",
            "torchtitan/models/common/*.py",
            "torchtitan/hf_datasets/*.py",
            "torchtitan/tools/*.py",
        ),
        expected={
            "compile_model": Expect(
                "change", ("torchtitan/config/configs.py",), "`Compile.enable: bool = False`"
            ),
            "dataloader_workers": Expect(
                "change",
                ("torchtitan/components/dataloader.py",),
                "`num_workers: int = 0`, `pin_memory: bool = False` in the loader config",
            ),
            "bf16_autocast": Expect(
                "already",
                ("torchtitan/config/configs.py",),
                '`mixed_precision_param = "bfloat16"` (FSDP mixed precision)',
            ),
            "fused_adamw": Expect(
                "already",
                ("torchtitan/components/optimizer/optimizer.py",),
                '`implementation = "fused"` by default',
            ),
            "sdpa": Expect(
                "already",
                ("torchtitan/models/common/attention.py",),
                "`F.scaled_dot_product_attention` / FlexAttention",
            ),
        },
    ),
)
