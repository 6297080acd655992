"""A repository package without ``__init__.py`` (a PEP 420 namespace package, under ``src/``) is still the
repository's: its config classes are known by the TRL classes they derive from; and packing is refused where
the requirements keep TRL below the release that names its padding-free strategy "bfd", even where a launch
passes the very recipe the edit would switch on (the runs are read as they were before this file's edits)."""

from __future__ import annotations

from pathlib import Path

from git_repos import make_repo
from libcst.metadata import QualifiedName, QualifiedNameSource

from optimizations.program.classes import repository_classes
from optimizations.program.repository import RepoContext
from optimizations.registry import registry

CONFIGS = "import trl\n\n\nclass SFTConfig(trl.SFTConfig):\n    benchmarks: list[str] = []\n"
SCRIPT = """\
from trl import ModelConfig, SFTTrainer, TrlParser

from open_r1.configs import SFTConfig

if __name__ == "__main__":
    parser = TrlParser((SFTConfig, ModelConfig))
    training_args, model_args = parser.parse_args_and_config()
    SFTTrainer(model=model_args.model_name_or_path, args=training_args).train()
"""
RECIPE = "learning_rate: 2.0e-05\nmax_length: 4096\nper_device_train_batch_size: 2\npacking: false\n"
README = "```shell\naccelerate launch src/open_r1/sft.py --config recipes/sft.yaml\n```\n"


def _repo(tmp_path: Path, trl: str) -> None:
    make_repo(
        tmp_path,
        {
            "src/open_r1/configs.py": CONFIGS,
            "src/open_r1/sft.py": SCRIPT,
            "recipes/sft.yaml": RECIPE,
            "README.md": README,
            "setup.py": f'from setuptools import setup\n\nsetup(name="open-r1", install_requires=["{trl}"])\n',
        },
    )


def test_a_namespace_package_class_derives_from_trl(tmp_path: Path) -> None:
    _repo(tmp_path, "trl>=0.20")
    name = QualifiedName("open_r1.configs.SFTConfig", QualifiedNameSource.IMPORT)
    ancestors = repository_classes(RepoContext(tmp_path)).ancestors("src/open_r1/sft.py", [name])
    assert set(ancestors) == {"trl.SFTConfig"}


def test_packing_is_refused_under_a_trl_without_bfd(tmp_path: Path) -> None:
    _repo(tmp_path, "trl==0.18.0")
    change = registry()["packing"].dry_run(tmp_path)
    assert not change.files
    recipe = [s for s in change.sites if s.path == "recipes/sft.yaml"]
    assert recipe and not recipe[0].applicable
    assert (
        'setup.py:3: trl==0.18.0 keeps trl below 0.20, which rejects packing_strategy "bfd"'
        in recipe[0].reason
    )
