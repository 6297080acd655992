"""Settings of TRL command-line scripts switched where they come from (launch flags and ``--config`` recipes),
and the tier-2 LoRA transforms on those scripts, whose trainers load the model and make the adapters."""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path

import git
import pytest
import yaml

from optimizations.edits.recipe_switch import RecipeSetting, switch
from optimizations.edits.yaml_text import add_keys
from optimizations.program.recipes import launches
from optimizations.program.repository import RepoContext
from optimizations.registry import get
from tests.git_repos import commit_all, make_repo

FIXTURE = Path(__file__).parent / "fixtures" / "trl_recipes"
PERFBOT = Path(__file__).resolve().parents[1]
PACKING = RecipeSetting("packing", "true", lambda v: v is True, {"packing_strategy": "bfd"}, "# pack")


def _files(root: Path) -> dict[str, str]:
    """The repository's files (not git's or the bot's own), by relative path."""
    paths = (p.relative_to(root) for p in sorted(root.rglob("*")) if p.is_file())
    return {
        p.as_posix(): (root / p).read_text() for p in paths if not any(x.startswith(".") for x in p.parts)
    }


def _repo(tmp_path: Path, files: dict[str, str]) -> RepoContext:
    make_repo(tmp_path / "r", files)
    return RepoContext(tmp_path / "r")


def _bot(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *args], cwd=PERFBOT, capture_output=True, text=True, check=False
    )


def _only_added(before: str, after: str, allowed: set[str]) -> None:
    """Every line of ``before`` is in ``after`` unchanged; the lines added are among ``allowed``."""
    diff = list(difflib.ndiff(before.splitlines(), after.splitlines()))
    assert not [line for line in diff if line.startswith("- ")]
    assert {line[2:] for line in diff if line.startswith("+ ")} <= allowed


def test_apply_edits_the_launch_flag_and_the_recipes_and_a_second_apply_adds_nothing(tmp_path):
    files = _files(FIXTURE)
    repo = make_repo(tmp_path / "copy", files)
    first = _bot("apply", "--tier", "1", "--repo", str(tmp_path / "copy"))
    assert first.returncode == 0, first.stdout + first.stderr
    log = repo.git.log("--format=%(trailers:key=Bot-Optimization,valueonly)", "main..HEAD").split()
    assert sorted(log) == ["dataloader_workers", "dpo_precompute", "fa2", "packing"]

    after = _files(tmp_path / "copy")
    launch = files["scripts/launch_sft.sh"].replace(
        "--packing false", "--packing true --packing_strategy bfd"
    )
    assert after["scripts/launch_sft.sh"] == launch
    assert after["scripts/launch_dpo.sh"] == files["scripts/launch_dpo.sh"]
    workers = {
        "dataloader_num_workers: 4",
        "dataloader_pin_memory: true",
        "dataloader_persistent_workers: true",
        "# perfbot: load batches in worker processes into pinned memory.",
    }
    precompute = {
        "precompute_ref_log_probs: true",
        "# perfbot: compute the DPO reference log-probs once, before training.",
    }
    _only_added(files["recipes/sft_lora.yaml"], after["recipes/sft_lora.yaml"], workers)
    _only_added(files["recipes/dpo.yaml"], after["recipes/dpo.yaml"], workers | precompute)
    sft, dpo = (yaml.safe_load(after[f"recipes/{n}.yaml"]) for n in ("sft_lora", "dpo"))
    assert sft["dataloader_num_workers"] == dpo["dataloader_num_workers"] == 4
    assert dpo["precompute_ref_log_probs"] is True and "packing" not in sft  # the flag wins over the recipe
    assert sft["learning_rate"] == 2.0e-4 and sft["attn_implementation"] == "sdpa"
    # fa2 edits the script's model_init_kwargs: the recipe's choice is the picker's fallback, nothing else moves
    picker = (
        "        attn_implementation=pick_attention_implementation(source=model_args.model_name_or_path, "
        "dtype=model_args.dtype, fallback=model_args.attn_implementation),"
    )
    imported = "from _perfbot_attention import pick_attention_implementation"
    assert (
        after["sft.py"]
        .replace(picker, "        attn_implementation=model_args.attn_implementation,")
        .replace("\n" + imported + "\n", "")
        == files["sft.py"]
    )
    assert picker in after["sft.py"].splitlines()
    # the helper's import in a section of its own, as ruff's import sorting (review's lint) wants it
    assert f"from datasets import load_dataset\n\n{imported}\n\n\ndef main" in after["sft.py"]
    assert "_perfbot_attention.py" in after and after["dpo.py"].count("attn_implementation") == 0
    compile(after["sft.py"], "sft.py", "exec")

    head = repo.head.commit.hexsha
    second = _bot("apply", "--tier", "1", "--repo", str(tmp_path / "copy"))
    assert second.returncode == 0, second.stdout + second.stderr
    assert repo.head.commit.hexsha == head
    for name in ("packing", "dataloader_workers", "dpo_precompute", "fa2"):
        assert not [s for s in get(name).find(tmp_path / "copy") if s.applicable and s.path != "dpo.py"]


def test_scan_reports_the_recipe_and_launch_script_lines(tmp_path):
    make_repo(tmp_path / "copy", _files(FIXTURE))
    scanned = _bot("scan", str(tmp_path / "copy"))
    assert scanned.returncode == 0, scanned.stderr
    assert "scripts/launch_sft.sh:4  launch flag --packing true" in scanned.stdout
    assert "recipes/sft_lora.yaml:29  recipe dataloader_num_workers: 4" in scanned.stdout
    assert "recipes/dpo.yaml:25  recipe precompute_ref_log_probs: true" in scanned.stdout


def test_launch_lines_are_read_with_continuations_and_every_launcher(tmp_path):
    ctx = _repo(
        tmp_path,
        {
            "train/sft.py": "",
            "run.sh": (
                "# python train/sft.py --packing true\n"
                "torchrun --nproc-per-node 2 \\\n  train/sft.py \\\n  --config=./recipes/a.yaml --packing False; echo --seed 1\n"
                "python -m pip install trl\n"
                "echo train/sft.py\n"
            ),
            "train/go.sh": "python3 sft.py --bf16\n",
        },
    )
    found = launches(ctx, "train/sft.py")
    assert [(f.path, f.line, f.configs) for f in found] == [
        ("run.sh", 2, ["recipes/a.yaml"]),
        ("train/go.sh", 1, []),
    ]
    assert found[0].flags == {"config": "./recipes/a.yaml", "packing": "False"}
    assert found[1].flags == {"bf16": "true"}
    sites = switch(ctx, "train/sft.py", PACKING, "packing")
    assert [(s.path, s.line) for s in sites] == [("run.sh", 4), ("train/go.sh", 1)]
    assert ctx.edits["run.sh"].endswith(
        "--packing true --packing_strategy bfd; echo --seed 1\npython -m pip install trl\necho train/sft.py\n"
    )
    assert ctx.edits["train/go.sh"] == "python3 sft.py --bf16 --packing true --packing_strategy bfd\n"
    assert switch(ctx, "other.py", PACKING, "packing") is None


def test_a_document_that_is_not_utf8_is_skipped_not_a_crash(tmp_path):
    ctx = _repo(tmp_path, {"sft.py": "", "run.sh": "python sft.py --packing false\n", "NOTES.md": ""})
    (tmp_path / "r" / "NOTES.md").write_bytes("```\npython sft.py  # caf\xe9\n```\n".encode("latin-1"))
    commit_all(git.Repo(tmp_path / "r"), "Latin-1 notes")
    assert [(f.path, f.line) for f in launches(ctx, "sft.py")] == [("run.sh", 1)]


def test_a_recipe_false_with_a_reason_is_kept_and_an_explicit_true_is_already_done(tmp_path):
    ctx = _repo(
        tmp_path,
        {
            "sft.py": "",
            "a.sh": "accelerate launch sft.py --config off.yaml\naccelerate launch sft.py --config on.yaml\n",
            "off.yaml": "learning_rate: 1.0e-5\npacking: false  # eval needs one example per row\n",
            "on.yaml": "packing: true\npacking_strategy: wrapped\n",
        },
    )
    sites = switch(ctx, "sft.py", PACKING, "packing")
    assert [(s.path, s.line, s.kind) for s in sites] == [("off.yaml", 2, "kept"), ("on.yaml", 1, "already")]
    assert "one example per row" in sites[0].reason and not ctx.edits


def test_a_recipe_false_without_a_comment_is_switched_and_blocked_recipes_refused(tmp_path):
    blocked = RecipeSetting(
        "packing",
        "true",
        lambda v: v is True,
        {"packing_strategy": "bfd"},
        blocked=lambda keys: "wrapped" if keys.get("packing_strategy") == "wrapped" else None,
    )
    ctx = _repo(
        tmp_path,
        {
            "sft.py": "",
            "a.sh": "python sft.py --config a.yaml\npython sft.py --config b.yaml\n",
            "a.yaml": "lr: 1\npacking: false\n",
            "b.yaml": "lr: 1\npacking_strategy: wrapped\n",
        },
    )
    sites = switch(ctx, "sft.py", blocked, "packing")
    assert [(s.path, s.applicable) for s in sites] == [("a.yaml", True), ("b.yaml", False)]
    assert ctx.edits == {"a.yaml": "lr: 1\npacking: true\npacking_strategy: bfd\n"}


@pytest.mark.parametrize(
    ("text", "expected", "line"),
    [
        ("a: 1  # one\nb: 2\n# tail\n", "a: 1  # one\nb: 2\n# new\nx: true\n# tail\n", 4),
        ("a: 1  # one\nb:\n  c: 2\n# tail\n", "a: 1  # one\nb:\n  c: 2\n# tail\n# new\nx: true\n", 6),
        ("a: 1", "a: 1\n# new\nx: true\n", 3),
    ],
)
def test_add_keys_appends_to_the_top_mapping_and_keeps_the_rest(text, expected, line):
    assert add_keys(text, {"x": "true"}, "# new") == (expected, line)
    assert add_keys("- a\n- b\n", {"x": "true"}) is None


@pytest.mark.parametrize(
    ("chosen", "picked"), [("flash_attention_2", "flash_attention_2"), ("eager", "flex_attention")]
)
def test_the_picker_keeps_a_run_time_choice_other_than_sdpa_eager_or_none(chosen, picked):
    from optimizations.fa2.helper import PREFERENCE, Capabilities, pick_attention_implementation

    gpu = Capabilities(
        gpu=(9, 0),
        implementations=frozenset(PREFERENCE),
        unavailable={n: "not installed" for n in PREFERENCE[:3]},
        probe_flex=lambda dtype, config: None,
    )
    from transformers import Qwen2ForCausalLM

    assert (
        pick_attention_implementation(Qwen2ForCausalLM, dtype="bfloat16", fallback=chosen, capabilities=gpu)
        == picked
    )


@pytest.mark.parametrize("script", ["sft.py", "dpo.py"])
def test_the_lora_host_overhead_transforms_follow_the_trainer_a_trl_script_builds(tmp_path, script):
    """TrlParser scripts hand the trainer a checkpoint name and a ``peft_config``: both tier-2 transforms act on
    ``trainer.model`` once it is built, and a second pass adds nothing."""
    before = (FIXTURE / script).read_text()
    source = before
    for optimization in ("bf16_adapters", "regional_compile"):
        result = get(optimization).transform_source(source, script, RepoContext(tmp_path))
        assert [site.applicable for site in result.sites] == [True]
        source = result.source
    _only_added(
        before,
        source,
        {
            "from _perfbot_compile import compile_repeated_layers",
            "from _perfbot_precision import compute_adapters_in_bf16",
            "    compile_repeated_layers(trainer.model)",
            "    compute_adapters_in_bf16(trainer.model)",
        },
    )
    lines = source.splitlines()
    built = max(i for i, line in enumerate(lines) if line == "    )")  # the end of `trainer = ...(`
    assert lines[built + 1 : built + 3] == [
        "    compile_repeated_layers(trainer.model)",
        "    compute_adapters_in_bf16(trainer.model)",
    ]
    assert lines[built + 3].lstrip().startswith("trainer.train(")
    for optimization in ("bf16_adapters", "regional_compile"):
        again = get(optimization).transform_source(source, script, RepoContext(tmp_path))
        assert again.source == source
        helper = {"bf16_adapters": "compute_adapters_in_bf16", "regional_compile": "compile_repeated_layers"}
        message = f"`{helper[optimization]}(trainer.model)` once the trainer is built"
        assert [(site.already, site.message) for site in again.sites] == [(True, message)]


STREAMING_SCRIPT = """\
from datasets import load_dataset
from trl import DPOConfig, DPOTrainer, ModelConfig, ScriptArguments, TrlParser


def main(script_args, training_args, model_args):
    dataset = load_dataset(script_args.dataset_name, streaming=script_args.dataset_streaming)
    trainer = DPOTrainer(model=model_args.model_name_or_path, args=training_args, train_dataset=dataset["train"])
    trainer.train()


if __name__ == "__main__":
    parser = TrlParser((ScriptArguments, DPOConfig, ModelConfig))
    main(*parser.parse_args_and_config())
"""


@pytest.mark.parametrize(
    ("recipe_extra", "flags", "lands"),
    [("", "", True), ("dataset_streaming: true\n", "", False), ("", " --dataset_streaming true", False)],
)
def test_a_parsed_streaming_flag_blocks_precompute_only_where_a_launch_turns_it_on(
    tmp_path, recipe_extra, flags, lands
):
    """``streaming=script_args.dataset_streaming`` is TRL's ScriptArguments field, false by default: precompute
    is refused only where the launch line or the recipe it passes turns streaming on."""
    make_repo(
        tmp_path / "r",
        {
            "dpo.py": STREAMING_SCRIPT,
            "run.sh": f"accelerate launch dpo.py --config recipes/dpo.yaml{flags}\n",
            "recipes/dpo.yaml": "beta: 0.1\nlearning_rate: 5.0e-7\n" + recipe_extra,
        },
    )
    sites = get("dpo_precompute").find(tmp_path / "r")
    if lands:
        # the recipe is switched on, and the trainer's dataset gets one cache file for every rank
        assert [(s.path, s.applicable) for s in sites] == [("recipes/dpo.yaml", True), ("dpo.py", True)]
        assert "with_shared_cache" in sites[1].message
    else:
        assert [(s.path, s.applicable) for s in sites] == [("dpo.py", False)]
        assert "streaming=script_args.dataset_streaming" in sites[0].reason


def test_a_command_without_a_recipe_gets_the_flags_in_its_own_layout(tmp_path):
    """lm-sys/FastChat's shape: ``deepspeed train_lora.py \\`` and a flag a line; the flags go on lines of their
    own after the last, where the spans of the file's earlier commands stay valid; a command that chains on, or
    ends in a comment, is left with the reason; one that trains nothing is left alone."""
    ctx = _repo(
        tmp_path,
        {
            "sft.py": "",
            "README.md": "```bash\npython sft.py --seed 4\n```\n",
            "scripts/lora.sh": (
                "deepspeed sft.py \\\n    --lora_r 8 \\\n    --flash_attn False\n"
                "python sft.py --seed 1 | tee log.txt\n"
                "python sft.py --seed 2  # the second seed\n"
                "python sft.py --seed 3 --packing_strategy wrapped\n"
                "python sft.py --do_train False --do_predict True\n"
            ),
        },
    )
    sites = switch(ctx, "sft.py", PACKING, "packing")
    shown = [s for s in sites if s.path == "README.md"]
    assert [(s.line, s.applicable) for s in shown] == [(2, False)] and "documented command" in shown[0].reason
    assert (
        "add `--packing true --packing_strategy bfd` to it" in shown[0].reason
    )  # flags as a command takes them
    run = [s for s in sites if s.path == "scripts/lora.sh"]
    assert sorted((s.line, s.applicable) for s in run) == [(4, False), (4, True), (5, False), (6, True)]
    assert all(
        "a pipe, `&&`, `;`, a comment): add `--packing true --packing_strategy bfd`" in s.reason
        for s in run
        if not s.applicable
    )
    assert "README.md" not in ctx.edits
    assert ctx.edits["scripts/lora.sh"] == (
        "deepspeed sft.py \\\n    --lora_r 8 \\\n    --flash_attn False \\\n"
        "    --packing True \\\n    --packing_strategy bfd\n"
        "python sft.py --seed 1 | tee log.txt\n"
        "python sft.py --seed 2  # the second seed\n"
        "python sft.py --seed 3 --packing_strategy wrapped --packing true\n"
        "python sft.py --do_train False --do_predict True\n"
    )


def test_a_command_that_continues_into_the_end_of_its_file_gets_the_flags_after_its_last_argument(tmp_path):
    """artidoro/qlora's ``finetune.sh`` ends ``--optim paged_adamw_32bit \\`` and the file: the flags go after
    that argument, and the dangling backslash is not left in the middle of the command."""
    ctx = _repo(
        tmp_path,
        {
            "sft.py": "",
            "lora.sh": "python sft.py \\\n    --seed 1 \\\n",
            "one.sh": "python sft.py --seed 2 \\\n\npython other.py\n",
        },
    )
    assert all(site.applicable for site in switch(ctx, "sft.py", PACKING, "packing"))
    assert ctx.edits["lora.sh"] == (
        "python sft.py \\\n    --seed 1 \\\n    --packing true \\\n    --packing_strategy bfd\n"
    )
    assert ctx.edits["one.sh"] == (
        "python sft.py --seed 2 --packing true --packing_strategy bfd\n\npython other.py\n"
    )


def test_a_script_that_imports_and_runs_the_parsers_function_launches_it(tmp_path):
    """lm-sys/FastChat's ``train_mem.py``: it patches attention, imports ``train`` from
    ``fastchat/train/train.py`` and calls it, so the commands that run it launch ``train.py``'s parser. A script
    that only imports a helper from it, or calls it inside a function of its own, does not."""
    ctx = _repo(
        tmp_path,
        {
            "pkg/train.py": "",
            "pkg/train_mem.py": "import patch\n\nfrom pkg.train import train\n\nif __name__ == '__main__':\n    train()\n",
            "pkg/beside.py": "from train import train as run\n\nrun()\n",
            "pkg/helper_only.py": "from pkg.train import preprocess\n\n\ndef main():\n    preprocess()\n",
            "run.sh": (
                "torchrun --nproc_per_node=4 pkg/train_mem.py --seed 1\n"
                "python pkg/helper_only.py --seed 2\n"
                "python pkg/beside.py --seed 3\n"
            ),
        },
    )
    assert [(f.path, f.line, f.flags) for f in launches(ctx, "pkg/train.py")] == [
        ("run.sh", 1, {"seed": "1"}),
        ("run.sh", 3, {"seed": "3"}),
    ]


def test_commands_documented_under_docs_are_launches_and_docs_code_is_still_out_of_scope(tmp_path):
    """lm-sys/FastChat documents ``train_flant5.py``'s command in ``docs/training.md`` only."""
    ctx = _repo(
        tmp_path,
        {
            "train.py": "",
            "docs/training.md": "```bash\ntorchrun train.py --bf16 True\n```\n",
            "docs/demo.py": "",
        },
    )
    assert [(f.path, f.line, f.documented) for f in launches(ctx, "train.py")] == [
        ("docs/training.md", 2, True)
    ]
    assert "docs/demo.py" not in ctx.python_files()


def test_a_recipe_given_positionally_is_the_launchs_recipe(tmp_path):
    """huggingface/alignment-handbook's README runs ``scripts/dpo.py recipes/.../config_qlora.yaml``: the recipe
    is edited, as one passed with ``--config``, and no flag is added to the command."""
    ctx = _repo(
        tmp_path,
        {
            "sft.py": "",
            "recipes/sft.yaml": "max_length: 512\n",
            "run.sh": "accelerate launch --config_file ddp.yaml sft.py recipes/sft.yaml --seed 1\n",
        },
    )
    [launch] = launches(ctx, "sft.py")
    assert launch.configs == ["recipes/sft.yaml"] and launch.flags == {"seed": "1"}
    sites = switch(ctx, "sft.py", PACKING, "packing")
    assert [(s.path, s.applicable) for s in sites] == [("recipes/sft.yaml", True)]
    assert set(ctx.edits) == {"recipes/sft.yaml"}
