"""Why the example's tiny SFT run logs the same loss at steps 1 and 2 once `packing` is applied (issue #52).

Neither a lost update nor a repeated batch by mistake: the 64 tiny examples pack into 2 rows, fewer than a
batch of 8, so every step is one whole epoch of the same tokens; and the cosine schedule warms up over
ceil(0.03 x steps) = 1 step starting from a learning rate of 0, so step 1 leaves the LoRA adapter at its zero
initialisation and step 2 measures the same weights on the same tokens. Step 2 then updates, and step 3's loss
moves. The packed loss is the padded loss of the same examples: packing keeps examples apart.

The example's modules run in a subprocess from the copy's own directory, as in tests/test_example_repo.py.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from git_repos import committed_example

from optimizations.registry import get

pytestmark = pytest.mark.slow

STEPS = 3

# Trains the tiny SFT workload as train_sft.py does, recording per step what the batch held (its tokens, sorted,
# so that the order of examples in the row does not count), the learning rate the optimizer stepped with and
# the LoRA B weights after the step; then the loss of every example padded into one batch at the start weights.
PROBE = """
import hashlib, json, sys
import torch
from transformers import TrainerCallback
import trainer as example
from config import load_config
from data import sft_dataset

steps = int(sys.argv[1])
records, rows = [], []


def lora_b(model):
    return sum(p.abs().sum().item() for name, p in model.named_parameters() if "lora_B" in name)


class Probe(TrainerCallback):
    def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        records[-1]["lr"] = optimizer.param_groups[0]["lr"]

    def on_step_end(self, args, state, control, model=None, **kwargs):
        records[-1]["lora_b"] = lora_b(model)


class Recording(example.SFTTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.add_callback(Probe())
        rows.extend(len(ids) for ids in self.train_dataset["input_ids"])

    def training_step(self, model, inputs, *args, **kwargs):
        tokens = torch.sort(inputs["input_ids"].flatten()).values.numpy().tobytes()
        records.append({"tokens": hashlib.sha256(tokens).hexdigest(), "count": inputs["input_ids"].numel()})
        return super().training_step(model, inputs, *args, **kwargs)


example.SFTTrainer = Recording
training = load_config("training")
run = {"size": "tiny", "seed": 42, "max_steps": steps, "output_dir": "outputs/packed", "training": training}
logged = [entry for entry in example.train_sft(run) if "loss" in entry]
example.SFTTrainer = Recording.__base__
padded = {**training, "packing": False, "per_device_batch_size": len(sft_dataset("tiny"))}
[whole] = [entry for entry in example.train_sft({**run, "max_steps": 1, "output_dir": "outputs/padded",
                                                  "training": padded}) if "loss" in entry]
print(json.dumps({"rows": rows, "steps": [{**r, "loss": e["loss"], "epoch": e["epoch"]}
                                          for r, e in zip(records, logged)], "padded_loss": whole["loss"]}))
"""


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A committed copy of the example with `packing` applied, and what the probe recorded training it."""
    root = tmp_path_factory.mktemp("packing") / "example"
    committed_example(root)
    assert get("packing").apply(root) is not None
    env = {
        **os.environ,
        "PERFBOT_EXAMPLE_CACHE": str(root.parent / "model-cache"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(STEPS)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return root, json.loads(result.stdout.strip().splitlines()[-1])


def test_the_packed_tiny_data_fits_one_batch_so_every_step_is_an_epoch_of_the_same_tokens(packed):
    root, report = packed
    training = yaml.safe_load((root / "configs/training/default.yaml").read_text())
    assert training["packing"] is True
    assert len(report["rows"]) <= training["per_device_batch_size"], report["rows"]
    steps = report["steps"]
    assert [step["count"] for step in steps] == [sum(report["rows"])] * STEPS
    assert len({step["tokens"] for step in steps}) == 1, "each step must hold the whole data set"
    assert [step["epoch"] for step in steps] == [float(n) for n in range(1, STEPS + 1)]


def test_warmup_steps_at_learning_rate_zero_first_so_steps_one_and_two_see_the_same_weights(packed):
    root, report = packed
    training = yaml.safe_load((root / "configs/training/default.yaml").read_text())
    assert 0 < training["warmup_steps"] < 1 and math.ceil(STEPS * training["warmup_steps"]) == 1
    first, second, third = report["steps"]
    assert first["lr"] == 0.0 and first["lora_b"] == 0.0, "step 1 must leave the zero-initialised adapter"
    assert second["lr"] == training["learning_rate"] and second["lora_b"] > 0.0, "step 2 must update"
    assert first["loss"] == pytest.approx(second["loss"], rel=1e-6)
    assert third["loss"] < second["loss"] - 1e-4, "after a real update the loss must move"


def test_packed_rows_score_each_example_as_the_padded_batch_does(packed):
    _, report = packed
    assert report["steps"][0]["loss"] == pytest.approx(report["padded_loss"], rel=1e-6)
