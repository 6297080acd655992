"""perfbot's commits under a target's own strict ruff/isort configuration: no new violation, no unrelated
import reordering, no trailing whitespace; and the re-wrapping that fits vendored helpers under a line limit
never changes what they do."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest
from git_repos import IDENTITY, commit_all, make_repo
from ruff.__main__ import find_ruff_bin

from bot.cli import main
from bot.review.commits import review_commits
from bot.rewrap import rewrap
from bot.tidy import style_settings
from optimizations.fa2.edit import RUNTIME as ATTENTION

OPTIMIZATIONS = Path(__file__).resolve().parents[1] / "optimizations"
# Every helper perfbot can vendor: the shared ones and each optimization's own.
HELPERS = sorted([*(OPTIMIZATIONS / "runtime").glob("[!_]*.py"), *OPTIMIZATIONS.glob("*/helper.py")])


def _helper_id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


PROJECT = '[project]\nname = "trainer"\nversion = "0.1.0"\n'

STRICT_RUFF = f"""\
{PROJECT}
[tool.ruff]
line-length = 100

[tool.ruff.lint]
select = ["E", "F", "I", "W"]

[tool.ruff.lint.isort]
known-first-party = ["trainer"]
"""

SFT = """\
\"\"\"Supervised fine-tuning with the Hugging Face Trainer.\"\"\"

import argparse

from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

from trainer.data import load_dataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="sshleifer/tiny-gpt2")
    args = parser.parse_args()
    model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype="bfloat16")
    training_args = TrainingArguments(output_dir="out", per_device_train_batch_size=8, bf16=True)
    trainer = Trainer(model=model, args=training_args, train_dataset=load_dataset())
    trainer.train()


if __name__ == "__main__":
    main()
"""

DATA = """\
\"\"\"Toy data.\"\"\"

import torch


def load_dataset() -> list[dict[str, torch.Tensor]]:
    return [{"input_ids": torch.arange(16), "labels": torch.arange(16)} for _ in range(64)]
"""

LOOP = """\
\"\"\"A hand-written training loop.\"\"\"

import torch
from torch.utils.data import DataLoader

from trainer.data import load_dataset


def train(model: torch.nn.Module, steps: int = 10) -> None:
    device = torch.device("cuda")
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loader = DataLoader(load_dataset(), batch_size=8, shuffle=True)
    for step, batch in enumerate(loader):
        batch = {key: value.to(device) for key, value in batch.items()}
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step == steps:
            break
"""

PLAN = """\
# Plan

## Tier 1
- A. Use flash attention in trainer/sft.py
- B. Add dataloader workers

## Tier 2
- D. TF32 matmuls
- F. CUDA prefetcher in trainer/loop.py
"""


def ruff(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(find_ruff_bin()), *args], cwd=root, capture_output=True, text=True, check=False
    )


def trainer_repo(root: Path, pyproject: str, loop: str = LOOP):
    files = {
        "pyproject.toml": pyproject,
        "PLAN.md": PLAN,
        "trainer/__init__.py": '"""A small training package."""\n',
        "trainer/sft.py": SFT,
        "trainer/data.py": DATA,
        "trainer/loop.py": loop,
    }
    return make_repo(root, files)


def apply_tiers(root: Path, *tiers: int) -> None:
    for tier in tiers:
        assert main(["apply", "--tier", str(tier), "--repo", str(root)]) == 0


def test_commits_add_no_violation_of_a_strict_ruff_config(tmp_path):
    root = tmp_path / "target"
    repo = trainer_repo(root, STRICT_RUFF)
    base = repo.head.commit.hexsha
    assert ruff(root, "check", ".").returncode == 0 and ruff(root, "format", "--check", ".").returncode == 0
    apply_tiers(root, 1, 2)

    commits = list(repo.iter_commits(f"{base}..HEAD"))
    landed = {c.message.split("Bot-Optimization: ")[1].split()[0] for c in commits}
    assert {"fa2", "dataloader_workers", "tf32", "prefetcher"} <= landed
    helper = root / "trainer" / "_perfbot_attention.py"
    assert helper.exists()
    # Written as perfbot ships it, the helper would break this line limit.
    assert max(map(len, ATTENTION.source().splitlines())) > 100

    reviews, lint_error = review_commits(repo, base, repo.head.commit.hexsha)
    assert lint_error == ""
    assert {r.sha: [e.describe() for e in r.lint] for r in reviews} == {c.hexsha: [] for c in commits}
    assert ruff(root, "check", ".").stdout.strip() == "All checks passed!"
    assert ruff(root, "format", "--check", str(helper)).returncode == 0
    for commit in commits:  # no trailing whitespace, no whitespace error git knows of
        parent = commit.parents[0].hexsha
        assert repo.git.diff("--check", parent, commit.hexsha, with_exceptions=False) == ""


def test_commits_add_no_violation_of_ruffs_defaults_in_a_target_without_a_config(tmp_path):
    """Review lints a target that configures no linter under ruff's own defaults (BLE001 and RUF012 among
    them), which the vendored helpers meet as perfbot ships them."""
    root = tmp_path / "target"
    repo = trainer_repo(root, PROJECT)
    base = repo.head.commit.hexsha
    apply_tiers(root, 1, 2)
    commits = list(repo.iter_commits(f"{base}..HEAD"))
    assert (root / "trainer" / "_perfbot_attention.py").exists()
    reviews, lint_error = review_commits(repo, base, repo.head.commit.hexsha)
    assert lint_error == ""
    assert {r.sha: [e.describe() for e in r.lint] for r in reviews} == {c.hexsha: [] for c in commits}


CONVENTIONS = ("google", "numpy", "pep257")

NUMPY_DOCSTRINGS_RUFF = f"""\
{PROJECT}
[tool.ruff]
line-length = 100

[tool.ruff.lint]
select = ["D", "E", "F", "I"]
ignore = ["D1"]

[tool.ruff.lint.pydocstyle]
convention = "numpy"
"""


def test_commits_add_no_docstring_violation_in_a_numpy_convention_target(tmp_path):
    """Under pydocstyle's numpy convention at a line limit of 100, perfbot's commits add no violation: the
    helpers' summaries are one line in the imperative mood, short enough not to be re-wrapped."""
    root = tmp_path / "target"
    repo = trainer_repo(root, NUMPY_DOCSTRINGS_RUFF)
    base = repo.head.commit.hexsha
    apply_tiers(root, 1, 2)
    commits = list(repo.iter_commits(f"{base}..HEAD"))
    assert len(commits) == 4 and (root / "trainer" / "_perfbot_attention.py").exists()
    reviews, lint_error = review_commits(repo, base, repo.head.commit.hexsha)
    assert lint_error == ""
    assert {r.sha: [e.describe() for e in r.lint] for r in reviews} == {c.hexsha: [] for c in commits}


def docstrings(convention: str) -> tuple[str, ...]:
    """Every pydocstyle rule of ``convention``, the missing-docstring ones (D1) included."""
    return ("--select", "D", "--config", f'lint.pydocstyle.convention = "{convention}"')


@pytest.mark.parametrize(
    "rules",
    [(), *map(docstrings, CONVENTIONS)],
    ids=["ruff-defaults", *(f"pydocstyle-{name}" for name in CONVENTIONS)],
)
@pytest.mark.parametrize("helper", HELPERS, ids=_helper_id)
def test_each_helper_meets_ruffs_default_rules(helper, rules, tmp_path):
    """Every helper perfbot can vendor, as it ships, under the rules ruff checks where nothing configures it,
    and under each pydocstyle convention with all its rules: google (LLaMA-Factory's), whose D205 ruff cannot
    fix, and numpy and pep257, whose D401 (a summary in the imperative mood) it cannot fix either."""
    command = ("check", "--isolated", "--no-cache", "--output-format", "concise", *rules, str(helper))
    completed = ruff(tmp_path, *command)
    assert completed.returncode == 0, completed.stdout


@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("helper", HELPERS, ids=_helper_id)
def test_each_helper_rewrapped_to_ruffs_default_line_length_keeps_one_line_summaries(
    helper, convention, tmp_path
):
    """Re-wrapped for a target at ruff's default 88 columns, no docstring summary spills onto a second line
    (D205), which no tidying could undo."""
    rewrapped = tmp_path / f"{helper.parent.name}_{helper.name}"
    rewrapped.write_text(rewrap(helper.read_text(), 88))
    rules = (*docstrings(convention), "--line-length", "88")
    completed = ruff(
        tmp_path, "check", "--isolated", "--no-cache", "--output-format", "concise", *rules, rewrapped.name
    )
    assert completed.returncode == 0, completed.stdout


def test_review_of_scripts_at_the_root_tells_their_vendored_helper_first_party(tmp_path):
    """Scripts at a target's root import a vendored helper absolutely (``from _perfbot_prefetcher import ...``).
    With no config naming the project's folder, ruff's isort takes the folder it runs from: the apply's tidy
    runs in the repository and sorts the helper as first-party, and review, which runs in a checkout of each
    revision, must agree."""
    files = {
        "pyproject.toml": PROJECT,
        "PLAN.md": "# Plan\n\n## Tier 2\n- F. CUDA prefetcher in loop.py\n",
        "loop.py": LOOP.replace("\nfrom trainer.data import load_dataset\n", "")
        + "\n\n"
        + DATA.split("\n\n\n")[1],
    }
    root = tmp_path / "target"
    repo = make_repo(root, files)
    base = repo.head.commit.hexsha
    apply_tiers(root, 2)
    assert "from _perfbot_prefetcher import" in (root / "loop.py").read_text()
    reviews, lint_error = review_commits(repo, base, repo.head.commit.hexsha)
    assert lint_error == "" and [r.lint for r in reviews] == [[]]


def test_unsorted_imports_the_commit_does_not_name_stay_where_they_are(tmp_path):
    root = tmp_path / "target"
    relaxed = STRICT_RUFF.replace('select = ["E", "F", "I", "W"]', 'select = ["E", "F"]')
    unsorted = LOOP.replace(
        "import torch\nfrom torch.utils.data import DataLoader\n",
        "from torch.utils.data import DataLoader\nimport torch\n",
    )
    repo = trainer_repo(root, relaxed, unsorted)
    base = repo.head.commit.hexsha
    apply_tiers(root, 1)
    diff = repo.git.diff(base, "HEAD", "--", "trainer/loop.py")
    removed = [line for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    assert not any("import" in line for line in removed)
    assert "+import os" in diff  # the commit's own import is there
    loop = (root / "trainer/loop.py").read_text()
    assert loop.index("from torch.utils.data import DataLoader") < loop.index("import torch\n")


def test_new_imports_follow_an_isort_only_configuration(tmp_path):
    root = tmp_path / "target"
    isort_only = (
        '[project]\nname = "trainer"\n\n[tool.isort]\nprofile = "black"\nknown_first_party = ["trainer"]\n'
    )
    repo = trainer_repo(root, isort_only)
    base = repo.head.commit.hexsha
    apply_tiers(root, 1)
    assert "dataloader_workers" in repo.head.commit.message
    sft = (root / "trainer/sft.py").read_text()
    header = sft[: sft.index("\n\n\n")]
    assert header.startswith(
        '"""Supervised fine-tuning with the Hugging Face Trainer."""\n\n'
        "import argparse\nimport os\n\nimport torch\nfrom transformers import"
    )
    # The file imports its own package absolutely, and so does the commit: sorted with it, first-party.
    assert (
        "\n\nfrom trainer._perfbot_attention import pick_attention_implementation\n"
        "from trainer.data import load_dataset" in header
    )
    assert repo.git.diff("--check", base, "HEAD", with_exceptions=False) == ""


def test_new_imports_follow_isorts_default_section(tmp_path):
    """alignment-handbook's setup.cfg: ``default_section = FIRSTPARTY`` puts a package isort knows nothing of
    (``trl``) beside the repository's own, sorted with it; ruff, told the same, sorts the added import there."""
    root = tmp_path / "target"
    setup_cfg = "[isort]\ndefault_section = FIRSTPARTY\nknown_first_party = trainer\nknown_third_party =\n    torch\n    transformers\n"
    sft = SFT.replace(
        "from trainer.data import load_dataset\n",
        "from trainer.data import load_dataset\nfrom trl import SFTConfig\n",
    )
    repo = trainer_repo(root, PROJECT)
    (root / "setup.cfg").write_text(setup_cfg)
    (root / "trainer/sft.py").write_text(sft)
    commit_all(repo, "isort settings, trl")
    base = repo.head.commit.hexsha
    assert 'lint.isort.default-section = "first-party"' in " ".join(style_settings(root))
    apply_tiers(root, 1)
    assert (
        "\n\nfrom trainer._perfbot_attention import pick_attention_implementation\n"
        "from trainer.data import load_dataset\nfrom trl import SFTConfig\n\n"
    ) in (root / "trainer/sft.py").read_text()
    reviews, lint_error = review_commits(repo, base, repo.head.commit.hexsha)
    assert lint_error == "" and all(r.lint == [] for r in reviews)


@pytest.mark.parametrize("limit", [79, 88, 100])
def test_rewrapping_a_helper_changes_no_code(limit):
    for path in HELPERS:
        source = path.read_text(encoding="utf-8")
        fitted = rewrap(source, limit)
        assert normalized(fitted) == normalized(source), path.name
        assert fitted.count("\n") >= source.count("\n")


def test_rewrap_fits_comments_docstrings_and_strings_under_the_limit():
    source = (
        "def f(x):\n"
        '    """' + "word " * 20 + 'end."""\n'
        "    # " + "note " * 20 + "\n"
        "    y = x  # " + "why " * 20 + "\n"
        '    return "' + "text " * 20 + '" + f"{x} ' + "more " * 20 + '"\n'
    )
    fitted = rewrap(source, 60)
    assert normalized(fitted) == normalized(source)
    *prose, code = fitted.splitlines()
    assert max(map(len, prose)) <= 60
    assert "    y = x\n" in fitted  # the trailing comment moved above its statement
    # A string is cut after its last space that fits (ruff format then lays the pieces out, and a string that
    # starts past the limit waits for that); a piece without a placeholder is a plain string, not an f-string.
    assert code.startswith('    return "' + "text " * 9 + '" "text ')
    fstring = 'def g(a):\n    return f"{a} ' + "more " * 20 + '"\n'
    cut = rewrap(fstring, 60)
    assert normalized(cut) == normalized(fstring)
    assert cut.splitlines()[1] == '    return f"{a} ' + "more " * 8 + '" "' + "more " * 12 + '"'


def test_a_pragma_comment_stays_on_its_line_however_long():
    source = (
        "def f():\n"
        "    try:\n"
        "        return 1\n"
        "    except Exception:  # noqa: BLE001 - every failure of the probe falls back to the default\n"
        "        return 2\n"
        "    x = 1  # type: ignore[assignment] - the default is an int, whatever the probe returned\n"
        "    y = 2  # a plain comment that explains the line, far longer than this tiny limit\n"
    )
    fitted = rewrap(source, 40)
    assert "    except Exception:  # noqa: BLE001 - every failure" in fitted
    assert "    x = 1  # type: ignore[assignment]" in fitted
    assert "    y = 2\n" in fitted  # a comment no tool reads moves above its line


def normalized(source: str) -> str:
    """The module's AST with docstring whitespace folded (re-filling moves only line breaks)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    first.value.value = " ".join(first.value.value.split())
    return ast.dump(tree)


def test_review_tells_first_party_imports_as_the_repository_does(tmp_path):
    root = tmp_path / "target"
    pyproject = STRICT_RUFF.replace('known-first-party = ["trainer"]', "")
    files = {"pyproject.toml": pyproject, "mypkg/__init__.py": "VALUE = 1\n"}
    repo = make_repo(root, {**files, "run.py": "import mypkg\n\nprint(mypkg.VALUE)\n"})
    base = repo.head.commit.hexsha
    # ruff sorts torch (third party) above mypkg (first party, found in the repository): clean as committed.
    (root / "run.py").write_text("import torch\n\nimport mypkg\n\nprint(mypkg.VALUE, torch)\n")
    assert ruff(root, "check", "run.py").returncode == 0
    repo.git.commit("-qam", "use torch", env=IDENTITY)
    reviews, lint_error = review_commits(repo, base, repo.head.commit.hexsha)
    assert lint_error == "" and [r.lint for r in reviews] == [[]]
    # The same order with mypkg unknown would be two third-party imports out of order: a new I001.
    (root / "run.py").write_text("import torch\n\nimport other\n\nprint(other.VALUE, torch)\n")
    repo.git.commit("-qam", "use other", env=IDENTITY)
    reviews, _ = review_commits(repo, repo.commit("HEAD~1").hexsha, repo.head.commit.hexsha)
    assert [e.code for e in reviews[0].lint] == ["I001"]


def test_review_lints_under_the_isort_settings_the_edits_were_tidied_by(tmp_path):
    """A target that configures isort in setup.cfg, not ruff (the alignment handbook: two blank lines after the
    imports): a file laid out that way is clean in review, as its own isort would have it."""
    root = tmp_path / "target"
    repo = make_repo(root, {"setup.cfg": "[isort]\nlines_after_imports = 2\n", "run.py": "print(1)\n"})
    base = repo.head.commit.hexsha
    (root / "run.py").write_text("import os\n\n\n# the working directory\nHERE = os.getcwd()\n")
    repo.git.commit("-qam", "two blank lines after the imports", env=IDENTITY)
    reviews, lint_error = review_commits(repo, base, repo.head.commit.hexsha)
    assert lint_error == "" and [r.lint for r in reviews] == [[]]
    # Without that setting, ruff's isort wants one blank line before the comment: a new I001.
    (root / "setup.cfg").write_text("[metadata]\nname = target\n")
    (root / "run.py").write_text("print(2)\n")
    repo.git.commit("-qam", "no isort settings", env=IDENTITY)
    (root / "run.py").write_text("import sys\n\n\n# the interpreter\nHERE = sys.executable\n")
    repo.git.commit("-qam", "again", env=IDENTITY)
    reviews, _ = review_commits(repo, repo.commit("HEAD~1").hexsha, repo.head.commit.hexsha)
    assert [e.code for e in reviews[0].lint] == ["I001"]


UNCONFIGURED = '''"""A script in the shape of TRL's own: a sorted top-level block, an unsorted one inside a function."""

import argparse


def main():
    import transformers
    import os

    return argparse, os, transformers
'''


def test_only_the_blocks_the_bot_added_to_and_that_were_sorted_get_sorted(tmp_path):
    """A target without any style config (ruff's defaults, which review lints with, sort imports): the import
    the bot adds to a sorted block is sorted into it, and the block that was unsorted before keeps its order."""
    from bot.tidy import tidy

    (tmp_path / "_perfbot_compile.py").write_text("def compile_repeated_layers(model):\n    return model\n")
    script = tmp_path / "train.py"
    edited = UNCONFIGURED.replace(
        "import argparse\n", "import argparse\nfrom _perfbot_compile import compile_repeated_layers\n"
    ).replace("    import os\n", "    import os\n    import sys\n")  # an added line in the unsorted block too
    script.write_text(edited)
    tidy(tmp_path, {"train.py": UNCONFIGURED})
    tidied = script.read_text()
    assert "import argparse\n\nfrom _perfbot_compile import compile_repeated_layers\n\n\ndef main" in tidied
    assert "    import transformers\n    import os\n    import sys\n" in tidied  # unsorted before: left as is
    unsorted = ruff(tmp_path, "check", "--select", "I001", "--output-format", "concise", "train.py").stdout
    assert unsorted.count("I001") == 1 and "train.py:9:5" in unsorted  # only the block unsorted before


BLACK_SFT = '''\
"""Fine-tuning with the Hugging Face Trainer."""

import argparse

from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

from trainer.data import load_dataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="sshleifer/tiny-gpt2")
    args = parser.parse_args()
    assert (
        args.model
    ), "Please name a model with --model, e.g. --model=sshleifer/tiny-gpt2"
    model = AutoModelForCausalLM.from_pretrained(
        args.model, torch_dtype="bfloat16"
    )
    training_args = TrainingArguments(
        output_dir="out", per_device_train_batch_size=8, bf16=True
    )
    trainer = Trainer(
        model=model, args=training_args, train_dataset=load_dataset()
    )
    trainer.train()
'''
BLACK_ASSERT = """\
    assert (
        args.model
    ), "Please name a model with --model, e.g. --model=sshleifer/tiny-gpt2"
"""


def test_a_file_black_passes_and_ruff_would_reformat_gets_only_its_edits_formatted(tmp_path):
    """tloen/alpaca-lora's shape: black at 79 columns passes the file, ruff's formatter would lay its assert
    out otherwise, so the file is not formatted whole; the statements the bot wrote still fit in 79."""
    root = tmp_path / "target"
    repo = trainer_repo(root, f"{PROJECT}\n[tool.black]\nline-length = 79\n")
    (root / "trainer/sft.py").write_text(BLACK_SFT)
    commit_all(repo, "black-formatted fine-tuning")
    base = repo.head.commit.hexsha
    assert ruff(root, "format", "--line-length", "79", "--check", "trainer/sft.py").returncode == 1
    apply_tiers(root, 1, 2)
    sft = (root / "trainer/sft.py").read_text()
    assert BLACK_ASSERT in sft  # what the bot did not write stays as it was
    diff = repo.git.diff(base, "HEAD", "--", "trainer/sft.py")
    added = [line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert any("dataloader_num_workers=" in line for line in added)
    code = [line for line in added if not line.lstrip().startswith("#")]
    assert max(map(len, code)) <= 79, [line for line in code if len(line) > 79]


def test_a_line_put_right_after_an_import_block_gets_the_blank_lines_the_target_asks_for(tmp_path):
    """huggingface/peft's shape: ``lines-after-imports = 2``. The constant the bot puts after the imports would
    leave one blank line; the block, sorted before, gets its two, and a block the bot did not touch stays."""
    from bot.tidy import tidy

    (tmp_path / "pyproject.toml").write_text(
        f"{PROJECT}\n[tool.ruff.lint]\nselect = ['I']\n\n[tool.ruff.lint.isort]\nlines-after-imports = 2\n"
    )
    original = (
        "import os\n\n\nWORKERS = os.cpu_count()\n\n\ndef main():\n    import sys\n    return sys.argv\n"
    )
    script = tmp_path / "train.py"
    script.write_text(
        original.replace("\n\n\nWORKERS", "\n\n# perfbot: workers\nLOADER_WORKERS = 2\nWORKERS")
    )
    tidy(tmp_path, {"train.py": original})
    assert script.read_text().startswith("import os\n\n\n# perfbot: workers\nLOADER_WORKERS = 2\nWORKERS")
    assert ruff(tmp_path, "check", "train.py").returncode == 0
