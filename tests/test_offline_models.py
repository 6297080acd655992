"""Hub models a run cannot download, built from architecture configs with random weights (no network used).

Real transformers and TRL calls inside :func:`benchmarks.offline_models.offline_models`, a tiny TRL SFT run among
them, and the launcher running an unmodified program with the table in its environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import huggingface_hub.constants
import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoProcessor,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen2ForCausalLM,
)

from benchmarks.architectures import architecture
from benchmarks.offline_models import ENVIRONMENT, TOKENIZER_SIZE, from_environment, offline_models

REPO_ROOT = Path(__file__).resolve().parents[1]
QWEN_7B = "Qwen/Qwen2.5-7B-Instruct"
QWEN_05B = "Qwen/Qwen2.5-0.5B"


def tiny(model_id: str) -> dict[str, Any]:
    config = architecture(model_id, "tiny")
    assert config is not None
    return config


TABLE = {QWEN_7B: {**tiny(QWEN_7B), "hidden_size": 32}, QWEN_05B: tiny(QWEN_05B)}

# A hand-written loop over a model and tokenizer it names by id; argv: model id.
PROGRAM = """
import sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained(sys.argv[1], padding_side="left")
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype="auto", device_map="auto")
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for text in ["one step", "and another, a little longer", "then a third"]:
    batch = tokenizer([text], return_tensors="pt")
    model(**batch, labels=batch["input_ids"]).loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def test_a_named_model_is_built_from_its_entry_in_the_asked_dtype() -> None:
    with offline_models(TABLE):
        model = AutoModelForCausalLM.from_pretrained(QWEN_7B, dtype=torch.bfloat16, use_cache=False)
        direct = Qwen2ForCausalLM.from_pretrained(QWEN_7B, torch_dtype="float16", device_map="auto")
        config, unused = AutoConfig.from_pretrained(
            QWEN_7B, return_unused_kwargs=True, trust_remote_code=False
        )
    assert type(model) is Qwen2ForCausalLM and model.name_or_path == QWEN_7B
    assert model.config.hidden_size == 32 and model.config.use_cache is False and not model.training
    assert {parameter.dtype for parameter in model.parameters()} == {torch.bfloat16}
    assert {parameter.dtype for parameter in direct.parameters()} == {torch.float16}
    assert config.architectures == ["Qwen2ForCausalLM"] and unused == {"trust_remote_code": False}


def test_the_local_tokenizer_round_trips_any_text_and_applies_chat_ml() -> None:
    with offline_models(TABLE):
        tokenizer = AutoTokenizer.from_pretrained(QWEN_7B, padding_side="left")
        processor = AutoProcessor.from_pretrained(QWEN_7B)
        model = AutoModelForCausalLM.from_pretrained(QWEN_7B)
    text = "héllo wörld, 日本語 🤖\n\ttabs  and <|im_end|> inside"
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text and max(ids) < model.config.vocab_size
    assert len(tokenizer) == len(processor) == TOKENIZER_SIZE and tokenizer.padding_side == "left"
    assert (
        model.config.eos_token_id == tokenizer.eos_token_id
        and model.config.pad_token_id == tokenizer.pad_token_id
    )
    messages = [{"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": "4"}]
    prompt = tokenizer.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True)
    assert prompt == "<|im_start|>user\n2 + 2?<|im_end|>\n<|im_start|>assistant\n"
    rendered = tokenizer.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    trained = [
        token for token, mask in zip(rendered["input_ids"], rendered["assistant_masks"], strict=True) if mask
    ]
    assert tokenizer.decode(trained) == "4<|im_end|>"


def test_other_ids_load_as_before_and_everything_is_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    owners = (
        AutoConfig,
        AutoModelForCausalLM,
        AutoTokenizer,
        AutoProcessor,
        PreTrainedModel,
        PreTrainedTokenizerBase,
    )
    before = [owner.__dict__["from_pretrained"] for owner in owners]
    with offline_models(TABLE):
        assert [owner.__dict__["from_pretrained"] for owner in owners] != before
        with pytest.raises(OSError, match="huggingface.co"):
            AutoModelForCausalLM.from_pretrained("nobody/does-not-exist")
    assert [owner.__dict__["from_pretrained"] for owner in owners] == before
    with pytest.raises(OSError, match="huggingface.co"):
        AutoModelForCausalLM.from_pretrained(QWEN_7B)


def test_an_entry_the_local_tokenizer_does_not_fit_names_the_model() -> None:
    with pytest.raises(ValueError, match=r"'tiny/vocab'.*vocab_size 100"):
        with offline_models({"tiny/vocab": {**TABLE[QWEN_7B], "vocab_size": 100}}):
            pass
    with pytest.raises(ValueError, match="'odd/type'"):
        with offline_models({"odd/type": {"model_type": "no-such-architecture"}}):
            pass


def test_the_environment_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENVIRONMENT, raising=False)
    original = AutoModelForCausalLM.__dict__["from_pretrained"]
    with from_environment():
        assert AutoModelForCausalLM.__dict__["from_pretrained"] is original
    monkeypatch.setenv(ENVIRONMENT, json.dumps(TABLE))
    with from_environment():
        assert isinstance(AutoModelForCausalLM.from_pretrained(QWEN_7B), Qwen2ForCausalLM)
    for malformed in ("{not json", '{"a/b": {"hidden_size": 8}}', "[]"):
        monkeypatch.setenv(ENVIRONMENT, malformed)
        with pytest.raises(ValueError, match=ENVIRONMENT):
            from_environment()


def test_trl_sft_trains_a_model_it_names_by_id(tmp_path: Path) -> None:
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    rows = [
        {
            "messages": [
                {"role": "user", "content": f"What is {n} + {n}?"},
                {"role": "assistant", "content": str(2 * n)},
            ]
        }
        for n in range(16)
    ]
    args = SFTConfig(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=2,
        max_length=64,
        assistant_only_loss=True,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    with offline_models(TABLE):
        trainer = SFTTrainer(model=QWEN_05B, train_dataset=Dataset.from_list(rows), args=args)
        trainer.train()
    assert trainer.state.global_step == 2
    assert trainer.model.config.hidden_size == TABLE[QWEN_05B]["hidden_size"]


def launch(tmp_path: Path, table: str) -> dict:
    """Run :data:`PROGRAM` under the launcher with ``table`` in the environment; returns its metrics."""
    (tmp_path / "program.py").write_text(PROGRAM)
    out = tmp_path / "metrics.json"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", ENVIRONMENT: table}
    command = [
        sys.executable,
        "-m",
        "benchmarks.launch",
        "--out",
        str(out),
        "--",
        "python",
        "program.py",
        QWEN_7B,
    ]
    subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    return json.loads(out.read_text())


def test_the_launcher_runs_a_program_that_names_a_model_it_cannot_download(tmp_path: Path) -> None:
    metrics = launch(tmp_path, json.dumps(TABLE))
    assert metrics["status"] == "ok", metrics.get("error")
    assert metrics["steps_measured"] == 2  # three steps, one of them warm-up
    crashed = launch(tmp_path, '{"Qwen/Qwen2.5-7B-Instruct": {}}')
    assert crashed["status"] == "crashed" and ENVIRONMENT in crashed["error"]


def test_architectures_by_family_and_size() -> None:
    llama = tiny("meta-llama/Llama-3.1-8B-Instruct")
    assert llama["model_type"] == "llama" and llama["hidden_size"] == 64 and llama["num_hidden_layers"] == 2
    assert tiny(QWEN_05B)["tie_word_embeddings"] and not tiny(QWEN_7B)["tie_word_embeddings"]
    assert tiny("someone/qwen2-finetune")["model_type"] == "qwen2"
    published = architecture(QWEN_7B, "gpu")
    assert published is not None
    assert (published["hidden_size"], published["num_key_value_heads"]) == (3584, 4)
    assert architecture("someone/qwen2-finetune", "gpu") is None
    assert architecture("someone/unknown-model", "tiny") is None
