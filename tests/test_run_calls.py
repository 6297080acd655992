"""A launched script is a training program when running it reaches a function that trains, through the
functions it calls and the modules they import (at the top of a file or inside the calling function)."""

from __future__ import annotations

from pathlib import Path

from optimizations.program.repository import RepoContext
from optimizations.program.run_calls import runs_training
from optimizations.program.runs.resolve import TRAINING_MARKERS

TRAIN_MODULE = """\
from transformers import Trainer


def smart_resize(model, tokenizer):
    model.resize_token_embeddings(len(tokenizer))


def train(model, data):
    Trainer(model=model, train_dataset=data).train()
"""


def _repo(root: Path, files: dict[str, str]) -> RepoContext:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return RepoContext(root)


def test_a_script_reaches_the_trainer_through_functions_that_import_it(tmp_path: Path) -> None:
    repo = _repo(
        tmp_path,
        {
            "scripts/run.py": "def main():\n    from pkg.runner import run\n\n    run()\n\n\n"
            "if __name__ == '__main__':\n    main()\n",
            "src/pkg/__init__.py": "",
            "src/pkg/runner.py": "from .stages import staged\n\n\ndef run():\n    return staged()\n",
            "src/pkg/stages.py": "def staged():\n    from pkg.train import train\n\n    train(None, None)\n",
            "src/pkg/train.py": TRAIN_MODULE,
        },
    )

    assert runs_training(repo, "scripts/run.py", TRAINING_MARKERS)
    assert not runs_training(repo, "scripts/run.py", TRAINING_MARKERS, depth=3)  # four calls deep


def test_a_tool_that_calls_only_a_helper_of_the_training_module_does_not_train(tmp_path: Path) -> None:
    repo = _repo(
        tmp_path,
        {
            "train.py": TRAIN_MODULE,
            "weight_diff.py": "from train import smart_resize\n\n\ndef recover(model, tokenizer):\n"
            "    smart_resize(model, tokenizer)\n\n\nif __name__ == '__main__':\n    recover(None, None)\n",
            "defined_only.py": "from train import train\n\n\ndef later():\n    train(None, None)\n",
        },
    )

    assert not runs_training(repo, "weight_diff.py", TRAINING_MARKERS)
    assert not runs_training(repo, "defined_only.py", TRAINING_MARKERS)  # nothing calls later()


def test_a_function_handed_to_a_cli_runner_is_run(tmp_path: Path) -> None:
    """llama-cookbook's finetuning.py: `fire.Fire(main)` runs main(), which calls the training loop's module."""
    files = {
        "pkg/__init__.py": "",
        "pkg/train_utils.py": "def train(model, loader, optimizer):\n    for batch in loader:\n        model(batch).backward()\n",
        "pkg/finetuning.py": (
            "import fire\n\nfrom pkg.train_utils import train\n\n\ndef main(**kwargs):\n    train(None, [], None)\n"
            '\n\nif __name__ == "__main__":\n    fire.Fire(main)\n'
        ),
    }
    assert runs_training(_repo(tmp_path, files), "pkg/finetuning.py", TRAINING_MARKERS)
    idle = {**files, "pkg/finetuning.py": files["pkg/finetuning.py"].replace("fire.Fire(main)", "pass")}
    assert not runs_training(_repo(tmp_path / "idle", idle), "pkg/finetuning.py", TRAINING_MARKERS)
