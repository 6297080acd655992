"""Is merging gradient-accumulation micro-batches into one larger micro-batch (the global batch unchanged) a
change of speed only? Issue #29 names it as a host-time lever, "dynamics-free when the loss is normalised per
token; check it". This checks it with TRL's own trainers on the example's tiny model, on the CPU:

    python -m experiments.micro_batch.merge_check [--steps 4]

Each row trains the example's LoRA adapter for ``--steps`` optimizer steps from the same seed and weights, on
the same examples in the same order, with ``per_device_train_batch_size × gradient_accumulation_steps`` fixed
(SFT 8, DPO 4), and compares its adapter update with the unmerged run's: ``||Δ - Δ_ref|| / ||Δ_ref||``.
The variants: float32 (the arithmetic), then bf16 autocast (TRL's configs default to it, and the example trains
so on a GPU), then the example's LoRA dropout of 0.05 (the two runs draw different masks). The control rows
turn off the per-token normalisation across micro-batches that transformers' Trainer does
(``num_items_in_batch``): each micro-batch's own mean is then averaged, which a merge would change.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import sys
import tempfile
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from transformers import set_seed
from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trainer_repo"
SFT_GLOBAL, DPO_GLOBAL = 8, 4
# (bf16 autocast, optimizer, LoRA dropout): the arithmetic in fp32 first, then as the example trains on a GPU.
VARIANTS = (
    (False, "sgd", 0.0),
    (False, "adamw_torch", 0.0),
    (True, "sgd", 0.0),
    (True, "adamw_torch", 0.0),
    (True, "adamw_torch", 0.05),
)


def _adapter(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().double().clone() for n, p in model.named_parameters() if p.requires_grad}


def train(
    workload: str, micro: int, steps: int, dropout: float, optim: str, bf16: bool, per_token: bool = True
) -> dict:
    """The adapter's update after ``steps`` optimizer steps of micro-batches of ``micro`` examples."""
    data, model_loading = (importlib.import_module(name) for name in ("data", "model_loading"))
    set_seed(0)
    tokenizer = model_loading.load_tokenizer("tiny")
    model = model_loading.load_model("tiny", dtype=torch.float32)
    lora = LoraConfig(
        r=16, lora_alpha=32, lora_dropout=dropout, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]
    )
    model = get_peft_model(model, lora)
    before = _adapter(model)
    total = SFT_GLOBAL if workload == "sft" else DPO_GLOBAL
    output = tempfile.TemporaryDirectory()
    common = dict(
        output_dir=output.name,
        max_steps=steps,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=total // micro,
        learning_rate=2e-4,
        lr_scheduler_type="constant",
        max_length=64,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        use_cpu=True,
        optim=optim,
        bf16=bf16,
    )
    if workload == "sft":
        config = SFTConfig(**common, packing=False)
        trainer = SFTTrainer(
            model=model, args=config, train_dataset=data.sft_dataset("tiny"), processing_class=tokenizer
        )
    else:
        config = DPOConfig(**common, beta=0.1)
        trainer = DPOTrainer(
            model=model, args=config, train_dataset=data.dpo_dataset("tiny"), processing_class=tokenizer
        )
    if not per_token:
        trainer.model_accepts_loss_kwargs = False  # the Trainer then averages each micro-batch's own mean
    with output, contextlib.redirect_stdout(io.StringIO()):
        trainer.train()
    after = _adapter(model)
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return {"update": {n: after[n] - before[n] for n in before}, "losses": losses}


def relative_error(update: dict, reference: dict) -> float:
    """``||Δ - Δ_ref|| / ||Δ_ref||`` over every adapter weight."""
    difference = torch.cat([(update[n] - reference[n]).flatten() for n in reference])
    return float(difference.norm() / torch.cat([r.flatten() for r in reference.values()]).norm())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    sys.path.insert(0, str(EXAMPLE))
    os.environ.setdefault("PERFBOT_EXAMPLE_CACHE", str(Path(tempfile.gettempdir()) / "perfbot-example-cache"))
    rows = []
    for workload, unmerged, merged in (("sft", (1, 2), (8, 4)), ("dpo", (1, 2), (4, 2))):
        for bf16, optim, dropout in VARIANTS:
            for small in unmerged:
                reference = train(workload, small, args.steps, dropout, optim, bf16)
                for large in merged:
                    if large != small:
                        run = train(workload, large, args.steps, dropout, optim, bf16)
                        rows.append(
                            (workload, bf16, optim, dropout, small, large, "per token", reference, run)
                        )
    for bf16, optim, dropout in VARIANTS[:3]:
        reference = train("sft", 2, args.steps, dropout, optim, bf16, per_token=False)
        run = train("sft", 8, args.steps, dropout, optim, bf16)
        rows.append(("sft", bf16, optim, dropout, 2, 8, "per micro-batch (control)", reference, run))
    print(
        "| workload | precision | optimizer | LoRA dropout | micro-batch × accumulation: unmerged → merged "
        "| unmerged loss normalised | update error | last loss (unmerged, merged) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for workload, bf16, optim, dropout, small, large, normalised, reference, run in rows:
        total = SFT_GLOBAL if workload == "sft" else DPO_GLOBAL
        error = relative_error(run["update"], reference["update"])
        precision = "bf16 autocast" if bf16 else "fp32"
        shapes = f"{small} × {total // small} → {large} × {total // large}"
        losses = f"{reference['losses'][-1]:.6f}, {run['losses'][-1]:.6f}"
        print(
            f"| {workload} | {precision} | {optim} | {dropout} | {shapes} | {normalised} | {error:.2e} | {losses} |"
        )


if __name__ == "__main__":
    main()
