"""Whether a training config can reach a trainer, followed through the repository's own functions.

A script may build a ``TrainingArguments`` only to hand it to helpers that read a few of its fields:
LLaMA-Factory's ``scripts/vllm_infer.py`` gives its dataset loader
``Seq2SeqTrainingArguments(output_dir="dummy_dir")``, which reads ``main_process_first()`` and ``seed`` from it.
Nothing trains with that config, so a setting only a trainer reads (dataloader workers, ``non_blocking`` batch
copies, TF32, packing, Liger, a static DDP graph) does nothing there, and a commit that adds one misleads its
reviewer; huggingface/open-r1's ``scripts/run_benchmarks.py`` carries its evaluation settings in an ``SFTConfig``
the same way. Every optimization that sets a trainer's config leaves such a config without a site.

The config is followed from the name it is bound to through its function. Reading an attribute of it or calling
a method on it (``args.seed``, ``args.main_process_first()``) keeps it where it is. Passed to a top-level function
of the repository, it is followed into that function's parameter, up to :data:`MAX_DEPTH` calls deep. Every other
use may reach a trainer: an argument to a trainer or to code outside the repository, a return, an assignment, a
container. So does a config this cannot follow: one not bound to a name, or passed as ``*args``/``**kwargs``.

A config a function builds only when its caller passed none (``if args is None: args = SFTConfig(...)``, as
huggingface/trl's trainers default their ``args``) is the library's default for every caller without a config
of its own, not a run's config: a setting added there changes the library (:func:`fills_in_for_a_parameter`).
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst
import libcst.matchers as m

from optimizations.program.classes import repository_classes
from optimizations.program.model_use import bound_name
from optimizations.program.names import scoped_names
from optimizations.program.queries import FileQuery
from optimizations.program.repository import ParsedFile, RepoContext
from optimizations.program.syntax import code_of
from optimizations.program.values import parameters

# How many calls deep a config is followed into the repository's functions (LLaMA-Factory's dataset loader hands
# it four deep).
MAX_DEPTH = 6

# The registry example of every optimization that sets a trainer's config: an SFTConfig that only a helper of the
# repository reads (huggingface/open-r1's ``scripts/run_benchmarks.py``) gets no site. Its program, and the helper.
HELPER_ONLY_CONFIG_PROGRAM = """\
from trl import SFTConfig

from evaluation import run_benchmark_jobs


def main():
    benchmark_args = SFTConfig(output_dir="", hub_model_id="org/model")
    run_benchmark_jobs(benchmark_args)
"""
HELPER_ONLY_CONFIG_FILES = {
    "evaluation.py": """\
def run_benchmark_jobs(training_args):
    for benchmark in ("math", "code"):
        print(benchmark, training_args.hub_model_id)
""",
}

# A called expression to the repository function it is, with its defining file; ``None`` for any other.
Resolver = Callable[[cst.BaseExpression], "tuple[cst.FunctionDef, str] | None"]


def not_a_run_config(codemod: FileQuery, call: cst.Call) -> bool:
    """Whether the config ``call`` builds is no run's: no trainer reads it (:func:`feeds_no_trainer`), or it is a
    library's default for callers without one (:func:`fills_in_for_a_parameter`). Every optimization that sets a
    trainer's config leaves such a config without a site."""
    return feeds_no_trainer(codemod, call) or fills_in_for_a_parameter(codemod, call)


def feeds_no_trainer(codemod: FileQuery, call: cst.Call) -> bool:
    """Whether the config ``call`` builds can reach no trainer (see the module).

    False where it may reach one, and where that cannot be told.
    """
    name = bound_name(codemod.parsed.parents(), call)
    if name is None:
        return False

    scope = scoped_names(codemod.parsed).scope_of(call)
    return _stays(codemod.parsed, scope, name, codemod.repository_function, depth=0, repo=codemod.repo)


def fills_in_for_a_parameter(codemod: FileQuery, call: cst.Call) -> bool:
    """Whether ``call`` builds the value of a parameter of its function under ``if <parameter> is None:``."""
    parents = codemod.parsed.parents()
    name = bound_name(parents, call)
    above = []
    node = parents.get(call)
    while node is not None and not isinstance(node, cst.FunctionDef):
        above.append(node)
        node = parents.get(node)
    if name is None or node is None:
        return False
    unset = m.Comparison(left=m.Name(name), comparisons=[m.ComparisonTarget(m.Is(), m.Name("None"))])
    return any(isinstance(n, cst.If) and m.matches(n.test, unset) for n in above) and name in parameters(node)


def _stays(
    parsed: ParsedFile, scope: cst.CSTNode, name: str, resolve: Resolver, depth: int, repo: RepoContext
) -> bool:
    """Whether every read of ``name``, bound in ``scope``, keeps the config from a trainer (see the module)."""
    parents = parsed.parents()
    for node in scoped_names(parsed).reads(name, scope):
        holder = parents.get(node)
        if isinstance(holder, cst.Attribute):
            continue  # ``name.attr``: a field read or a method call
        if not isinstance(holder, cst.Arg) or holder.star or depth >= MAX_DEPTH:
            return False
        outer = parents.get(holder)
        if not isinstance(outer, cst.Call):
            return False
        found = resolve(outer.func)
        if found is None:
            return False
        definition, path = found
        if not _stays_in(definition, path, outer, holder, depth + 1, repo):
            return False
    return True


def _stays_in(
    definition: cst.FunctionDef, path: str, call: cst.Call, arg: cst.Arg, depth: int, repo: RepoContext
) -> bool:
    """Whether the config passed as ``arg`` of ``call`` stays from a trainer inside the repository function
    ``definition`` of the file ``path``."""
    parameter = _parameter(definition, call, arg)
    if parameter is None:
        return False
    index = repository_classes(repo)

    def resolve(func: cst.BaseExpression) -> tuple[cst.FunctionDef, str] | None:
        dotted = code_of(func)
        return index.function_definition(index.qualify(dotted, path), path) if dotted.isidentifier() else None

    parsed = repo.sources.parse(path, repo.read(path))
    return _stays(parsed, definition, parameter, resolve, depth, repo)


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
