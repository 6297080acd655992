"""The in-process launch wrapper and its meter, over tiny training programs written to a temporary folder.

The programs run unmodified in a subprocess under ``python -m benchmarks.launch``; each test knows exactly what
data the program fed, so token and sequence counts are checked against numbers computed here.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
import torch

from benchmarks.counting import count_batch, model_flops_per_token
from benchmarks.environment import PEAK_TFLOPS_ENV, peak_tflops
from benchmarks.launch import PLANT_FILE, CommandError, PythonProgram, main, parse_command, run_program
from benchmarks.metrics import Meter
from benchmarks.steps import PHASES, median_rate, percentile

REPO_ROOT = Path(__file__).resolve().parents[1]

# A tiny TRL SFT run: WordLevel tokenizer whose pad token is its EOS, a 2-layer Qwen2 with random weights, and a
# pre-tokenized dataset of the given lengths (each row ends with EOS). argv: mode lengths-json steps-file.
SFT_PROGRAM = """
import json, sys
import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from trl import SFTConfig, SFTTrainer

mode, lengths, steps_file = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
vocab = {"<eos>": 0, **{f"w{i}": i + 1 for i in range(40)}}
backend = Tokenizer(models.WordLevel(vocab, unk_token="<eos>"))
backend.pre_tokenizer = pre_tokenizers.Whitespace()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>", pad_token="<eos>")
torch.manual_seed(0)
config = Qwen2Config(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                     pad_token_id=0, eos_token_id=0, bos_token_id=0)
rows = [[1 + (7 * i + j) % 40 for j in range(n - 1)] + [0] for i, n in enumerate(lengths)]
packed = mode == "packed"
args = SFTConfig(output_dir="out", num_train_epochs=1, per_device_train_batch_size=4, learning_rate=1e-3,
                 max_length=32, packing=packed, pad_to_multiple_of=8 if packed else None, report_to="none",
                 save_strategy="no", use_cpu=True, disable_tqdm=True, seed=0)
trainer = SFTTrainer(model=Qwen2ForCausalLM(config), args=args, processing_class=tokenizer,
                     train_dataset=Dataset.from_dict({"input_ids": rows}))
trainer.train()
open(steps_file, "w").write(str(trainer.state.global_step))
"""

# A hand-written loop: right-padded batches with attention masks, a parameter-free loss module called on its own
# (it must not count as the model), and two micro-batches per optimizer step. argv: batches-json.
LOOP_PROGRAM = """
import json, sys
import torch
from torch import nn

class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.head = nn.Linear(16, 50)

    def forward(self, input_ids, attention_mask=None):
        return self.head(torch.tanh(self.embed(input_ids)))

torch.manual_seed(0)
model = TinyLM()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
loss_fn = nn.CrossEntropyLoss(ignore_index=-100)
for index, lengths in enumerate(json.loads(sys.argv[1])):
    width = max(lengths)
    mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
    input_ids = torch.randint(1, 50, mask.shape) * mask
    logits = model(input_ids, attention_mask=mask)
    loss = loss_fn(logits.flatten(0, 1), input_ids.masked_fill(mask == 0, -100).flatten()) / 2
    loss.backward()
    if index % 2 == 1:
        optimizer.step()
        optimizer.zero_grad()
"""

# The explicit step API: each step declares its tokens (as a tensor, read after the run) and samples.
EXPLICIT_PROGRAM = """
import torch
from benchmarks.metrics import step_metrics

model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    with step_metrics(tokens=torch.tensor(100 + step), samples=3):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
"""

# A loop whose every step sleeps 20 ms; argv: steps.
SLEEPY_PROGRAM = """
import sys, time
import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(int(sys.argv[1])):
    model(torch.randn(2, 4)).sum().backward()
    time.sleep(0.02)
    optimizer.step()
    optimizer.zero_grad()
"""

CRASH_PROGRAM = """
import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    if step == 3:
        raise ValueError("diverged at step 3")
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def launch(
    tmp_path: Path, program: str, *args: str, warmup: int = 1, options: tuple[str, ...] = ()
) -> tuple[subprocess.CompletedProcess, dict]:
    """Run ``program`` under the launch wrapper in a subprocess; returns the process and its metrics JSON."""
    script = tmp_path / "program.py"
    script.write_text(program)
    out = tmp_path / "metrics.json"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    command = [
        sys.executable,
        "-m",
        "benchmarks.launch",
        "--out",
        str(out),
        "--warmup-steps",
        str(warmup),
        *options,
    ]
    completed = subprocess.run(
        [*command, "--", "python", str(script), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return completed, json.loads(out.read_text())


def assert_consistent_shares(metrics: dict) -> None:
    assert metrics["status"] == "ok"
    assert set(metrics["phases"]) == set(PHASES)
    assert sum(phase["share"] for phase in metrics["phases"].values()) == pytest.approx(1.0, abs=1e-6)
    phase_mean_s = sum(phase["mean_ms"] for phase in metrics["phases"].values()) / 1000
    assert metrics["step_time_s"]["mean"] == pytest.approx(phase_mean_s, rel=1e-6)
    assert metrics["tokens_per_s"] > 0 and metrics["samples_per_s"] > 0  # medians of per-step rates
    assert 0.0 <= metrics["host_load_others"] <= 1.0
    seen = [entry["tokens_seen"] for entry in metrics["loss"]]
    assert all(later > earlier for earlier, later in zip(seen, seen[1:], strict=False))
    assert all(math.isfinite(entry["loss"]) for entry in metrics["loss"])
    assert metrics["timing"] == "host_clock" and metrics["peak_memory_bytes"] is None
    assert metrics["env"]["torch"] == torch.__version__


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["padded", "packed"])
def test_trl_sft_trainer_is_measured_with_exact_token_counts(tmp_path: Path, mode: str) -> None:
    lengths = [5, 9, 3, 12, 7, 4, 8, 6, 10, 2, 11, 5, 3, 9, 7, 6, 4, 8, 13, 5]
    warmup = 1 if mode == "padded" else 0
    completed, metrics = launch(tmp_path, SFT_PROGRAM, mode, json.dumps(lengths), "steps.txt", warmup=warmup)
    assert completed.returncode == 0, completed.stderr[-3000:]
    total_steps = int((tmp_path / "steps.txt").read_text())
    assert metrics["steps_measured"] == total_steps - warmup
    assert [entry["step"] for entry in metrics["loss"]] == list(range(total_steps))
    assert metrics["loss"][-1]["tokens_seen"] == sum(lengths)  # every non-padding token, once
    warmup_tokens = metrics["loss"][warmup - 1]["tokens_seen"] if warmup else 0
    assert metrics["tokens"] == sum(lengths) - warmup_tokens
    if mode == "padded":  # batches of 4 rows; the warm-up step took the first 4
        assert total_steps == len(lengths) // 4
        assert metrics["samples"] == len(lengths) - 4
    else:  # packed rows, each sequence counted once from its position_ids restart; the pad-to-8 tail is not
        assert total_steps < len(lengths) // 4
        assert metrics["samples"] == len(lengths)
    assert metrics["model_params"] == metrics["trainable_params"] > 0
    assert metrics["flops_per_token"] > 6 * 32 * 32  # at least one full-rank hidden projection
    assert_consistent_shares(metrics)


def test_hand_written_loop_with_accumulation_counts_masked_tokens(tmp_path: Path) -> None:
    micro_batches = [[5, 3], [7, 7], [2, 6], [4, 1], [6, 6], [3, 2], [8, 1], [2, 2]]
    completed, metrics = launch(tmp_path, LOOP_PROGRAM, json.dumps(micro_batches), warmup=1)
    assert completed.returncode == 0, completed.stderr[-3000:]
    per_step = [sum(micro_batches[i]) + sum(micro_batches[i + 1]) for i in range(0, len(micro_batches), 2)]
    assert metrics["steps_measured"] == len(per_step) - 1
    assert [entry["step"] for entry in metrics["loss"]] == list(range(len(per_step)))
    assert [entry["tokens_seen"] for entry in metrics["loss"]] == numpy.cumsum(per_step).tolist()
    assert metrics["tokens"] == sum(per_step[1:])
    assert metrics["samples"] == 2 * 2 * (len(per_step) - 1)
    # The loss of a step is the sum of its micro-batch losses (each already divided by the accumulation).
    assert all(1.0 < entry["loss"] < 2 * math.log(50) for entry in metrics["loss"])
    assert metrics["model_params"] == 50 * 16 + 16 * 50 + 50
    assert metrics["flops_per_token"] == 6 * 16 * 50
    assert_consistent_shares(metrics)


ENDLESS_PROGRAM = """
import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
try:
    for step in range(100_000):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
except Exception:  # a program's own handler does not swallow the launcher's stop
    pass
open("saved.txt", "w").write("the program went on after training")
"""


def test_the_launcher_ends_a_program_after_the_steps_asked_for(tmp_path: Path) -> None:
    completed, metrics = launch(tmp_path, ENDLESS_PROGRAM, warmup=2, options=("--stop-after-steps", "5"))

    assert completed.returncode == 0, completed.stderr[-3000:]
    assert metrics["status"] == "ok"
    assert metrics["steps_measured"] == 3
    assert [entry["step"] for entry in metrics["loss"]] == list(range(5))
    assert not (tmp_path / "saved.txt").exists()


def test_explicit_step_api_uses_the_declared_counts(tmp_path: Path) -> None:
    completed, metrics = launch(tmp_path, EXPLICIT_PROGRAM, warmup=2)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert metrics["steps_measured"] == 3
    assert metrics["tokens"] == 102 + 103 + 104
    assert metrics["samples"] == 9
    assert [entry["tokens_seen"] for entry in metrics["loss"]] == [100, 201, 303, 406, 510]
    assert_consistent_shares(metrics)


def test_a_plant_file_slows_every_step_by_its_fraction(tmp_path: Path) -> None:
    (tmp_path / PLANT_FILE).write_text('{"slowdown": 0.5}')
    completed, metrics = launch(tmp_path, SLEEPY_PROGRAM, "12", warmup=2)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert metrics["planted_slowdown"] == 0.5
    # each measured step sleeps 20 ms and then waits half of the step before it: never under 30 ms
    assert metrics["step_time_s"]["median"] >= 0.030
    # and it says how much it actually waited: at least what was asked, more only where the host preempted it
    assert 0.5 <= metrics["planted_waited"] < 1.5
    (tmp_path / PLANT_FILE).write_text('{"slowdown": "lots"}')
    completed, _ = launch(tmp_path, SLEEPY_PROGRAM, "3", warmup=1)
    assert completed.returncode == 2 and "'slowdown' must be a fraction" in completed.stderr


def test_throughput_is_the_median_of_per_step_rates() -> None:
    # rates 1000, 2000 and 30 tokens/s: a 1-second straggler moves the median no more than any step would,
    # where the whole window (60 tokens in 1.02 s) would read 59 tokens/s
    assert median_rate([10, 20, 30], [10.0, 10.0, 1000.0]) == 1000.0
    assert median_rate([10, None, 30], [10.0, 10.0, 0.0]) == 1000.0  # steps without count or time left out
    assert median_rate([None], [5.0]) is None


def test_crashing_program_still_writes_its_metrics(tmp_path: Path) -> None:
    completed, metrics = launch(tmp_path, CRASH_PROGRAM, warmup=1)
    assert completed.returncode != 0
    assert "diverged at step 3" in completed.stderr
    assert metrics["status"] == "crashed"
    assert metrics["error"] == "ValueError: diverged at step 3"
    assert [entry["step"] for entry in metrics["loss"]] == [0, 1, 2]
    assert metrics["steps_measured"] == 2


def test_out_of_memory_is_reported_as_oom(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    script = tmp_path / "oom.py"
    script.write_text(
        "import torch\nraise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2 GiB')\n"
    )
    status, error, code = run_program(PythonProgram(str(script), False, ()), Meter())
    assert (status, code) == ("oom", 1)
    assert error.startswith("OutOfMemoryError: CUDA out of memory")


# A program that picks its task's module at run time, reads its config, runs a recipe by path and writes a
# log; argv: task.
TASK_PROGRAM = """
import importlib, os, runpy, sys

task = sys.argv[1]
importlib.import_module(f"tasks.{task}")
open(os.path.join("configs", f"{task}.yaml")).read()
runpy.run_path("recipes/common.py")
exec(compile("VALUE = 2", "generated.py", "exec"))  # code from no file
os.close(os.open("tasks", os.O_RDONLY))  # a directory
os.makedirs("out", exist_ok=True)
open("out/log.txt", "w").write(task)
"""


def test_the_record_lists_the_files_the_run_executed_or_read(tmp_path: Path) -> None:
    for path in ("tasks/__init__.py", "tasks/sft.py", "tasks/dpo.py", "recipes/common.py"):
        (tmp_path / path).parent.mkdir(exist_ok=True)
        (tmp_path / path).write_text("VALUE = 1\n")
    for task in ("sft", "dpo"):
        (tmp_path / "configs").mkdir(exist_ok=True)
        (tmp_path / "configs" / f"{task}.yaml").write_text("beta: 0.1\n")
    completed, metrics = launch(tmp_path, TASK_PROGRAM, "sft")
    assert completed.returncode == 0, completed.stderr[-3000:]
    # the DPO module and config exist beside it but never ran; the log it wrote is no input, the wrapper's own
    # modules and the installed packages are outside the repository
    assert metrics["files_loaded"] == [
        "configs/sft.yaml",
        "program.py",
        "recipes/common.py",
        "tasks/__init__.py",
        "tasks/sft.py",
    ]


def test_non_python_commands_are_rejected(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "metrics.json"
    assert main(["--out", str(out), "--", "bash", "train.sh"]) == 2
    assert "not a Python interpreter" in capsys.readouterr().err
    assert not out.exists()
    assert parse_command(["python3", "-u", "-m", "pkg.train", "--lr", "1"]) == PythonProgram(
        "pkg.train", True, ("--lr", "1")
    )
    assert parse_command(["train.py", "x"]) == PythonProgram("train.py", False, ("x",))
    with pytest.raises(CommandError, match="interpreter option"):
        parse_command(["python", "-c", "print(1)"])


def test_count_batch_excludes_padding_in_every_layout() -> None:
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    ids = torch.tensor([[4, 5, 6, 0], [7, 8, 0, 0]])
    tokens, samples = count_batch((), {"input_ids": ids, "attention_mask": mask}, pad_token_id=0)
    assert (int(tokens), samples) == (5, 2)
    # Packed, padding-free: EOS doubles as pad (id 0); real EOS tokens carry labels, the pad tail does not.
    packed = torch.tensor([[3, 4, 0, 5, 6, 7, 0, 0, 0]])
    labels = torch.tensor([[-100, 4, 0, -100, 6, 7, 0, -100, -100]])
    positions = torch.tensor([[0, 1, 2, 0, 1, 2, 3, 0, 0]])
    kwargs = {"input_ids": packed, "labels": labels, "position_ids": positions}
    tokens, samples = count_batch((), kwargs, pad_token_id=0)
    assert (int(tokens), int(samples)) == (7, 2)
    tokens, samples = count_batch((packed,), {}, pad_token_id=None)
    assert (tokens, samples) == (9, 1)
    assert count_batch((torch.randn(3, 4),), {}) == (None, 3)


def test_model_flops_follow_trainable_share() -> None:
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 6), torch.nn.Linear(6, 10))
    assert model_flops_per_token(model) == 6 * (24 + 60)
    model[1].weight.requires_grad_(False)  # frozen base layer: no weight gradient
    assert model_flops_per_token(model) == 4 * (24 + 60) + 2 * 60


def test_percentile_matches_numpy() -> None:
    values = [float(v) for v in torch.randn(37, generator=torch.Generator().manual_seed(3))]
    for q in (0, 50, 95, 100):
        assert percentile(values, q) == pytest.approx(numpy.percentile(values, q))


def test_peak_tflops_table_and_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PEAK_TFLOPS_ENV, raising=False)
    assert peak_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert peak_tflops("NVIDIA H200") == 989.0
    assert peak_tflops("Some Future GPU") is None
    monkeypatch.setenv(PEAK_TFLOPS_ENV, "790")
    assert peak_tflops("NVIDIA H200") == 790.0
