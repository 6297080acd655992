"""Where a runtime helper is vendored, and how the edited file imports it: every way the file can run."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from optimizations.edits.vendoring import vendor
from optimizations.program.repository import RepoContext
from optimizations.program.runs.resolve import effective_runs
from optimizations.registry import registry
from optimizations.runtime import GPU_FLAGS_RUNTIME


def write(root: Path, files: dict[str, str]) -> None:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


@pytest.mark.parametrize(
    ("files", "expected_target", "expected_file"),
    [
        # A script directory: beside the script, imported by its bare name.
        ({"scripts/train.py": "import torch\n"}, "_perfbot_gpu_flags", "scripts/_perfbot_gpu_flags.py"),
        # A script that imports a package of the repository: in that package, which is importable however the
        # script runs (by path through runpy too, where its own folder is not on the path).
        (
            {"lib/__init__.py": "", "recipes/dev/train.py": "from lib.model import x\n"},
            "lib._perfbot_gpu_flags",
            "lib/_perfbot_gpu_flags.py",
        ),
        # ... found where a script's imports start: beside the script too.
        (
            {"scripts/utils/__init__.py": "", "scripts/train.py": "import torch\nfrom utils import x\n"},
            "utils._perfbot_gpu_flags",
            "scripts/utils/_perfbot_gpu_flags.py",
        ),
        # ... but a package file's absolute imports do not start at its own folder.
        (
            {"pkg/__init__.py": "", "pkg/utils/__init__.py": "", "pkg/train.py": "import utils\n"},
            "._perfbot_gpu_flags",
            "pkg/_perfbot_gpu_flags.py",
        ),
        # A repository whose root is a package: its top-level scripts run from the root, as scripts.
        ({"__init__.py": "", "train.py": "import torch\n"}, "_perfbot_gpu_flags", "_perfbot_gpu_flags.py"),
        # A package file that imports a neighbour relatively runs only as part of its package: the helper is
        # imported in the file's own style, even where it imports another package of the repository too.
        (
            {
                "lib/__init__.py": "",
                "pkg/__init__.py": "",
                "pkg/train.py": "import lib\nfrom .model import Net\n",
            },
            "._perfbot_gpu_flags",
            "pkg/_perfbot_gpu_flags.py",
        ),
        # One that imports its own package absolutely: beside it, imported the same way.
        (
            {
                "pkg/__init__.py": "",
                "pkg/sub/__init__.py": "",
                "pkg/sub/train.py": "from pkg.model import Net\n",
            },
            "pkg.sub._perfbot_gpu_flags",
            "pkg/sub/_perfbot_gpu_flags.py",
        ),
        # The same under a src/ layout.
        (
            {"src/pkg/__init__.py": "", "src/pkg/train.py": "import pkg.model\n"},
            "pkg._perfbot_gpu_flags",
            "src/pkg/_perfbot_gpu_flags.py",
        ),
        # A package of recipes that imports only the library beside it (torchtune's recipes, run by path):
        # in the library, which is what the recipe can import however it is run.
        (
            {
                "lib/__init__.py": "",
                "recipes/__init__.py": "",
                "recipes/lora.py": "import os\nfrom lib import x\n",
            },
            "lib._perfbot_gpu_flags",
            "lib/_perfbot_gpu_flags.py",
        ),
        (
            {
                "src/lib/__init__.py": "",
                "recipes/__init__.py": "",
                "recipes/lora.py": "from lib.model import x\n",
            },
            "lib._perfbot_gpu_flags",
            "src/lib/_perfbot_gpu_flags.py",
        ),
        # Only what the file imports whenever it runs counts: its own package imported inside a function (only
        # for some runs) does not, the library it imports at the top does (Lightning-AI/litgpt's thunder script).
        (
            {
                "lib/__init__.py": "",
                "ext/__init__.py": "",
                "ext/thunder/__init__.py": "",
                "ext/thunder/train.py": "from lib import x\n\n\ndef main():\n    from ext.thunder.strategies import s\n",
            },
            "lib._perfbot_gpu_flags",
            "lib/_perfbot_gpu_flags.py",
        ),
        # Nothing of the repository imported: beside it, relatively, as before.
        (
            {"recipes/__init__.py": "", "recipes/lora.py": "import torch\nfrom torch import nn\n"},
            "._perfbot_gpu_flags",
            "recipes/_perfbot_gpu_flags.py",
        ),
    ],
)
def test_a_helper_goes_where_the_file_can_import_it(tmp_path, files, expected_target, expected_file):
    write(tmp_path, files)
    edited = next(path for path in files if path.endswith(("train.py", "lora.py")))
    ctx = RepoContext(tmp_path)
    assert vendor(ctx, GPU_FLAGS_RUNTIME, edited, ast.parse(files[edited])) == expected_target
    assert list(ctx.vendored) == [expected_file]


LIBRARY = '''\
"""A library with recipes beside it, the way torchtune ships them."""

import torch


def build_model():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 1))
'''

RECIPE = """\
import sys

import torch

from library import build_model


def train(steps):
    torch.manual_seed(0)
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    for step in range(steps):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print("trained", file=sys.stderr)


if __name__ == "__main__":
    train(2)
"""

# The three ways a recipe runs: by path through runpy (torchtune's `tune run`), as a script, as a module.
LAUNCHES = {
    "runpy.run_path": [
        sys.executable,
        "-c",
        "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')",
    ],
    "script": [sys.executable],
    "module": [sys.executable, "-m", "recipes.lora"],
}


@pytest.mark.parametrize("package", ["recipes/__init__.py", "recipes/README.md"], ids=["package", "folder"])
@pytest.mark.parametrize("launch", sorted(LAUNCHES))
def test_a_recipe_edited_by_tf32_runs_every_way_it_ran_before(tmp_path, launch, package):
    write(tmp_path, {"library/__init__.py": LIBRARY, package: "", "recipes/lora.py": RECIPE})
    change = registry()["tf32"].apply(tmp_path)
    assert change is not None and "recipes/lora.py" in change.files
    assert "from library._perfbot_gpu_flags import enable_tf32" in (tmp_path / "recipes/lora.py").read_text()
    command = LAUNCHES[launch] + ([] if launch == "module" else [str(tmp_path / "recipes/lora.py")])
    # The library is importable (installed, say); the recipe's folder is not on the path unless run as a script.
    environment = {**os.environ, "PYTHONPATH": str(tmp_path)}
    elsewhere = tmp_path if launch == "module" else (tmp_path / "elsewhere")
    elsewhere.mkdir(exist_ok=True)
    result = subprocess.run(
        command, cwd=elsewhere, env=environment, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "trained" in result.stderr


LAUNCHED_PACKAGE = {
    "src/pkg/__init__.py": "",
    "src/pkg/trainer.py": "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n\n\n"
    "def train(data):\n"
    '    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")\n'
    '    trainer = Trainer(model=model, args=TrainingArguments(output_dir="o", bf16=True), train_dataset=data)\n'
    "    trainer.train()\n",
    "scripts/train.py": "from pkg.trainer import train\n\nif __name__ == '__main__':\n    train([])\n",
    # PYTHONPATH puts this tree's package on the launched script's path.
    "README.md": "```bash\nPYTHONPATH=src python scripts/train.py\n```\n",
    # An unlaunched study that sorts first and imports nothing of the package.
    "experiments/aaa/run.py": "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n\n"
    'model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")\n'
    'Trainer(model=model, args=TrainingArguments(output_dir="o", bf16=True), train_dataset=[]).train()\n',
}


def test_a_launched_programs_file_places_the_helper_that_an_unlaunched_script_shares(tmp_path):
    write(tmp_path, LAUNCHED_PACKAGE)
    change = registry()["regional_compile"].dry_run(tmp_path)

    assert sorted(change.files) == ["src/pkg/_perfbot_compile.py", "src/pkg/trainer.py"]
    [study] = [site for site in change.sites if site.path == "experiments/aaa/run.py"]
    assert not study.applicable
    assert "_perfbot_compile's one copy, src/pkg/_perfbot_compile.py" in study.reason
    # A plan that names both files focuses the run on them; the launch of the program is still read.
    focused = RepoContext(tmp_path, focus=("experiments/aaa/run.py", "src/pkg/trainer.py"))
    launched = {
        entry.entry: [run.launch is not None for run in entry.runs] for entry in effective_runs(focused)
    }
    assert launched["scripts/train.py"] == [True]
