"""Every registered optimization's own before/after examples, run as a parametrized test.

An example named ``already…`` is a program that already does what the optimization would do: it must edit
nothing and report only ``already`` sites, at least one (never "no site", never a refusal). An example named
``no_site…`` is code the optimization has no business in (a config no trainer reads): no site at all, not even
a refusal. An example with ``kept`` (a setting chosen on purpose) or ``proposal`` (a change that needs
restructuring) edits nothing and reports such a site, with that fragment in its reason, and none to change."""

from __future__ import annotations

import pytest

from optimizations.program.repository import RepoContext
from optimizations.registry import Optimization, registry


def _cases():
    for optimization in registry().values():
        for example in optimization.examples:
            yield pytest.param(optimization, example, id=f"{optimization.id}-{example.name}")


def _run(optimization: Optimization, example, tmp_path):
    """The example's file result, and the repository context that holds any other file it edited."""
    for name, text in {example.path: example.before, **example.files}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    ctx = RepoContext(tmp_path)
    return optimization.transform_source(example.before, example.path, ctx), ctx


@pytest.mark.parametrize(("optimization", "example"), list(_cases()))
def test_example(optimization, example, tmp_path):
    result, ctx = _run(optimization, example, tmp_path)
    expected = example.before if example.after is None else example.after
    assert result.source == expected
    compile(result.source, example.path, "exec")
    if example.refusal is not None:
        refused = [s for s in result.sites if not s.applicable]
        assert refused, "the example expects a refused site"
        assert any(example.refusal in s.reason for s in refused), [s.reason for s in refused]
    if example.after is not None:
        assert any(s.applicable for s in result.sites)
    for kind, fragment in (("kept", example.kept), ("proposal", example.proposal)):
        if fragment is not None:
            assert example.after is None and not ctx.edits, f"a `{kind}` example edits nothing"
            found = [s for s in result.sites if s.kind == kind]
            assert any(fragment in s.reason for s in found), [(s.kind, s.reason) for s in result.sites]
            assert not any(s.applicable for s in result.sites), [s.message for s in result.sites]
    if example.name.startswith("already"):
        assert example.after is None and example.refusal is None and not ctx.edits, "`already` edits nothing"
        assert result.sites, "an `already` example reports where the program already does it"
        assert all(s.already for s in result.sites), [(s.line, s.message, s.reason) for s in result.sites]
    if example.name.startswith("no_site"):
        assert example.after is None and not result.sites, [
            (s.line, s.message, s.reason) for s in result.sites
        ]


@pytest.mark.parametrize(("optimization", "example"), list(_cases()))
def test_example_is_idempotent(optimization, example, tmp_path):
    once = _run(optimization, example, tmp_path)[0].source
    twice = optimization.transform_source(once, example.path, RepoContext(tmp_path)).source
    assert twice == once


def test_every_optimization_has_examples_of_each_kind():
    """Each shows a change (or, where every change needs restructuring, a proposal), a refusal and a program
    left unchanged."""
    for optimization in registry().values():
        kinds = {
            ("changes" if e.after else "proposes" if e.proposal else "refuses" if e.refusal else "unchanged")
            for e in optimization.examples
        }
        assert {"refuses", "unchanged"} <= kinds and kinds & {"changes", "proposes"}, optimization.id
