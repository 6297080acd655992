"""Whether a training config can reach a trainer, followed through the repository's own functions.

A script may build a ``TrainingArguments`` only to hand it to helpers that read a few of its fields:
LLaMA-Factory's ``scripts/vllm_infer.py`` gives its dataset loader
``Seq2SeqTrainingArguments(output_dir="dummy_dir")``, which reads ``main_process_first()`` and ``seed`` from it.
Nothing trains with that config, so a setting only a trainer reads (dataloader workers, ``non_blocking`` batch
copies) does nothing there, and a commit that adds one misleads its reviewer.

The config is followed from the name it is bound to through its function. Reading an attribute of it or calling
a method on it (``args.seed``, ``args.main_process_first()``) keeps it where it is. Passed to a top-level function
of the repository, it is followed into that function's parameter, up to :data:`MAX_DEPTH` calls deep. Every other
use may reach a trainer: an argument to a trainer or to code outside the repository, a return, an assignment, a
container. So does a config this cannot follow: one not bound to a name, or passed as ``*args``/``**kwargs``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import libcst as cst

from optimizations.program.classes import repository_classes
from optimizations.program.codemod import OptimizationCodemod, code_of, walk
from optimizations.program.model_use import bound_name
from optimizations.program.repository import RepoContext

# How many calls deep a config is followed into the repository's functions (LLaMA-Factory's dataset loader hands
# it four deep).
MAX_DEPTH = 6

Parents = Mapping[cst.CSTNode, cst.CSTNode]
# A called expression to the repository function it is, as ``(name, defining file)``; ``None`` for any other.
Resolver = Callable[[cst.BaseExpression], "tuple[str, str] | None"]


def feeds_no_trainer(codemod: OptimizationCodemod, call: cst.Call) -> bool:
    """Whether the config ``call`` builds can reach no trainer (see the module).

    False where it may reach one, and where that cannot be told.
    """
    parents = codemod.parsed.parents()
    name = bound_name(parents, call)
    if name is None:
        return False
    scope = next(
        (node for node in _ancestors(parents, call) if isinstance(node, cst.FunctionDef)),
        codemod.parsed.module,
    )

    def resolve(func: cst.BaseExpression) -> tuple[str, str] | None:
        index = repository_classes(codemod.repo)
        return next(
            (found for q in codemod.qualified(func) if (found := index.function_file(q.name, codemod.path))),
            None,
        )

    return _stays(scope, name, parents, resolve, depth=0, repo=codemod.repo)


def _ancestors(parents: Parents, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    while (node := parents.get(node)) is not None:
        yield node


def _stays(
    scope: cst.CSTNode,
    name: str,
    parents: Parents,
    resolve: Resolver,
    depth: int,
    repo: RepoContext,
) -> bool:
    """Whether every use of ``name`` in ``scope`` (nested functions included) keeps the config from a trainer
    (see the module)."""
    for node in walk(scope, ()):
        if not isinstance(node, cst.Name) or node.value != name:
            continue
        holder = parents.get(node)
        if isinstance(holder, cst.AssignTarget | cst.Param | cst.Attribute):
            continue  # the binding, ``name.attr`` (a read or a method call), or ``other.name``
        if isinstance(holder, cst.Arg) and holder.keyword is node:
            continue  # ``f(name=...)``: a keyword, not the config
        if not isinstance(holder, cst.Arg) or holder.star or depth >= MAX_DEPTH:
            return False
        outer = parents.get(holder)
        if not isinstance(outer, cst.Call):
            return False
        found = resolve(outer.func)
        if found is None:
            return False
        function, path = found
        if not _stays_in(function, path, outer, holder, depth + 1, repo):
            return False
    return True


def _stays_in(function: str, path: str, call: cst.Call, arg: cst.Arg, depth: int, repo: RepoContext) -> bool:
    """Whether the config passed as ``arg`` of ``call`` stays from a trainer inside the repository ``function``
    that ``path`` defines."""
    parsed = repo.sources.parse(path, repo.read(path))
    definition = next(
        (
            statement
            for statement in parsed.module.body
            if isinstance(statement, cst.FunctionDef) and statement.name.value == function
        ),
        None,
    )
    if definition is None:
        return False
    parameter = _parameter(definition, call, arg)
    if parameter is None:
        return False
    index = repository_classes(repo)

    def resolve(func: cst.BaseExpression) -> tuple[str, str] | None:
        dotted = code_of(func)
        return index.function_file(index.qualify(dotted, path), path) if dotted.isidentifier() else None

    return _stays(definition.body, parameter, parsed.parents(), resolve, depth, repo)


def _parameter(definition: cst.FunctionDef, call: cst.Call, arg: cst.Arg) -> str | None:
    """The name of ``definition``'s parameter that ``arg`` of ``call`` binds; ``None`` where it binds none by
    name (a ``*args`` or ``**kwargs``)."""
    params = definition.params
    if arg.keyword is not None:
        named = [*params.posonly_params, *params.params, *params.kwonly_params]
        return arg.keyword.value if any(p.name.value == arg.keyword.value for p in named) else None
    position = [a for a in call.args if a.keyword is None].index(arg)
    positional = [*params.posonly_params, *params.params]
    return positional[position].name.value if position < len(positional) else None
