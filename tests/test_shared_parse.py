"""One parse and one metadata resolution per file text, shared by every optimization of a run; the `needs`
pre-filter; dry runs that report refusals without a second pass; and `bot list` without libcst."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import libcst as cst
import libcst.matchers as m
import pytest
from git_repos import EXAMPLE, committed_example, make_repo
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor
from libcst.metadata import ParentNodeProvider, ScopeProvider

from bot.scan import scan
from bot.scope import Scope
from optimizations import registry as registry_module
from optimizations.edits.codemod import OptimizationCodemod
from optimizations.edits.imports import add_imports
from optimizations.program import repository as repository_module
from optimizations.program.names import ScopedNames
from optimizations.program.positions import StartLines
from optimizations.program.repository import RepoContext, SourceCache
from optimizations.registry import Listing, Numerics, get, listings, registry

SFT = """\
from trl import SFTConfig


def build(out):
    return SFTConfig(output_dir=out, packing=False)
"""
DPO_WITH_KWARGS = """\
from trl import DPOConfig


def build(overrides):
    return DPOConfig(output_dir="out", **overrides)
"""


def _examples_with_sites():
    for optimization in registry().values():
        for example in optimization.examples:
            if example.after is not None or example.refusal is not None:
                yield pytest.param(optimization, example, id=f"{optimization.id}-{example.name}")


@pytest.mark.parametrize(("optimization", "example"), list(_examples_with_sites()))
def test_the_prefilter_admits_every_example_that_changes_or_refuses(optimization, example):
    assert optimization.might_apply(example.before), f"{optimization.id} needs one of {optimization.needs}"


def test_the_prefilter_skips_files_that_mention_nothing_an_optimization_needs():
    assert not get("packing").might_apply("import torch\n")
    assert get("packing").might_apply(SFT)


def test_one_text_is_parsed_once_and_an_edited_text_again():
    sources = SourceCache()
    first = sources.parse("train.py", SFT)
    assert sources.parse("train.py", SFT) is first
    edited = sources.parse("train.py", SFT + "x = 1\n")
    assert edited is not first and edited.module.code == SFT + "x = 1\n"
    assert sources.parse("train.py", SFT) is first  # a follow-up codemod's edit does not evict the file
    sources.parse("train.py", SFT + "x = 2\n")
    assert (
        sources.parse("train.py", SFT) is first and sources.parse("train.py", SFT + "x = 1\n") is not edited
    )


def test_a_scan_parses_each_text_once_and_binds_its_names_once_without_libcst_scope_analysis(
    tmp_path, monkeypatch
):
    committed_example(tmp_path / "repo")
    parsed, names, scopes = Counter(), [], []
    original_file, original_names = repository_module.ParsedFile, ScopedNames.__init__
    original_scope = ScopeProvider.__init__

    def counting_file(path, source, cache):
        parsed[(path, source)] += 1
        return original_file(path, source, cache)

    def counting_names(self, *args, **kwargs):
        names.append(self)
        original_names(self, *args, **kwargs)

    def counting_scope(self, *args, **kwargs):
        scopes.append(self)
        original_scope(self, *args, **kwargs)

    monkeypatch.setattr(repository_module, "ParsedFile", counting_file)
    monkeypatch.setattr(ScopedNames, "__init__", counting_names)
    monkeypatch.setattr(ScopeProvider, "__init__", counting_scope)
    scan(tmp_path / "repo")
    assert parsed and max(parsed.values()) == 1
    assert 0 < len(names) <= len(parsed)
    assert scopes == []  # libcst's scope analysis costs about five parses of a file


def test_a_scan_never_parses_a_file_that_mentions_nothing_an_optimization_needs(tmp_path, monkeypatch):
    make_repo(tmp_path, {"train.py": SFT, "util.py": "def double(x):\n    return 2 * x\n"})
    parsed = []
    original = repository_module.ParsedFile

    def counting_file(path, source, cache):
        parsed.append(path)
        return original(path, source, cache)

    monkeypatch.setattr(repository_module, "ParsedFile", counting_file)
    findings = scan(tmp_path)
    assert "train.py" in parsed and "util.py" not in parsed
    assert any(site.path == "train.py" for finding in findings for site in finding.sites)


def test_a_file_that_does_not_parse_is_skipped_with_its_line_whether_or_not_an_optimization_reads_it(
    tmp_path,
):
    broken_plain = "def double(x:\n    return 2 * x\n"
    broken_trainer = SFT + "def tail(:\n    pass\n"  # a file packing would change
    make_repo(tmp_path, {"train.py": SFT, "util.py": broken_plain, "old_train.py": broken_trainer})
    sources = SourceCache()
    scope = Scope.of(tmp_path, sources)
    assert [u.path for u in scope.skipped] == ["old_train.py", "util.py"]
    assert scope.skipped[1].describe().startswith("skipped util.py:1: cannot parse")
    findings = scan(tmp_path, sources=sources, scope=scope)
    touched = {s.path for f in findings for s in f.sites}
    assert "train.py" in touched and not touched & {"util.py", "old_train.py"}


def test_a_scan_lists_the_repository_once_per_pattern(tmp_path, monkeypatch):
    make_repo(tmp_path, {"train.py": SFT, "conf/sft.yaml": "packing: false\n", "run.sh": "python train.py\n"})
    listed = Counter()
    original = RepoContext._list

    def counting_list(self, patterns):
        listed[patterns] += 1
        return original(self, patterns)

    monkeypatch.setattr(RepoContext, "_list", counting_list)
    scan(tmp_path)
    assert listed[("*.py",)] == 1
    assert set(listed.values()) == {1}


def test_metadata_is_resolved_when_a_codemod_first_reads_it(tmp_path):
    class LineOfFirstCall(OptimizationCodemod):
        METADATA_DEPENDENCIES = (*OptimizationCodemod.METADATA_DEPENDENCIES, ParentNodeProvider)

        def visit_Call(self, node):
            if not self.sites:
                self.changed(node, "first call")

    parsed = SourceCache().parse("train.py", SFT)
    ctx = RepoContext(tmp_path)
    LineOfFirstCall(CodemodContext(filename="train.py"), get("packing"), ctx).transform_parsed(parsed)
    assert parsed.wrapper._metadata == {}  # no libcst scope, name, position or parent analysis
    assert StartLines in parsed._derived and ScopedNames not in parsed._derived  # the site's line, no names
    quiet = LineOfFirstCall(CodemodContext(filename="util.py"), get("packing"), ctx)
    no_call = SourceCache().parse("util.py", "x = 1\n")
    quiet.transform_parsed(no_call)
    assert quiet.sites == [] and no_call.wrapper._metadata == {}


def test_a_later_optimization_in_one_run_sees_the_text_an_earlier_one_wrote(tmp_path):
    shared, separate = tmp_path / "shared", tmp_path / "separate"
    make_repo(shared, {"train.py": SFT})
    make_repo(separate, {"train.py": SFT})
    sources = SourceCache()
    for name in ("packing", "dataloader_workers", "liger_guard"):
        get(name).apply(shared, sources=sources)
        get(name).apply(separate)
    assert (shared / "train.py").read_text() == (separate / "train.py").read_text()
    assert "packing=True" in (shared / "train.py").read_text()
    assert "DATALOADER_WORKERS" in (shared / "train.py").read_text()


def test_a_dry_run_writes_nothing_and_says_why_it_changes_nothing(tmp_path):
    make_repo(tmp_path, {"train.py": DPO_WITH_KWARGS, "other.py": "x = 1\n"})
    steps = []
    change = get("dataloader_workers").dry_run(tmp_path, on_step=lambda *step: steps.append(step))
    assert change.files == {} and not change.applied
    assert [s.path for s in change.refused] == ["train.py"] and "**overrides" in change.refused[0].reason
    assert steps == [(1, 2, "other.py"), (2, 2, "train.py")]
    assert (tmp_path / "train.py").read_text() == DPO_WITH_KWARGS


def test_a_dry_run_then_write_is_apply(tmp_path):
    make_repo(tmp_path / "a", {"train.py": SFT})
    make_repo(tmp_path / "b", {"train.py": SFT})
    change = get("packing").dry_run(tmp_path / "a")
    assert (tmp_path / "a" / "train.py").read_text() == SFT
    change.write(tmp_path / "a")
    applied = get("packing").apply(tmp_path / "b")
    assert change.files == applied.files and change.sites == applied.sites
    assert (tmp_path / "a" / "train.py").read_text() == (tmp_path / "b" / "train.py").read_text()


def test_find_reports_the_sites_of_a_full_dry_run_without_finishing_the_edits(tmp_path, monkeypatch):
    committed_example(tmp_path / "example")
    full = {o.id: o.dry_run(tmp_path / "example").sites for o in registry().values()}
    finished = []
    monkeypatch.setattr(registry_module, "check_compiles", lambda *args: finished.append(args))
    found = {o.id: o.find(tmp_path / "example") for o in registry().values()}
    assert found == full and any(full.values())
    assert finished == []  # a scan neither adds imports nor generates and compiles the edited code


def test_scan_reports_each_optimization_as_one_step(tmp_path):
    make_repo(tmp_path, {"train.py": SFT})
    steps = []
    findings = scan(tmp_path, on_step=lambda *step: steps.append(step))
    total = len(registry())
    assert steps == [(done, total, f.optimization.id) for done, f in enumerate(findings, start=1)]


def test_the_shared_node_index_lists_what_findall_finds():
    for path in sorted(EXAMPLE.glob("*.py")):
        parsed = SourceCache().parse(path.name, path.read_text())
        for types, matcher in (((cst.Call,), m.Call()), ((cst.For, cst.While), m.For() | m.While())):
            assert parsed.nodes(*types) == m.findall(parsed.module, matcher), path.name


@pytest.mark.parametrize(
    "needed",
    [
        [("os", None)],
        [("torch", None), ("_perfbot_gpu_flags", "enable_tf32")],
        [("transformers", "AutoModel")],
    ],
)
def test_adding_imports_over_the_leading_statements_equals_libcst_over_the_whole_file(needed):
    odd = {
        "docstring_only": '"""Doc."""\n',
        "definition_first": "def f():\n    return 1\n\n\nimport os\n",
        "commented_follower": '"""Doc."""\nimport sys\n# note\nX = 1\n',
        "empty": "",
    }
    texts = {**{p.name: p.read_text() for p in sorted(EXAMPLE.glob("*.py"))}, **odd}
    for path, text in texts.items():
        module = cst.parse_module(text)
        contexts = [CodemodContext(filename=path), CodemodContext(filename=path)]
        for context in contexts:
            for module_name, name in needed:
                AddImportsVisitor.add_needed_import(context, module_name, name)
        whole = AddImportsVisitor(contexts[1]).transform_module(module)
        assert add_imports(contexts[0], module).code == whole.code, path


def test_listings_read_from_source_match_the_registry():
    assert listings() == [Listing.of(type(o)) for o in registry().values()]


def test_listing_and_help_import_no_libcst():
    code = (
        "import sys; from optimizations.registry import listings; listings(); "
        "from bot.commands import build_parser; build_parser(filled=[]).format_help(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'libcst'))"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_module_whose_listing_is_computed_is_imported(tmp_path, monkeypatch):
    package = tmp_path / "listing_computed"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "late").mkdir()
    (package / "late" / "__init__.py").write_text("")
    (package / "late" / "rule.py").write_text(
        "from optimizations.registry import Numerics, Optimization\n\n"
        "TIER = 2\n\n\n"
        "class Late(Optimization):\n"
        '    id = "late"\n    title = "late"\n    tier = TIER\n    expected = "x"\n    summary = "y"\n'
        "    numerics = Numerics.EXACT\n"
    )
    monkeypatch.syspath_prepend(tmp_path)
    listed = listings("listing_computed", group="no.such.group")
    assert listed == [Listing("late", "late", 2, "x", "y", Numerics.EXACT)]


def test_a_word_need_matches_whole_identifiers_and_a_plain_need_any_text():
    gelu = get("torch_norm_gelu")
    assert not gelu.might_apply('print(f"perf of the interface")\n')
    assert gelu.might_apply("import torch\ny = torch.erf(x)\n")
    # a root or std makes a norm only in a module's forward: a statistics script's np.sqrt is not parsed
    assert not gelu.might_apply("y = x * torch.rsqrt(v + 1e-5)\n")
    assert not gelu.might_apply("import numpy as np\nsem = np.std(x) / np.sqrt(len(x))\n")
    assert gelu.might_apply("def forward(self, x):\n    return x * torch.rsqrt(v + 1e-5)\n")
    assert not get("sdpa").might_apply("loss = F.log_softmax(logits, -1)\n")
    assert get("regional_compile").might_apply("trainer = SFTTrainer(model)\n")  # "Trainer", anywhere


PATH_SETUP = """\
import sys
from pathlib import Path
from functools import partial
# support running without installing as a package
wd = Path(__file__).parent.parent.resolve()
sys.path.append(str(wd))
from lit_gpt.model import GPT
import random

name = "tinyllama"


def main():
    return GPT, partial, random
"""


@pytest.mark.parametrize(
    "setup", ["sys.path.append(str(wd))", "sys.path.insert(0, str(wd))", "sys.path = [str(wd)]"]
)
def test_a_vendored_helper_is_imported_after_the_sys_path_setup_its_package_needs(setup):
    """jzhang38/TinyLlama's pretraining script makes `lit_gpt` importable with `sys.path.append` between its
    imports: a helper vendored into `lit_gpt` imported above that line would fail to import."""
    source = PATH_SETUP.replace("sys.path.append(str(wd))", setup)
    context = CodemodContext(filename="pretrain/tinyllama.py")
    AddImportsVisitor.add_needed_import(context, "os")
    AddImportsVisitor.add_needed_import(context, "lit_gpt._perfbot_gpu_flags", "fused_optimizer_supported")
    added = add_imports(context, cst.parse_module(source)).code
    assert added == source.replace(
        "from functools import partial\n", "from functools import partial\nimport os\n\n"
    ).replace(
        "import random\n", "import random\nfrom lit_gpt._perfbot_gpu_flags import fused_optimizer_supported\n"
    )
    alone = CodemodContext(filename="pretrain/tinyllama.py")
    AddImportsVisitor.add_needed_import(alone, "lit_gpt._perfbot_gpu_flags", "fused_optimizer_supported")
    assert add_imports(alone, cst.parse_module(source)).code == source.replace(
        "import random\n", "import random\nfrom lit_gpt._perfbot_gpu_flags import fused_optimizer_supported\n"
    )
    # a package the leading imports load already needs no setup: the helper joins them, as ruff's E402 wants
    # (Lightning-AI/litgpt's thunder script imports litgpt above its sys.path line)
    first_party = CodemodContext(filename="pretrain/tinyllama.py")
    AddImportsVisitor.add_needed_import(
        first_party, "lit_gpt._perfbot_gpu_flags", "fused_optimizer_supported"
    )
    leading = source.replace("import sys\n", "import sys\nimport lit_gpt\n")
    assert add_imports(first_party, cst.parse_module(leading)).code == leading.replace(
        "from functools import partial\n",
        "from functools import partial\nfrom lit_gpt._perfbot_gpu_flags import fused_optimizer_supported\n\n",
    )


ENVIRONMENT_SETUP = """\
import os
os.environ["CUDA_VISIBLE_DEVICES"] = "0"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
import torch
from model import GPT

STEPS = 10
"""


def test_a_vendored_helper_is_imported_below_the_environment_its_torch_import_reads():
    """A script that sets ``CUDA_VISIBLE_DEVICES`` before it imports torch: a helper (which imports torch)
    imported above that line would initialise torch before the variable is set."""
    context = CodemodContext(filename="train.py")
    AddImportsVisitor.add_needed_import(context, "_perfbot_precision", "bf16_supported")
    added = add_imports(context, cst.parse_module(ENVIRONMENT_SETUP)).code
    assert added == ENVIRONMENT_SETUP.replace(
        "from model import GPT\n", "from model import GPT\nfrom _perfbot_precision import bf16_supported\n"
    )
    # torch imported before the environment is set: the environment cannot reach it, the import stays on top
    early = ENVIRONMENT_SETUP.replace("import os\n", "import os\nimport torch\n", 1)
    context = CodemodContext(filename="train.py")
    AddImportsVisitor.add_needed_import(context, "_perfbot_precision", "bf16_supported")
    assert (
        "import torch\nfrom _perfbot_precision import bf16_supported\n"
        in add_imports(context, cst.parse_module(early)).code
    )
