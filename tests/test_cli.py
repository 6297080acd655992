"""The command line as a user meets it: every bad input exits 2 with one line saying what to do, and leaves
the repository and ``.bot/`` as they were; output that a pipe cuts short ends quietly."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest
from git_repos import make_repo

from bot.cli import main
from optimizations.registry import listings

ROOT = Path(__file__).resolve().parent.parent
TRAIN = (
    "from trl import SFTConfig\n\n\ndef build(out):\n    return SFTConfig(output_dir=out, packing=False)\n"
)
PLAN = "## Tier 1\n\n- opt:dataloader_workers\n"


@pytest.fixture
def target(tmp_path):
    root = tmp_path / "target"
    root.mkdir()
    repo = make_repo(root, {"train.py": TRAIN, "PLAN.md": PLAN})
    return root, repo


def snapshot(root: Path) -> tuple:
    """Everything a refused command must leave alone: HEAD, branches, the tree, and ``.bot/``."""
    import git

    repo = git.Repo(root)
    bot_files = (
        sorted(str(p.relative_to(root)) for p in (root / ".bot").rglob("*"))
        if (root / ".bot").exists()
        else []
    )
    return (
        repo.head.commit.hexsha,
        sorted(h.name for h in repo.heads),
        repo.is_dirty(untracked_files=True),
        bot_files,
    )


def refused(capsys, argv: list[str], message: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("bot: error: ") and message in err, err
    assert "Traceback" not in err


def test_plan_refuses_what_is_not_a_plan_file(tmp_path, capsys):
    refused(capsys, ["plan", "/bin/ls"], "is not UTF-8 text")
    refused(capsys, ["plan", str(tmp_path)], "is a directory")
    empty = tmp_path / "empty.md"
    empty.write_text("  \n")
    refused(capsys, ["plan", str(empty)], "is empty")
    refused(capsys, ["plan", str(tmp_path / "missing.md")], "no plan file")
    prose = tmp_path / "prose.md"
    prose.write_text("We should make training faster somehow.\n")
    refused(capsys, ["plan", str(prose)], "no plan found")


def test_scan_refuses_a_missing_directory(capsys):
    refused(capsys, ["scan", "/nonexistent/repo"], "is not a directory")


def test_unknown_commands_and_abbreviated_options_are_refused(target, capsys):
    root, _ = target
    refused(capsys, ["frobnicate"], "invalid choice")
    refused(
        capsys, ["apply", "--tier", "1", "--repo", str(root), "--pla", "PLAN.md"], "unrecognized arguments"
    )


def test_refused_apply_writes_nothing(target, capsys):
    root, _ = target
    before = snapshot(root)
    refused(
        capsys,
        ["apply", "--tier", "7", "--repo", str(root)],
        "no tier-7 items to apply; tiers with items to apply: 1",  # a number, not a Python list
    )
    assert snapshot(root) == before
    (root / "train.py").write_text(TRAIN + "# edited\n")
    dirty = snapshot(root)
    refused(capsys, ["apply", "--tier", "1", "--repo", str(root)], "uncommitted changes")
    assert snapshot(root) == dirty


def test_plan_items_pointing_outside_the_repository_are_refused(target, capsys, tmp_path):
    root, repo = target
    outside = tmp_path / "outside.md"
    outside.write_text(
        "Performance fixes (apply unconditionally; pure speedups)\n\n| # | File:Line | Change | Expected win |\n"
        "|---|---|---|---|\n| C | ../../etc/train.py:5 | Add dataloader_num_workers=4 | +10% |\n"
    )
    before = snapshot(root)
    refused(
        capsys,
        ["apply", "--tier", "1", "--repo", str(root), "--plan", str(outside)],
        "outside the repository",
    )
    assert snapshot(root) == before


def test_bad_tool_bot_settings_are_bad_input(target, capsys):
    root, repo = target
    (root / "pyproject.toml").write_text("[tool.bot\n")
    repo.git.add("-A")
    repo.git.commit(
        "-qm",
        "broken pyproject",
        env={
            "GIT_AUTHOR_NAME": "d",
            "GIT_AUTHOR_EMAIL": "d@d",
            "GIT_COMMITTER_NAME": "d",
            "GIT_COMMITTER_EMAIL": "d@d",
        },
    )
    before = snapshot(root)
    refused(capsys, ["apply", "--tier", "1", "--repo", str(root)], "is not valid TOML")
    assert snapshot(root) == before


def test_json_is_accepted_before_and_after_the_command(tmp_path, capsys):
    plan = tmp_path / "plan.md"
    plan.write_text(PLAN)
    assert main(["plan", str(plan), "--json"]) == 0
    after = capsys.readouterr().out
    assert main(["--json", "plan", str(plan)]) == 0
    assert capsys.readouterr().out == after and after.lstrip().startswith("{")


def test_a_closed_pipe_ends_quietly():
    process = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "--json", "list"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    process.stdout.close()  # the reader goes away before the bot writes, as `| head -0` would
    stderr = process.stderr.read().decode()
    process.wait(timeout=60)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr


LISTED = ("id", "tier", "numerics", "expected win", "summary")


def squeezed(text: str) -> str:
    return "".join(text.split())


@pytest.mark.parametrize("width", [80, 120])
def test_bot_list_fits_the_terminal_and_wraps_each_cell_inside_its_column(width, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", str(width))
    assert main(["list"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in [header, *rows]) <= width
    # read each cell back from its column (the header says where each starts); rows are apart by a blank line
    starts = [header.index(name) for name in LISTED]
    blocks = "\n".join(rows).split("\n\n")
    read = [
        tuple(
            squeezed("".join(line[start:end] for line in block.splitlines()))
            for start, end in zip(starts, [*starts[1:], None], strict=True)
        )
        for block in blocks
    ]
    assert read == [
        tuple(
            squeezed(cell)
            for cell in (o.id, str(o.tier), o.numerics.shown(o.numerics_reason), o.expected, o.summary)
        )
        for o in listings()
    ]


def test_bot_list_wide_keeps_one_line_per_optimization_whatever_the_width(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["list", "--wide"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["id", "tier", "numerics", "expected", "win", "summary"]
    assert len(rows) == len(listings()) and max(len(row) for row in rows) > 80
    for optimization, row in zip(listings(), rows, strict=True):
        assert row.split()[:2] == [optimization.id, str(optimization.tier)]
        shown = optimization.numerics.shown(optimization.numerics_reason)
        assert shown in row and optimization.expected in row and row.endswith(optimization.summary)


def test_bot_list_reads_the_rules_without_loading_them_or_the_heavy_libraries():
    """What keeps `bot list` about as quick as `bot --help`: the rules are read from their source, and neither
    they nor libcst, torch, GitPython, Jinja2 or rich (the progress bars') are imported."""
    listing = "import sys; from bot.cli import main; main(['list']); print(*sys.modules, file=sys.stderr)"
    done = subprocess.run(
        [sys.executable, "-c", listing], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    imported = set(done.stderr.split())
    assert {"bot.commands.list", "optimizations.registry"} <= imported
    heavy = {"libcst", "torch", "git", "jinja2", "rich"}
    loaded = {
        name
        for name in imported
        if name.partition(".")[0] in heavy or (name.startswith("optimizations.") and name.endswith(".rule"))
    }
    assert not loaded


def test_help_pages_describe_each_command(capsys):
    with pytest.raises(SystemExit):
        main(["scan", "--help"])
    out = capsys.readouterr().out
    assert "where each optimization applies in a repository" in out


def test_version_is_the_installed_package_s(capsys):
    """`bot --version` prints the version pip installed (setuptools-scm's, from the git tag), not a copy."""
    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out == f"perfbot {importlib.metadata.version('perfbot')}\n"


def test_version_of_a_checkout_that_was_never_installed_says_so(monkeypatch, capsys):
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out.startswith("perfbot unknown (not installed")


def test_a_repository_with_a_templates_package_of_its_own_gets_perfbot_s_templates(target):
    """`python -m bot.cli` run inside the repository puts it first on sys.path, where its own `templates`
    package (tloen/alpaca-lora has a `templates` folder) shadowed perfbot's, and `scan --plan` failed."""
    root, repo = target
    (root / "templates").mkdir()
    (root / "templates" / "__init__.py").write_text("")
    drafted = subprocess.run(
        [sys.executable, "-m", "bot.cli", "scan", "--plan", "."],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert drafted.returncode == 0, drafted.stderr
    assert drafted.stdout.startswith("# [perf] target: training throughput plan")
    assert "opt:dataloader_workers" in drafted.stdout
