"""A recipe repository whose TRL configs are subclassed in its own package (``src/`` layout, re-exported from
``__init__``), parsed by ``TrlParser`` scripts from YAML recipes that a README's commands pass with ``--config``:
the class index follows the names to TRL's classes, and tier 1 lands in the recipes the scripts read."""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path

import pytest
from libcst.metadata import QualifiedName, QualifiedNameSource

from optimizations.edits.recipe_switch import RecipeSetting, switch
from optimizations.program.classes import repository_classes
from optimizations.program.recipes import launches
from optimizations.program.repository import RepoContext
from optimizations.registry import get
from tests.git_repos import make_repo

FIXTURE = Path(__file__).parent / "fixtures" / "subclassed_recipes"
PERFBOT = Path(__file__).resolve().parents[1]
PACKING = RecipeSetting("packing", "true", lambda v: v is True, {"packing_strategy": "bfd"}, "# pack")
IMPORT, LOCAL = QualifiedNameSource.IMPORT, QualifiedNameSource.LOCAL


def _files(root: Path) -> dict[str, str]:
    """The repository's files (not git's or the bot's own), by relative path."""
    paths = (p.relative_to(root) for p in sorted(root.rglob("*")) if p.is_file())
    return {
        p.as_posix(): (root / p).read_text() for p in paths if not any(x.startswith(".") for x in p.parts)
    }


def _ancestors(repo: RepoContext, path: str, name: str, source=IMPORT) -> set[str]:
    return set(repository_classes(repo).ancestors(path, [QualifiedName(name, source)]))


def _added(before: str, after: str) -> list[str]:
    """The lines ``after`` adds to ``before``; fails when it removes or changes any."""
    diff = list(difflib.ndiff(before.splitlines(), after.splitlines()))
    assert not [line for line in diff if line.startswith("- ")], "\n".join(diff)
    return [line[2:] for line in diff if line.startswith("+ ")]


@pytest.fixture
def fixture_repo(tmp_path) -> Path:
    make_repo(tmp_path / "r", _files(FIXTURE))
    return tmp_path / "r"


def test_the_index_follows_star_reexports_aliases_and_bases_to_trl(fixture_repo):
    repo = RepoContext(fixture_repo)
    # train/sft.py: `from tunekit import SupervisedArgs`; __init__ star-imports settings; two levels of bases
    assert _ancestors(repo, "train/sft.py", "tunekit.SupervisedArgs") == {"trl.SFTConfig"}
    # a base imported under an alias: `from trl import DPOConfig as _TrlPreference`
    assert _ancestors(repo, "train/dpo.py", "tunekit.PreferenceArgs") == {"trl.DPOConfig"}
    assert _ancestors(repo, "train/sft.py", "tunekit.RunArgs") == {"trl.ScriptArguments"}
    # a relative import inside the package, and the full module path
    assert _ancestors(repo, "src/tunekit/loading.py", ".settings.SupervisedArgs") == {"trl.SFTConfig"}
    assert _ancestors(repo, "train/sft.py", "tunekit.settings._Tracked") == {"trl.SFTConfig"}
    # a function of the package, a name outside the repository, a name the package does not bind
    for name in ("tunekit.load_policy", "trl.SFTConfig", "torch.nn.Linear", "tunekit.Missing"):
        assert _ancestors(repo, "train/sft.py", name) == set()


def test_local_classes_cycles_and_modules_beside_the_script(tmp_path):
    make_repo(
        tmp_path / "r",
        {
            "jobs/run.py": "import trl\nfrom helpers import Args\n\nclass Local(trl.DPOConfig):\n    pass\n",
            "jobs/helpers.py": "from transformers import TrainingArguments as TA\n\nArgs = TA\n",
            "a.py": "from b import Loop\n",
            "b.py": "from a import Loop\n",
            "c.py": "class A(B):\n    pass\n\nclass B(A):\n    pass\n",
        },
    )
    repo = RepoContext(tmp_path / "r")
    assert _ancestors(repo, "jobs/run.py", "Local", LOCAL) == {"trl.DPOConfig"}
    # `helpers` is found beside the script, as Python finds it; `Args = TA` is an alias, not a subclass
    assert _ancestors(repo, "jobs/run.py", "helpers.Args") == set()
    assert repository_classes(repo).definition("helpers.Args", "jobs/run.py") is None
    assert _ancestors(repo, "a.py", "b.Loop") == set()
    assert _ancestors(repo, "c.py", "A", LOCAL) == set()


def test_tier_one_lands_in_the_recipes_the_readme_passes(fixture_repo):
    before = _files(fixture_repo)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "bot.cli",
            "apply",
            "--tier",
            "1",
            "--plan",
            str(fixture_repo / "PLAN.md"),
            "--repo",
            str(fixture_repo),
        ],
        cwd=PERFBOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Done: 5 landed" in run.stdout
    after = _files(fixture_repo)

    full = _added(before["recipes/full/sft.yaml"], after["recipes/full/sft.yaml"])
    lora = _added(before["recipes/lora/sft.yaml"], after["recipes/lora/sft.yaml"])
    dpo = _added(before["recipes/full/dpo.yaml"], after["recipes/full/dpo.yaml"])
    assert {
        "packing: true",
        "packing_strategy: bfd",
        "dataloader_num_workers: 4",
        "use_liger_kernel: true",
    } <= set(full)
    # LoRA recipe: packing and workers, never Liger; the DPO recipe keeps its own worker count and comment
    assert "packing: true" in lora and "use_liger_kernel: true" not in lora
    assert [line for line in dpo if not line.startswith("#")] == ["precompute_ref_log_probs: true"]
    printed = " ".join(run.stdout.split())  # the table wraps its note column at the width of the output
    assert "recipes/lora/sft.yaml:19 the recipe trains LoRA adapters (use_peft: true)" in printed
    assert "recipes/full/dpo.yaml:11 a DPO recipe" in printed
    # the README is documentation, the package's classes are left as they are
    for path in ("README.md", "src/tunekit/settings.py", "src/tunekit/__init__.py"):
        assert after[path] == before[path]
    for path in (p for p in after if p.endswith(".py") and after[p] != before.get(p)):
        compile(after[path], path, "exec")
        lint = subprocess.run(
            [sys.executable, "-m", "ruff", "check", "--select", "F", "--stdin-filename", path, "-"],
            input=after[path],
            capture_output=True,
            text=True,
            check=False,
        )
        assert lint.returncode == 0, lint.stdout


def test_a_class_that_only_shares_a_config_name_is_no_site(tmp_path):
    make_repo(
        tmp_path / "r",
        {
            "src/kit/__init__.py": "from .args import SFTConfig\n",
            "src/kit/args.py": "from dataclasses import dataclass\n\n@dataclass\nclass SFTConfig:\n    lr: float = 1e-5\n",
            "run.py": "from transformers import HfArgumentParser\nfrom kit import SFTConfig\n\n"
            "(args,) = HfArgumentParser(SFTConfig).parse_args_into_dataclasses()\n",
            "recipe.yaml": "learning_rate: 1.0e-5\nmax_length: 512\n",
            "README.md": "```\npython run.py --config recipe.yaml\n```\n",
        },
    )
    for optimization in ("packing", "dataloader_workers", "liger_guard"):
        assert get(optimization).find(tmp_path / "r") == []


def test_readme_commands_are_read_from_code_blocks_only_and_never_edited(tmp_path):
    make_repo(
        tmp_path / "r",
        {
            "sft.py": "",
            "README.md": (
                "Run `python sft.py --config prose.yaml` as below.\n\n"
                "```bash\n"
                "accelerate launch sft.py --config recipes/{a,b}.yaml\n"
                "python sft.py --config recipes/c.yaml --packing false\n"
                "```\n"
            ),
            "recipes/a.yaml": "learning_rate: 1.0e-5  # small\nmax_length: 512\n",
            "recipes/b.yaml": "packing: true\n",
            "recipes/c.yaml": "max_length: 512\n",
        },
    )
    repo = RepoContext(tmp_path / "r")
    found = launches(repo, "sft.py")
    assert [(f.line, f.configs) for f in found] == [
        (4, ["recipes/a.yaml", "recipes/b.yaml"]),
        (5, ["recipes/c.yaml"]),
    ]
    sites = switch(repo, "sft.py", PACKING, "packing")
    assert [(s.path, s.line, s.applicable, s.already) for s in sites] == [
        ("recipes/a.yaml", 4, True, False),
        ("recipes/b.yaml", 1, False, True),
        ("README.md", 5, False, False),
    ]
    assert "passes --packing false" in sites[2].reason
    assert set(repo.edits) == {"recipes/a.yaml"}
    assert repo.edits["recipes/a.yaml"].startswith("learning_rate: 1.0e-5  # small\n")


def test_liger_in_recipes_needs_the_repository_to_install_it(fixture_repo):
    pyproject = fixture_repo / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('    "liger-kernel>=0.6",\n', ""))
    sites = get("liger_guard").find(fixture_repo)
    parsers = [s for s in sites if s.path.endswith(".py")]
    assert [(s.path, s.applicable) for s in parsers] == [("train/dpo.py", False), ("train/sft.py", False)]
    assert all("does not list it among its requirements" in s.reason for s in parsers)
    # each launch of the scripts is refused too, citing the parser: a flag there would fail without the package
    launched = [s for s in sites if not s.path.endswith(".py")]
    assert launched and not any(s.applicable for s in launched)
    assert all(
        "not among the repository's requirements" in s.reason and "train/" in s.reason for s in launched
    )
