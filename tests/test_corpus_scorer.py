"""The scorer of the corpus (`python -m benchmarks.corpus`) on tiny repositories made here: its manifest
validation, the snapshot from a mirror, the launch-import check, the reason checks, and the found/extra counts
of a real perfbot run. No network."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import git
import pytest
from git_repos import commit_all, make_repo

from benchmarks.corpus.__main__ import main
from benchmarks.corpus.citations import LineCounts, citations, false_citations
from benchmarks.corpus.commits import CommitFacts, added_imports
from benchmarks.corpus.evaluate import evaluate
from benchmarks.corpus.imports import Tree
from benchmarks.corpus.lint import new_lint
from benchmarks.corpus.manifest import Expect, Launch, Manifest, ManifestError, load, load_all, matches
from benchmarks.corpus.materialise import Unavailable, materialise
from benchmarks.corpus.perfbot import Site
from benchmarks.corpus.score import Extra, _overrides, check_imports, judge
from benchmarks.corpus.table import markdown_summary, repository_table, summary

KNOWN = ("dataloader_workers", "fused_adamw", "prefetcher", "sdpa", "tf32")
SHA = "0123456789abcdef0123456789abcdef01234567"

GOOD = f"""
[repository]
source = "github:someone/toy"
commit = "{SHA}"
shape = "gpt-loop"
read_on = "2026-12-07"
include = ["*.py", "configs/**"]

[[launch]]
command = "torchrun --nproc_per_node=2 train.py"
where = "README.md:3"
runs = "train.py"

[run]
precision = "fp32 (train.py:1)"

[[expect]]
optimization = "fused_adamw"
verdict = "change"
files = ["train.py"]
where = "train.py:12"
note = "torch.optim.AdamW(...)"
"""

# A training program of our own: an fp32 loop whose DataLoader has no workers.
LOOP = """import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    main()
"""


# A module of the program's with a loader of its own, which no expectation names.
DATA = """from torch.utils.data import DataLoader


def loader_of(data):
    return DataLoader(data, batch_size=8)
"""


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return folder / name


def manifest(**fields: object) -> Manifest:
    """A github manifest with `fields` replaced."""
    base = Manifest(
        name="toy",
        path=Path("toy.toml"),
        source="github:someone/toy",
        commit=SHA,
        shape="gpt-loop",
        read_on="2026-12-07",
    )
    return dataclasses.replace(base, **fields)  # type: ignore[arg-type]


# --- the manifest -----------------------------------------------------------------------------------------------


def test_a_valid_file_loads_frozen(tmp_path: Path) -> None:
    loaded = load(write(tmp_path, "someone__toy.toml", GOOD), KNOWN)
    assert (loaded.name, loaded.kind, loaded.target) == ("someone__toy", "github", "someone/toy")
    assert loaded.launches == (Launch("torchrun --nproc_per_node=2 train.py", "train.py", "README.md:3"),)
    assert loaded.expects[0] == Expect(
        "fused_adamw", "change", ("train.py",), "train.py:12", "torch.optim.AdamW(...)"
    )
    assert loaded.includes("configs/a/b.yaml") and not loaded.includes("sub/x.py")
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded.commit = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        (
            'optimization = "fused_adamw"',
            'optimization = "fused_adamz"',
            "unknown optimization 'fused_adamz'",
        ),
        (
            'verdict = "change"',
            'verdict = "maybe"',
            "unknown verdict 'maybe'; one of change, already, refuse",
        ),
        (f'commit = "{SHA}"', 'commit = "abc123"', "[repository].commit 'abc123' is not 40"),
        (f'commit = "{SHA}"\n', "", "[repository].commit '' is not 40"),
        ('files = ["train.py"]\n', "", "[[expect]] #1: missing field(s) files"),
        ('shape = "gpt-loop"\n', "", "[repository]: missing field(s) shape"),
        ('runs = "train.py"\n', "", "[[launch]] #1: missing field(s) runs"),
        ('note = "torch', 'nte = "torch', "[[expect]] #1: unknown key(s) nte"),
        ('shape = "gpt-loop"', 'shape = "gpt"', "[repository].shape 'gpt' is not one of"),
        ('source = "github:someone/toy"', 'source = "gitlab:x/y"', "neither github:owner/name nor pypi"),
        ("[[expect]]", "[expect]", "[[expect]] must be an array of tables"),
        ("[run]", "[runs]", "unknown table(s) runs"),
    ],
)
def test_each_problem_names_the_file_and_the_field(tmp_path: Path, old: str, new: str, said: str) -> None:
    assert old in GOOD
    path = write(tmp_path, "someone__toy.toml", GOOD.replace(old, new, 1))
    with pytest.raises(ManifestError) as raised:
        load(path, KNOWN)
    assert str(raised.value).startswith(f"{path}: ")
    assert said in str(raised.value)


def test_a_wheel_source_has_no_commit_and_names_its_files(tmp_path: Path) -> None:
    wheel = GOOD.replace('source = "github:someone/toy"', 'source = "pypi:toy==1.0"')
    with pytest.raises(ManifestError, match="must be empty for a pypi source"):
        load(write(tmp_path, "a.toml", wheel), KNOWN)
    no_include = wheel.replace(f'commit = "{SHA}"', 'commit = ""').replace(
        'include = ["*.py", "configs/**"]\n', ""
    )
    with pytest.raises(ManifestError, match="include is required for a pypi source"):
        load(write(tmp_path, "b.toml", no_include), KNOWN)


def test_the_corpus_files_are_valid() -> None:
    manifests = load_all()
    assert {m.name for m in manifests if m.kind == "pypi"} >= {"pypi__trl-scripts", "pypi__litgpt"}
    assert all(m.expects for m in manifests)


def test_globs_match_part_by_part() -> None:
    assert matches("train.py", "*.py") and not matches("sub/train.py", "*.py")
    assert matches("sub/deeper/train.py", "sub/**/*.py") and matches("sub/train.py", "sub/**/*.py")
    assert matches("configs/a.yaml", "configs/**") and not matches("other/a.yaml", "configs/**")


# --- the snapshot -------------------------------------------------------------------------------------------------


def mirror_of(tmp_path: Path, files: dict[str, str]) -> tuple[Path, str]:
    """A fetch-style mirror of a repository holding `files`: (the mirrors folder, the commit)."""
    source = make_repo(tmp_path / "upstream", files)
    mirrors = tmp_path / "mirrors"
    git.Repo.clone_from(
        str(tmp_path / "upstream"), mirrors / "someone+toy" / "repo", bare=True, no_hardlinks=True
    )
    return mirrors, source.head.commit.hexsha


def drop_blob(mirrors: Path, commit: str, path: str) -> None:
    """Delete the blob of `path` from the mirror, as a mirror that lists a large file but lacks it does."""
    mirror = git.Repo(mirrors / "someone+toy" / "repo")
    sha = mirror.git.rev_parse(f"{commit}:{path}")
    (mirrors / "someone+toy" / "repo" / "objects" / sha[:2] / sha[2:]).unlink()


def test_files_the_mirror_lacks_are_left_out_unless_python(tmp_path: Path) -> None:
    files = {"train.py": LOOP, "data/big.json": "[1, 2]\n", "run.sh": "python train.py\n"}
    mirrors, commit = mirror_of(tmp_path, files)
    drop_blob(mirrors, commit, "data/big.json")
    snapshot = materialise(manifest(commit=commit), tmp_path / "a", tmp_path, mirrors)
    assert snapshot.left_out == ("data/big.json",)
    assert snapshot.repo.git.ls_files().split() == ["run.sh", "train.py"]
    only_data = manifest(commit=commit, include=("data/*.json", "*.py"))
    drop_blob(mirrors, commit, "train.py")
    with pytest.raises(Unavailable, match="lacks kept Python files at [0-9a-f]{40}: train.py$"):
        materialise(only_data, tmp_path / "b", tmp_path, mirrors)


def test_a_missing_mirror_or_commit_is_not_available(tmp_path: Path) -> None:
    mirrors, _ = mirror_of(tmp_path, {"train.py": LOOP})
    gone = evaluate(manifest(source="github:someone/absent"), tmp_path / "w1", tmp_path, mirror_root=mirrors)
    assert not gone.available and "no mirror at" in gone.why
    lacking = evaluate(manifest(), tmp_path / "w2", tmp_path, mirror_root=mirrors)
    assert not lacking.available and f"lacks commit {SHA}" in lacking.why
    assert "not available" in repository_table(lacking) and "not available" in summary([lacking])


# --- the launch-import check ------------------------------------------------------------------------------------


def commit_change(repo: git.Repo, files: dict[str, str]) -> CommitFacts:
    """Write `files` into `repo`, commit them; the facts of that commit against the first commit."""
    root, base = Path(str(repo.working_tree_dir)), repo.head.commit.hexsha
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return CommitFacts(repo, commit_all(repo, "perf: change"), base)


def import_failures(
    tmp_path: Path, files: dict[str, str], change: dict[str, str], **fields: object
) -> list[str]:
    repo = make_repo(tmp_path / "r", files)
    facts = commit_change(repo, change)
    failures, errors = check_imports(facts, "opt", manifest(**fields), Tree(facts.tree(facts.base)))
    return errors + [f"{f.path} {f.context}: {f.why}" for f in failures]


def test_a_relative_import_added_to_a_script_fails(tmp_path: Path) -> None:
    launch = Launch("python train.py --bf16", "train.py")
    change = {"train.py": "from ._perfbot_x import f\n" + LOOP, "_perfbot_x.py": "def f(): ...\n"}
    failures = import_failures(tmp_path, {"train.py": LOOP}, change, launches=(launch,))
    assert failures == [
        "train.py python train.py: relative import in a file run as a script (`python path/file.py`: no parent package)"
    ]


def test_a_relative_import_in_a_top_level_module_fails(tmp_path: Path) -> None:
    change = {"model.py": "from .util import f\n", "util.py": "def f(): ...\n"}
    failures = import_failures(tmp_path, {"model.py": "X = 1\n"}, change)
    assert failures == ["model.py as a module of its package layout: relative import in a top-level module"]


def test_a_new_module_in_a_package_installed_from_the_registry_fails(tmp_path: Path) -> None:
    files = {"src/pkg/__init__.py": "", "src/pkg/train.py": "import torch\n"}
    change = {"src/pkg/train.py": "import torch\nfrom pkg._perfbot_x import f\n", "src/pkg/_perfbot_x.py": ""}
    failures = import_failures(tmp_path, files, change, installed_from_registry=("pkg",))
    assert failures == [
        "src/pkg/train.py as a module of its package layout: "
        "pkg._perfbot_x is new, but pkg is installed from the registry (installed_from_registry)"
    ]
    assert import_failures(tmp_path / "checkout", files, change) == []


def test_good_imports_pass(tmp_path: Path) -> None:
    files = {
        "scripts/train.py": LOOP,
        "scripts/helper.py": "",
        "pkg/__init__.py": "",
        "pkg/util.py": "",
        "pkg/run.py": "",
    }
    change = {
        "scripts/train.py": "import numpy\nimport helper\nfrom pkg.util import f\n" + LOOP,
        "pkg/run.py": "from .util import f\nfrom . import util\n",
    }
    launches = (
        Launch("python scripts/train.py", "scripts/train.py"),
        Launch("cd . && python -m pkg.run", "pkg/run.py"),
    )
    assert import_failures(tmp_path, files, change, launches=launches) == []


def test_an_import_of_a_missing_repository_module_and_a_syntax_error_fail(tmp_path: Path) -> None:
    files = {"pkg/__init__.py": "", "pkg/a.py": "", "pkg/b.py": ""}
    change = {"pkg/a.py": "from pkg.nothere import f\n", "pkg/b.py": "def (:\n"}
    failures = import_failures(tmp_path, files, change)
    assert failures[0].split(" ", 1)[1].startswith("pkg/b.py: invalid syntax")
    assert (
        failures[1]
        == "pkg/a.py as a module of its package layout: no module pkg.nothere in the repository root/"
    )


def test_added_imports_are_only_the_new_statements() -> None:
    before = "import os\nfrom a import b\n"
    after = "import os\nimport sys\nfrom a import b\ntry:\n    import liger\nexcept ImportError:\n    pass\n"
    added = added_imports(before, after)
    assert [str(i) for i in added] == ["import sys", "import liger"]
    assert [i.guarded for i in added] == [False, True]


# --- keep, reasons, judging ---------------------------------------------------------------------------------------


def test_a_commit_touching_a_kept_line_overrides_it(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"train.py": "a = 1\nworkers = 0  # on purpose\nc = 3\n"})
    facts = commit_change(repo, {"train.py": "import x\na = 1\nworkers = 4\nc = 3\n"})
    kept = Expect("dataloader_workers", "keep", ("train.py",), "train.py:2", "num_workers=0 chosen")
    elsewhere = Expect("tf32", "keep", ("other.py",), "train.py:3", "")
    said = _overrides(facts, "prefetcher", [kept, elsewhere])
    assert len(said) == 1 and "touches train.py:2: kept dataloader_workers" in said[0]
    assert (
        _overrides(facts, "dataloader_workers", [Expect("dataloader_workers", "keep", ("train.py",))]) != []
    )


def test_a_line_inserted_next_to_a_kept_line_overrides_it_only_for_its_optimization(tmp_path: Path) -> None:
    launch = "python train.py \\\n    --optim paged_adamw_32bit \\\n"
    repo = make_repo(tmp_path / "r", {"run.sh": launch})
    facts = commit_change(repo, {"run.sh": launch + "    --dataloader_num_workers 4\n"})
    kept = Expect("fused_adamw", "keep", ("run.sh",), "run.sh:2", "paged optimizer on purpose")
    assert _overrides(facts, "dataloader_workers", [kept]) == []
    [said] = _overrides(facts, "fused_adamw", [kept])
    assert "touches run.sh:2: kept fused_adamw" in said


def test_reasons_must_cite_lines_that_exist() -> None:
    texts = {"a.py": "1\n2\n3\n", "sub/b.yaml": "x: 1\n"}
    lines = LineCounts(frozenset(texts), texts.get)
    said = "see a.py:3, b.yaml:1 (beside it), a.py:9 and at line 7"
    assert [str(c) for c in false_citations(said, "sub/c.py", lines)] == ["a.py:9", "sub/c.py:7"]
    assert citations("no file cited here, torch 2.4") == []


def site(kind: str, path: str = "a.py", text: str = "") -> Site:
    return Site("dataloader_workers", path, 3, text, "", kind)


@pytest.mark.parametrize(
    ("verdict", "sites", "committed", "found", "how"),
    [
        ("change", [site("change")], set(), True, "change site a.py:3"),
        ("change", [], {"a.py"}, True, "committed a.py"),
        ("change", [site("refused")], set(), False, "refused there: a.py:3"),
        ("change", [site("change", "b.py")], set(), False, "elsewhere only: b.py:3"),
        ("already", [site("already")], set(), True, "already site a.py:3"),
        ("refuse", [site("refused")], set(), True, "refused site a.py:3"),
        (
            "keep",
            [site("refused", text="kept: chosen on purpose (a.py:2)")],
            set(),
            True,
            "said kept: a.py:3",
        ),
        ("keep", [site("already")], set(), True, "already site a.py:3 (not worded as kept)"),
        ("keep", [site("change")], set(), False, "change there: a.py:3"),
        ("proposal", [site("refused", text="a proposal for the plan")], set(), True, "proposal site a.py:3"),
        ("proposal", [site("refused")], {"a.py"}, False, "committed a.py"),
        ("already", [], set(), False, "no site"),
    ],
)
def test_judge(verdict: str, sites: list[Site], committed: set[str], found: bool, how: str) -> None:
    judged = judge(Expect("dataloader_workers", verdict, ("a.py",)), sites, committed)
    assert (judged.found, judged.how) == (found, how)


# --- a real perfbot run ---------------------------------------------------------------------------------------------


def test_found_and_extra_on_a_real_run(tmp_path: Path) -> None:
    files = {"train.py": LOOP, "data.py": DATA, "README.md": "python train.py\n", "notes/x.txt": "x\n"}
    mirrors, commit = mirror_of(tmp_path, files)
    expects = (
        Expect(
            "dataloader_workers", "change", ("train.py",), "train.py:7", "DataLoader(...) without workers"
        ),
        Expect("sdpa", "change", ("train.py",), "", "no attention here: a miss"),
    )
    launches = (Launch("python train.py", "train.py"),)
    toy = manifest(commit=commit, include=("*.py", "*.md"), launches=launches, expects=expects)
    result = evaluate(toy, tmp_path / "work", tmp_path / "cache", timeout=300, mirror_root=mirrors)
    repo = git.Repo(tmp_path / "work" / "toy")
    assert repo.git.ls_tree("-r", "--name-only", "main").split() == ["README.md", "data.py", "train.py"]
    assert result.available and result.problems == [], result.problems
    # tier 1: one commit; tier 2: nothing to apply in this plan (exit 2, said so)
    assert [step["returncode"] for step in result.steps] == [0, 0, 0, 2]
    assert [(j.optimization, j.found) for j in result.judged] == [
        ("dataloader_workers", True),
        ("sdpa", False),
    ]
    assert result.found == 1 and result.judged[1].how == "no site"
    landed = repo.git.rev_list("--all", "^main")
    assert result.commits == 1
    assert result.extra == [Extra(landed[:10], "dataloader_workers", ("data.py",))]
    assert result.import_failures == result.compile_errors == result.overridden == []
    assert "| **total (1 run)** | **1/2** | **50%** | **1** | **1** |" in markdown_summary([result])
    assert "toy (github:someone/toy): found 1/2 (50%), 1 commit(s)" in repository_table(result)


def test_the_command_line_writes_json_and_rejects_a_bad_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mirrors, _ = mirror_of(tmp_path, {"train.py": LOOP})
    write(tmp_path / "repos", "someone__toy.toml", GOOD)
    out = tmp_path / "out.json"
    assert main(["--repos", str(tmp_path / "repos"), "--mirrors", str(mirrors), "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["totals"]["not_available"] == 1 and data["repositories"][0]["available"] is False
    write(tmp_path / "repos", "someone__bad.toml", GOOD.replace('verdict = "change"', 'verdict = "yes"'))
    assert main(["--repos", str(tmp_path / "repos")]) == 2
    assert "someone__bad.toml: [[expect]] #1: unknown verdict 'yes'" in capsys.readouterr().err


def test_new_lint_lists_only_violations_the_change_added() -> None:
    before = {"a.py": "import os\n\nprint(os.sep)\n", "b.txt": "x"}
    after = {"a.py": "import os\nimport sys\n\nprint(os.sep, undefined_name)\n", "b.txt": "y"}
    assert new_lint(["a.py", "b.txt"], before.get, after.get) == [
        "a.py: F401 `sys` imported but unused",
        "a.py: F821 Undefined name `undefined_name`",
    ]


def test_a_run_record_is_written_read_back_and_shown_in_the_reference(tmp_path: Path) -> None:
    import datetime

    from benchmarks.corpus.record import load_corpus_records, write_record
    from benchmarks.reference import corpus_section

    earlier = datetime.datetime(2026, 12, 7, 9, 0, tzinfo=datetime.UTC)
    later = earlier + datetime.timedelta(hours=3)
    write_record([], "python -m benchmarks.corpus --record", later, tmp_path / "corpus")
    first = write_record([], "python -m benchmarks.corpus --only x --record", earlier, tmp_path / "corpus")
    first.rename(first.with_name("zz-earlier.json"))  # file names do not order the runs: their start does
    records = load_corpus_records(tmp_path / "corpus")
    assert [r["started"] for r in records] == ["2026-12-07T09:00+00:00", "2026-12-07T12:00+00:00"]
    section = "\n".join(corpus_section(records))
    assert "Latest: 2026-12-07" in section and "`python -m benchmarks.corpus --record`" in section
    assert section.count("| 2026-12-07 |") == 2
    (tmp_path / "corpus" / "other.json").write_text('{"format": "perfbot.record/v1"}')
    with pytest.raises(ValueError, match="other.json: not a perfbot.corpus/v1 record"):
        load_corpus_records(tmp_path / "corpus")
