"""Edits that import under every launch: the ways a file runs (by path, ``-m``, console scripts, imported), one
copy of a helper placed where all of them import it (or the site refused), and apply's commit gate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from git_repos import make_repo

from bot import apply as apply_module
from bot.import_gate import import_problems
from bot.plan import parse_plan
from bot.trackers.local import LocalTracker
from optimizations.program.launch_modes import CONSOLE, IMPORTED, MODULE, SCRIPT, LaunchModes
from optimizations.program.repository import Change, RepoContext
from optimizations.registry import Optimization, registry

LOOP = """\
import sys

import torch
{imports}

def train(steps):
    torch.manual_seed(0)
    model = {model}
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
LINEAR = "torch.nn.Linear(8, 1)"
LIBRARY = "import torch\n\n\ndef build_model():\n    return torch.nn.Linear(8, 1)\n"


def loop(imports: str = "", model: str = LINEAR) -> str:
    return LOOP.format(imports=imports, model=model)


def run(root: Path, *command: str) -> subprocess.CompletedProcess:
    """Run a launch of the target the way its documents do, from its root, with nothing of it installed."""
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, *command], cwd=root, env=environment, capture_output=True, text=True, timeout=300
    )


def test_every_way_a_file_runs_is_read_from_launches_console_scripts_and_imports(tmp_path):
    make_repo(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/train.py": "from .model import Net\n",
            "pkg/model.py": "Net = 1\n",
            "pkg/cli.py": "def main(): ...\n",
            "scripts/a/train.py": "import helpers\n",
            "scripts/a/helpers.py": "",
            "scripts/b/train.py": "",
            "run.sh": "#!/bin/bash\npython pkg/train.py --lr 1 \\\n  --steps 2\ncd . && torchrun --nproc_per_node 2 -m pkg.train\n",
            "README.md": "# x\n\n```bash\naccelerate launch --config_file c.yaml scripts/a/train.py\n```\n",
            "Makefile": "train:\n\t@deepspeed --num_gpus 2 scripts/b/train.py\n",
            "pyproject.toml": '[project]\nname = "pkg"\n[project.scripts]\npkg-train = "pkg.cli:main"\n',
        },
    )
    modes = LaunchModes(RepoContext(tmp_path))
    train = {m.kind: m for m in modes.of("pkg/train.py")}
    assert (
        train[SCRIPT].where == "run.sh:2" and train[SCRIPT].path == ("pkg",) and train[SCRIPT].package is None
    )
    assert (
        train[MODULE].where == "run.sh:4" and train[MODULE].path == ("",) and train[MODULE].package == "pkg"
    )
    assert [m.kind for m in modes.of("pkg/cli.py")] == [CONSOLE]
    assert {m.kind for m in modes.of("pkg/model.py")} == {IMPORTED}
    assert [(m.kind, m.where) for m in modes.of("scripts/a/train.py")] == [(SCRIPT, "README.md:4")]
    assert [(m.kind, m.path) for m in modes.of("scripts/a/helpers.py")] == [(IMPORTED, ("scripts/a",))]
    assert [(m.kind, m.where) for m in modes.of("scripts/b/train.py")] == [(SCRIPT, "Makefile:2")]
    # A relative import breaks where the file runs by path; the error names that launch.
    broken = modes.first_break("pkg/train.py", 1, "model", frozenset())
    assert broken is not None and broken.startswith("run.sh:2 runs it as `python pkg/train.py")


@pytest.mark.parametrize(
    ("readme", "registry_line"),
    [
        ("```\npip install my-lib\n```\n", 2),
        ('Install with `pip install -U "my_lib[extra]>=1"`.\n', 1),
        ("```\npip install my-lib\npip install -e .\n```\n", None),
        ("```\npip install -e '.[dev]'\n```\n", None),
        ("```\npip install other-lib\n```\n", None),
    ],
)
def test_the_documented_setup_says_whether_the_package_comes_from_the_registry(
    tmp_path, readme, registry_line
):
    files = {"my_lib/__init__.py": "", "pyproject.toml": '[project]\nname = "my-lib"\n', "README.md": readme}
    make_repo(tmp_path, files)
    found = LaunchModes(RepoContext(tmp_path)).installation
    assert found.distribution == "my-lib" and found.packages == {"my_lib": ""}
    assert found.registry.startswith(f"README.md:{registry_line} ") if registry_line else not found.registry


def test_a_package_file_run_by_path_and_as_a_module_gets_no_helper_and_says_which_launch(tmp_path):
    files = {
        "pkg/__init__.py": "",
        "pkg/train.py": loop(),
        "run.sh": "#!/bin/bash\npython pkg/train.py\npython -m pkg.train\n",
    }
    make_repo(tmp_path, files)
    change = registry()["tf32"].dry_run(tmp_path)
    assert change.files == {}
    [refused] = change.refused
    assert refused.path == "pkg/train.py"
    assert "run.sh:2 runs it as `python pkg/train.py`" in refused.reason
    assert "relative import" in refused.reason


def test_a_package_file_run_only_by_path_imports_the_helper_beside_it_and_runs(tmp_path):
    files = {"pkg/__init__.py": "", "pkg/train.py": loop(), "run.sh": "#!/bin/bash\npython pkg/train.py\n"}
    make_repo(tmp_path, files)
    change = registry()["tf32"].apply(tmp_path)
    assert change is not None and sorted(change.files) == ["pkg/_perfbot_gpu_flags.py", "pkg/train.py"]
    assert "from _perfbot_gpu_flags import enable_tf32" in (tmp_path / "pkg/train.py").read_text()
    result = run(tmp_path, "pkg/train.py")
    assert result.returncode == 0 and "trained" in result.stderr, result.stderr


@pytest.mark.parametrize("setup", ["pip install mylib", "pip install -e ."])
def test_a_helper_goes_in_the_package_only_where_the_setup_installs_this_tree(tmp_path, setup):
    files = {
        "mylib/__init__.py": LIBRARY,
        "scripts/train.py": loop("from mylib import build_model\n", "build_model()"),
        "pyproject.toml": '[project]\nname = "mylib"\n',
        "README.md": f"```bash\n{setup}\npython scripts/train.py\n```\n",
    }
    make_repo(tmp_path, files)
    change = registry()["tf32"].dry_run(tmp_path)
    helpers = [path for path in change.files if "_perfbot_" in path]
    if setup == "pip install mylib":  # the installed mylib has no helper: beside the script instead
        assert helpers == ["scripts/_perfbot_gpu_flags.py"]
        assert "from _perfbot_gpu_flags import enable_tf32" in change.files["scripts/train.py"]
    else:
        assert helpers == ["mylib/_perfbot_gpu_flags.py"]
        assert "from mylib._perfbot_gpu_flags import enable_tf32" in change.files["scripts/train.py"]


def test_a_console_script_of_a_registry_package_gets_no_helper_in_it(tmp_path):
    files = {
        "mylib/__init__.py": "",
        "mylib/train.py": loop(),
        "pyproject.toml": '[project]\nname = "mylib"\n[project.scripts]\nmytrain = "mylib.train:train"\n',
        "README.md": "```\npip install mylib\n```\n",
    }
    make_repo(tmp_path, files)
    change = registry()["tf32"].dry_run(tmp_path)
    assert change.files == {}
    [refused] = change.refused
    assert "pyproject.toml installs it as the console script `mytrain = mylib.train:train`" in refused.reason
    assert "README.md:2 installs mylib from the package registry" in refused.reason


def test_two_script_folders_get_one_copy_of_a_helper_or_a_refusal_never_two(tmp_path):
    files = {
        "scripts/a/train.py": loop(),
        "scripts/b/train.py": loop(),
        "run.sh": "#!/bin/bash\npython scripts/a/train.py\npython scripts/b/train.py\n",
    }
    make_repo(tmp_path, files)
    change = registry()["tf32"].dry_run(tmp_path)
    assert sorted(change.files) == ["scripts/a/_perfbot_gpu_flags.py", "scripts/a/train.py"]
    [refused] = change.refused
    assert refused.path == "scripts/b/train.py"
    assert (
        "_perfbot_gpu_flags's one copy, scripts/a/_perfbot_gpu_flags.py, cannot be imported" in refused.reason
    )
    assert "run.sh:3 runs it as `python scripts/b/train.py`" in refused.reason


def test_two_script_folders_that_import_one_package_share_its_copy(tmp_path):
    files = {
        "common/__init__.py": LIBRARY,
        "scripts/a/train.py": loop(
            "sys.path.insert(0, '.')\nfrom common import build_model\n", "build_model()"
        ),
        "scripts/b/train.py": loop(
            "sys.path.insert(0, '.')\nfrom common import build_model\n", "build_model()"
        ),
        "run.sh": "#!/bin/bash\npython scripts/a/train.py\npython scripts/b/train.py\n",
    }
    make_repo(tmp_path, files)
    change = registry()["tf32"].apply(tmp_path)
    assert change is not None and not change.refused
    assert [path for path in change.files if "_perfbot_" in path] == ["common/_perfbot_gpu_flags.py"]
    for script in ("scripts/a/train.py", "scripts/b/train.py"):
        assert "from common._perfbot_gpu_flags import enable_tf32" in (tmp_path / script).read_text()
        result = run(tmp_path, script)
        assert result.returncode == 0 and "trained" in result.stderr, result.stderr


def test_a_package_run_with_python_m_imports_its_helper_relatively_as_before(tmp_path):
    files = {
        "pkg/__init__.py": "",
        "pkg/model.py": LIBRARY,
        "pkg/train.py": loop("from .model import build_model\n", "build_model()"),
        "run.sh": "#!/bin/bash\npython -m pkg.train\n",
    }
    make_repo(tmp_path, files)
    change = registry()["tf32"].apply(tmp_path)
    assert change is not None and sorted(change.files) == ["pkg/_perfbot_gpu_flags.py", "pkg/train.py"]
    assert "from ._perfbot_gpu_flags import enable_tf32" in (tmp_path / "pkg/train.py").read_text()
    result = run(tmp_path, "-m", "pkg.train")
    assert result.returncode == 0 and "trained" in result.stderr, result.stderr


class _RelativeHelper(Optimization):
    """Vendors a helper beside the file and imports it relatively, whatever runs the file (the old placement)."""

    id = "relative_helper"
    title = "import a helper relatively"
    tier = 1
    expected = "none"
    summary = "adds `from ._perfbot_x import f` to pkg/train.py"
    keywords = ("relative helper",)

    def dry_run(self, root, exclude=(), focus=(), **_):
        text = (Path(root) / "pkg/train.py").read_text()
        files = {"pkg/train.py": "from ._perfbot_x import f\n" + text, "pkg/_perfbot_x.py": "def f(): ...\n"}
        return Change(self.id, files, [])


def test_apply_drops_a_commit_whose_new_import_breaks_a_launch(tmp_path):
    files = {"pkg/__init__.py": "", "pkg/train.py": loop(), "run.sh": "#!/bin/bash\npython pkg/train.py\n"}
    repo = make_repo(tmp_path, files)
    known = {"relative_helper": _RelativeHelper(), **registry()}
    plan = parse_plan(
        "## Tier 1\n\n- opt:relative_helper\n- opt:dataloader_workers\n", known.values(), "plan"
    )
    base = repo.head.commit.hexsha
    original = apply_module.registry
    apply_module.registry = lambda: known  # type: ignore[assignment]
    try:
        result = apply_module.TierRun.prepare(tmp_path, plan, 1).run(LocalTracker(tmp_path), "t")
    finally:
        apply_module.registry = original
    row = result.progress.row("relative_helper")
    assert row.status == "dropped" and not row.commit
    assert (
        "pkg/train.py:5 `from ._perfbot_x import f` would not import" in row.note
    )  # tidied below the imports
    assert "run.sh:2 runs it as `python pkg/train.py`" in row.note
    assert result.exit_code == 1
    assert list(repo.iter_commits(f"{base}..HEAD")) == []
    assert not repo.is_dirty(untracked_files=True) and not (tmp_path / "pkg/_perfbot_x.py").exists()
    assert json.loads(result.progress.to_json())["rows"][0]["status"] == "dropped"


def test_the_gate_byte_compiles_and_checks_only_imports_the_change_added(tmp_path):
    files = {
        "pkg/__init__.py": "",
        "pkg/train.py": "import os\nfrom pkg import model\n",
        "pkg/model.py": "",
        "run.sh": "#!/bin/bash\npython pkg/train.py\n",
    }
    make_repo(tmp_path, files)
    committed = {path: text for path, text in files.items()}.get
    edits = {
        "pkg/train.py": "import os\nimport numpy\nfrom pkg import model\nfrom pkg.model import x\n",
        "pkg/model.py": "def broken(:\n",
    }
    for path, text in edits.items():
        (tmp_path / path).write_text(text)
    problems = import_problems(tmp_path, edits, committed)
    # numpy is a dependency, `pkg` is imported as it was before (however the script finds it): only the syntax error.
    assert len(problems) == 1 and problems[0].startswith("pkg/model.py:1 does not compile")
    (tmp_path / "pkg/model.py").write_text("")
    (tmp_path / "pkg/train.py").write_text("import os\nfrom pkg import model\nfrom .model import x\n")
    [problem] = import_problems(tmp_path, ["pkg/train.py"], committed)
    assert problem.startswith("pkg/train.py:3 `from .model import x` would not import: run.sh:2 runs it")


def test_the_gate_refuses_a_new_module_of_a_package_the_readme_installs_from_the_registry(tmp_path):
    files = {
        "mylib/__init__.py": LIBRARY,
        "scripts/train.py": "from mylib import build_model\n",
        "pyproject.toml": '[project]\nname = "mylib"\n',
        "README.md": "```bash\npip install mylib\npython scripts/train.py\n```\n",
    }
    make_repo(tmp_path, files)
    edits = {
        "scripts/train.py": "from mylib import build_model\nfrom mylib._perfbot_x import f\n",
        "mylib/_perfbot_x.py": "",
    }
    for path, text in edits.items():
        (tmp_path / path).write_text(text)
    [problem] = import_problems(tmp_path, edits, files.get)
    assert problem.startswith(
        "scripts/train.py:2 `from mylib._perfbot_x import f` would not import: README.md:3 runs"
    )
    assert "README.md:2 installs mylib from the package registry (`pip install mylib`)" in problem


@pytest.mark.parametrize("puts_tree_on_path", ["", "sys.path.insert(0, '.')\n", "PYTHONPATH=. "])
def test_a_package_a_launched_script_cannot_reach_in_the_tree_is_an_installed_copy(
    tmp_path, puts_tree_on_path
):
    """A package folder at the root that a script run by path imports with nothing putting the root on its path
    (no project file, no ``sys.path`` line, no PYTHONPATH: the README installs it from another clone) runs as
    an installed copy, without anything added to the tree's folder: the helper goes beside the script."""
    in_file = "" if puts_tree_on_path.startswith("PYTHONPATH") else puts_tree_on_path
    in_launch = puts_tree_on_path if puts_tree_on_path.startswith("PYTHONPATH") else ""
    files = {
        "mylib/__init__.py": LIBRARY,
        "scripts/train.py": loop(f"{in_file}from mylib import build_model\n", "build_model()"),
        "README.md": "```bash\ngit clone https://example.org/mylib-kit.git && cd mylib-kit && pip install .\n"
        f"{in_launch}accelerate launch scripts/train.py\n```\n",
    }
    make_repo(tmp_path, files)
    edits = {
        "scripts/train.py": files["scripts/train.py"] + "from mylib._perfbot_x import f\n",
        "mylib/_perfbot_x.py": "",
    }
    for path, text in edits.items():
        (tmp_path / path).write_text(text)
    problems = import_problems(tmp_path, edits, files.get)
    if puts_tree_on_path:
        assert problems == []
    else:
        [problem] = problems
        assert "README.md:3 runs it as `accelerate launch scripts/train.py`" in problem
        assert "nothing puts ./ on the path of scripts/train.py" in problem
        assert "its `mylib` is an installed copy, and that copy has no mylib/_perfbot_x.py" in problem
    (tmp_path / "mylib/_perfbot_x.py").unlink()
    (tmp_path / "scripts/train.py").write_text(files["scripts/train.py"])
    change = registry()["tf32"].dry_run(tmp_path)
    helpers = [path for path in change.files if "_perfbot_" in path]
    assert helpers == (
        ["mylib/_perfbot_gpu_flags.py"] if puts_tree_on_path else ["scripts/_perfbot_gpu_flags.py"]
    )
