"""How optimizations are found: the folders of a package (``<id>/rule.py``, no install needed) and third-party
entry points."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from optimizations.program.repository import RepoContext
from optimizations.registry import ENTRY_POINT_GROUP, RegistryError, discover, listings, registry

FASTER = """\
import libcst as cst

from optimizations.edits.codemod import OptimizationCodemod
from optimizations.registry import Numerics, Optimization


class _Faster(OptimizationCodemod):
    def leave_Call(self, original_node, updated_node):
        if isinstance(updated_node.func, cst.Name) and updated_node.func.value == "slow":
            self.changed(original_node, "slow() -> fast()")
            return updated_node.with_changes(func=cst.Name("fast"))
        return updated_node


class Faster(Optimization):
    id = "faster"
    title = "fast() instead of slow()"
    tier = 3
    expected = "faster"
    summary = "slow() -> fast()"
    numerics = Numerics.EXACT
    codemods = (_Faster,)
"""


def write_package(
    root: Path, name: str, rules: dict[str, str], modules: dict[str, str] | None = None
) -> None:
    """A package of optimization folders (``<folder>/rule.py`` from ``rules``) and plain ``modules``."""
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text("")
    for folder, text in rules.items():
        (root / name / folder).mkdir()
        (root / name / folder / "__init__.py").write_text("")
        (root / name / folder / "rule.py").write_text(text)
    for module, text in (modules or {}).items():
        (root / name / f"{module}.py").write_text(text)


def write_distribution(root: Path, name: str, entry_points: dict[str, str]) -> None:
    """An installed distribution's metadata (``*.dist-info``) declaring ``bot.optimizations`` entry points."""
    info = root / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    lines = "".join(f"{key} = {value}\n" for key, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{lines}")


@pytest.fixture
def no_entry_points(monkeypatch):
    """As from a source checkout on PYTHONPATH: no installed distribution declares an optimization."""
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **_: [])


def test_builtins_are_found_by_walking_the_package_without_entry_points(no_entry_points):
    found = discover()
    assert set(found) == set(registry())
    assert {"dataloader_workers", "packing", "dpo_precompute", "tf32"} <= set(found)
    assert [(o.tier, o.id) for o in found.values()] == sorted((o.tier, o.id) for o in found.values())


def test_a_new_folder_is_found_without_reinstalling(tmp_path, monkeypatch, no_entry_points):
    reexport = "from registry_fresh.faster.rule import Faster\n"  # imported, not defined: not a second Faster
    write_package(
        tmp_path, "registry_fresh", {"faster": FASTER}, {"reexport": reexport, "helpers": "X = 1\n"}
    )
    # A framework sub-package: no rule.py, so not an optimization.
    (tmp_path / "registry_fresh" / "shared").mkdir()
    (tmp_path / "registry_fresh" / "shared" / "__init__.py").write_text(reexport)
    monkeypatch.syspath_prepend(tmp_path)
    found = discover("registry_fresh")
    assert list(found) == ["faster"]
    result = found["faster"].transform_source("slow()\n", "train.py", RepoContext(tmp_path))
    assert result.source == "fast()\n"
    assert [(s.path, s.line, s.optimization) for s in result.sites] == [("train.py", 1, "faster")]


def test_a_plugin_registers_through_an_entry_point(tmp_path, monkeypatch):
    write_package(tmp_path, "registry_plugin", {"faster": FASTER})
    write_distribution(tmp_path, "registry-plugin", {"faster": "registry_plugin.faster.rule:Faster"})
    monkeypatch.syspath_prepend(tmp_path)
    found = discover()
    assert "faster" in found and set(registry()) <= set(found)
    assert type(found["faster"]).__module__ == "registry_plugin.faster.rule"


def test_a_plugin_reusing_a_builtin_id_is_an_error_naming_both(tmp_path, monkeypatch):
    write_package(tmp_path, "registry_clash", {"tf32": FASTER.replace('id = "faster"', 'id = "tf32"')})
    write_distribution(tmp_path, "registry-clash", {"tf32": "registry_clash.tf32.rule:Faster"})
    monkeypatch.syspath_prepend(tmp_path)
    with pytest.raises(
        RegistryError, match="optimizations.tf32.rule:Tf32 and registry_clash.tf32.rule:Faster"
    ):
        discover()


def test_two_folders_with_one_id_is_an_error_naming_both(tmp_path, monkeypatch, no_entry_points):
    twin = FASTER.replace("class Faster(", "class Quicker(")
    write_package(tmp_path, "registry_twins", {"a": FASTER, "b": twin})
    monkeypatch.syspath_prepend(tmp_path)
    with pytest.raises(RegistryError) as error:
        discover("registry_twins")
    assert "two optimizations register the id 'faster'" in str(error.value)
    assert "registry_twins.a.rule:Faster" in str(error.value)
    assert "registry_twins.b.rule:Quicker" in str(error.value)


def test_an_empty_registry_is_an_error_that_says_what_to_do(tmp_path, monkeypatch, no_entry_points):
    write_package(tmp_path, "registry_empty", {}, {"helpers": "X = 1\n"})
    monkeypatch.syspath_prepend(tmp_path)
    with pytest.raises(RegistryError, match="no optimizations found .* PYTHONPATH"):
        discover("registry_empty")


@pytest.mark.parametrize(
    ("package", "declared", "complaint"),
    [
        ("contract_missing", "", "does not set numerics"),
        ("contract_unexplained", "    numerics = Numerics.ROUNDING\n", "sets no numerics_reason"),
        ("contract_string", '    numerics = "exact"\n', "use Numerics.EXACT"),
    ],
)
def test_the_registry_refuses_an_optimization_without_a_contract(
    tmp_path, monkeypatch, no_entry_points, package, declared, complaint
):
    write_package(tmp_path, package, {"faster": FASTER.replace("    numerics = Numerics.EXACT\n", declared)})
    monkeypatch.syspath_prepend(tmp_path)
    with pytest.raises(RegistryError, match=complaint):
        discover(package)
    with pytest.raises(RegistryError, match=complaint):  # `bot list` reads the class from its source
        listings(package)
