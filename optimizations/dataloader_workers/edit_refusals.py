"""What ``dataloader_workers`` judges a loader by before it gives it workers: where it is built (import time, a
trainer class), what its dataset is (a stream, items on the GPU) and how the program reads it (only measured,
once per call of an evaluation, or by a loop that replaces each batch before using it)."""

from __future__ import annotations

import libcst as cst

from optimizations.edits.codemod import Identified, OptimizationCodemod
from optimizations.edits.settings_placement import SettingsPlacement
from optimizations.program.classes import repository_classes
from optimizations.program.hf import HF_PACKAGES
from optimizations.program.model_use import bound_name
from optimizations.program.names import scoped_names
from optimizations.program.positions import start_line
from optimizations.program.repository import ParsedFile, RepoContext
from optimizations.program.syntax import NESTED_SCOPES, code_of, keyword, literal_value, qualified_under, walk
from optimizations.program.training_loops import BACKWARD, is_method_call

# torch's iterable-style dataset, as the repository's classes may name their base.
TORCH_ITERABLE_DATASETS = frozenset(
    {"torch.utils.data.IterableDataset", "torch.utils.data.dataset.IterableDataset"}
)
# Libraries whose dataset builders return iterable-style datasets: torchtext's datasets are datapipes (0.12 and
# later), and so are torchdata's iterable datapipes.
ITERABLE_BUILDERS = ("torchtext.datasets", "torchdata.datapipes.iter")


def _is_main_guard(node: cst.If) -> bool:
    test = node.test
    return (
        isinstance(test, cst.Comparison)
        and isinstance(test.left, cst.Name)
        and test.left.value == "__name__"
        and len(test.comparisons) == 1
        and literal_value(test.comparisons[0].comparator) == "__main__"
    )


def _dataset_of(call: cst.Call) -> cst.BaseExpression | None:
    """The dataset a DataLoader call is given: its ``dataset=`` or first positional argument."""
    dataset = keyword(call, "dataset")
    if dataset is not None:
        return dataset.value
    return call.args[0].value if call.args and not call.args[0].keyword else None


def _uses_cuda(parsed: ParsedFile, class_name: str) -> str | None:
    """Where the class ``class_name`` (dotted: ``module.Class``) of ``parsed`` uses CUDA: a ``torch.cuda``
    name, a ``.cuda()`` call or a ``"cuda..."`` device string, as ``code`` at line N; None where it does not."""
    short = class_name.rpartition(".")[2]
    cls = next((c for c in parsed.nodes(cst.ClassDef) if c.name.value == short), None)
    if cls is None:
        return None
    names = scoped_names(parsed)
    for node in walk(cls, ()):
        uses = (
            isinstance(node, cst.Attribute)
            and qualified_under({q.name for q in names.of(node)}, ("torch.cuda",), (node.attr.value,))
            or isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and node.func.attr.value == "cuda"
            or isinstance(node, cst.SimpleString)
            and str(literal_value(node)).startswith("cuda")
        )
        if uses:
            return f"`{code_of(node)}` at {parsed.path}:{start_line(parsed, node)}"
    return None


# How a word of a function's name starts when the function evaluates (`eval_split`, `run_validation`).
EVALUATING = ("eval", "valid", "test", "predict", "generate", "sample")
# torch's contexts (and decorators) that run without gradients.
NO_GRADIENTS = frozenset({"no_grad", "inference_mode"})


def _grandparent(parents: dict[cst.CSTNode, cst.CSTNode], node: cst.CSTNode) -> cst.CSTNode | None:
    """The parent of ``node``'s parent; None above the module's statements."""
    parent = parents.get(node)
    return parents.get(parent) if parent is not None else None


def _loop_iterating(name: cst.Name, parents: dict[cst.CSTNode, cst.CSTNode]) -> cst.For | None:
    """The ``for`` loop that iterates ``name``: ``for x in name``, or through a call such as
    ``enumerate(name)``; None for any other use of the name."""
    parent = parents.get(name)
    if isinstance(parent, cst.For) and parent.iter is name:
        return parent
    call = parents.get(parent) if isinstance(parent, cst.Arg) else None
    loop = parents.get(call) if isinstance(call, cst.Call) else None
    return loop if isinstance(loop, cst.For) and loop.iter is call else None


def _names(node: cst.CSTNode) -> set[str]:
    """The names ``node`` is or holds."""
    return {n.value for n in (node, *walk(node, ())) if isinstance(n, cst.Name)}


def _mentions(node: cst.CSTNode, name: str) -> bool:
    """Whether ``node`` is, or holds, the name ``name``."""
    return name in _names(node)


def _batch_names(loop: cst.For) -> set[str]:
    """The names the loop binds each batch to: its target, less ``enumerate``'s count."""
    target: cst.BaseExpression = loop.target
    counted = isinstance(loop.iter, cst.Call) and code_of(loop.iter.func) == "enumerate"
    if counted and isinstance(target, cst.Tuple) and len(target.elements) == 2:
        target = target.elements[1].value
    return _names(target)


def _replaced_batch(loop: cst.For) -> cst.Assign | None:
    """The statement of the loop's body that assigns every batch name again before any statement reads one
    (``input_ids, targets = get_batch(...)``); None where a batch name is read first."""
    batch = _batch_names(loop)
    body = loop.body.body if isinstance(loop.body, cst.IndentedBlock) else ()
    for statement in body:
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        if isinstance(small, cst.Assign):
            if batch & _names(small.value):
                return None
            assigned = set().union(*(_names(t.target) for t in small.targets))
            if batch and batch <= assigned:
                return small
        elif batch & _names(statement):
            return None
    return None


def _trains(loop: cst.For) -> bool:
    """Whether ``loop``'s body calls a ``.backward()`` or a ``.step()`` anywhere."""
    return any(is_method_call(node, BACKWARD, "step") for node in walk(loop.body, ()))


class LoaderRefusals(SettingsPlacement, OptimizationCodemod):
    """What the program does with a loader that workers would break or waste: the judgments behind each refusal
    of the ``dataloader_workers`` codemod, and the hooks that collect what they need."""

    def __init__(self, context, optimization: Identified, repo: RepoContext):
        super().__init__(context, optimization, repo)
        self.guarded_depth = 0  # inside a function or an `if __name__ == "__main__":` block
        self.iterable_classes: set[str] = set()
        self.iterable_instances: set[str] = set()

    # -- where the code runs ---------------------------------------------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.guarded_depth += 1

    def leave_FunctionDef(self, original_node, updated_node):
        self.guarded_depth -= 1
        return super().leave_FunctionDef(original_node, updated_node)

    def visit_If(self, node: cst.If) -> None:
        if _is_main_guard(node):
            self.guarded_depth += 1

    def leave_If(self, original_node, updated_node):
        if _is_main_guard(original_node):
            self.guarded_depth -= 1
        return updated_node

    # -- iterable datasets: workers would each replay the whole stream ---------------------------------
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        for base in node.bases:
            if qualified_under(self.names(base.value), ("torch.utils.data",), ("IterableDataset",)) or (
                isinstance(base.value, cst.Name) and base.value.value in self.iterable_classes
            ):
                self.iterable_classes.add(node.name.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        if self._builds_iterable(node.value):
            self.iterable_instances.update(
                t.target.value for t in node.targets if isinstance(t.target, cst.Name)
            )

    def _builds_iterable(self, value: cst.BaseExpression) -> bool:
        """A call that builds an iterable-style dataset: of an ``IterableDataset`` class of this file, of a
        library's iterable builder (``ITERABLE_BUILDERS``: pytorch/examples' ``language_translation`` loads
        ``torchtext.datasets.Multi30k``), or a Hugging Face dataset streamed or made iterable."""
        if not isinstance(value, cst.Call):
            return False
        if isinstance(value.func, cst.Name) and value.func.value in self.iterable_classes:
            return True
        names = self.names(value.func)
        if any(name.startswith(f"{package}.") for name in names for package in ITERABLE_BUILDERS):
            return True
        if qualified_under(names, ("datasets",), ("load_dataset",)):
            streaming = keyword(value, "streaming")
            return streaming is not None and literal_value(streaming.value) is not False
        return is_method_call(value, "to_iterable_dataset")

    def _iterable_dataset(self, call: cst.Call) -> cst.CSTNode | None:
        """The loader's dataset argument where it is an ``IterableDataset`` (built from a class of this file, or
        of another module of the repository, ``from mypkg.data import Stream``, that derives from torch's);
        None otherwise."""
        value = _dataset_of(call)
        if value is None:
            return None
        if self._builds_iterable(value) or (
            isinstance(value, cst.Name) and value.value in self.iterable_instances
        ):
            return value
        builder = self._built_by(value)
        if builder is None:
            return None
        bases = repository_classes(self.repo).ancestors(self.path, self.qualified(builder.func))
        return None if bases.isdisjoint(TORCH_ITERABLE_DATASETS) else value

    # -- datasets whose items may be on the GPU, which worker processes cannot touch -------------------
    def _dataset_on_device(self, call: cst.Call) -> str | None:
        """Why the loader's dataset may hold its items on a CUDA device, or None: its class is one of the
        repository's and its code uses CUDA (a replay buffer that keeps experience on the GPU). A worker process
        cannot touch CUDA tensors, and perfbot cannot tell that the items stay on the host."""
        dataset = _dataset_of(call)
        builder = self._built_by(dataset)
        if builder is None or dataset is None:  # no dataset: no builder either
            return None
        found = repository_classes(self.repo).class_of(self.path, self.qualified(builder.func))
        if found is None:
            return None
        definition, path = found
        evidence = _uses_cuda(self.repo.sources.parse(path, self.repo.read(path)), definition.name)
        if evidence is None:
            return None
        return (
            f"the dataset `{code_of(dataset)}` is a `{code_of(builder.func)}`, whose code uses CUDA "
            f"({evidence}): its items may be on the GPU, which worker processes cannot touch"
        )

    # -- how the program reads the loader --------------------------------------------------------------
    def _only_measured(self, call: cst.Call) -> cst.Call | None:
        """The first ``len(loader)`` where the loader ``call`` builds is bound to a name that is only ever
        measured (a step count estimated from it) in its function; None where it is used any other way."""
        parents = self.parsed.parents()
        name, binding = bound_name(parents, call), parents.get(call)
        if name is None:
            return None
        scope = self.values.function_of(call) or self.parsed.module
        lengths = []
        for node in walk(scope, ()):
            # every mention of the name but the one the loader is bound to
            if (
                isinstance(node, cst.Name)
                and node.value == name
                and _grandparent(parents, node) is not binding
            ):
                argument, measure = parents.get(node), _grandparent(parents, node)
                if not (isinstance(argument, cst.Arg) and isinstance(measure, cst.Call)):
                    return None
                if code_of(measure.func) != "len":
                    return None
                lengths.append(measure)
        return lengths[0] if lengths else None

    def _evaluated_per_call(self, call: cst.Call) -> tuple[cst.FunctionDef, cst.For, cst.FunctionDef] | None:
        """The function, its first loop and a caller, where the loader ``call`` builds is bound to a name in a
        function that evaluates (named for it, or iterating without gradients), is called by another function
        of the file, and iterates it only by loops that neither back-propagate nor step; None otherwise (a loop
        may train through a helper the name does not show; a script's entry point runs once)."""
        parents = self.parsed.parents()
        name, binding = bound_name(parents, call), parents.get(call)
        function = self.values.function_of(call)
        if name is None or function is None:
            return None
        loops = []
        for node in walk(function, ()):
            if (
                isinstance(node, cst.Name)
                and node.value == name
                and _grandparent(parents, node) is not binding
            ):
                loop = _loop_iterating(node, parents)
                if loop is None:
                    return None
                loops.append(loop)
        if not loops or any(_trains(loop) for loop in loops):
            return None
        parts = function.name.value.lower().split("_")
        named = any(part.startswith(EVALUATING) for part in parts)
        if not named and not all(self._without_gradients(loop, function) for loop in loops):
            return None
        caller = self._caller(function)
        return (function, loops[0], caller) if caller is not None else None

    def _caller(self, function: cst.FunctionDef) -> cst.FunctionDef | None:
        """The first function of this file that calls ``function`` (by name, or as a method): a helper called
        from the program's own code, not an entry point that a launcher (``fire.Fire(main)``) runs once."""
        for call in self.nodes(cst.Call):
            callee = call.func.attr if isinstance(call.func, cst.Attribute) else call.func
            if isinstance(callee, cst.Name) and callee.value == function.name.value:
                caller = self.values.function_of(call)
                if caller is not None and caller is not function:
                    return caller
        return None

    def _discarded_batches(self, call: cst.Call) -> tuple[cst.For, cst.Assign] | None:
        """A training loop over the loader ``call`` builds (bound to a name in its function, or returned from it
        to a caller of this file that binds it) whose every batch name is assigned again, by the assignment
        returned, before the loop reads it: the loader's batches are thrown away. None otherwise."""
        parents = self.parsed.parents()
        name, function = bound_name(parents, call), self.values.function_of(call)
        if name is None:
            return None
        holders: list[tuple[str, cst.CSTNode]] = [(name, function or self.parsed.module)]
        if function is not None and any(
            isinstance(node, cst.Return) and node.value is not None and _mentions(node.value, name)
            for node in walk(function.body, NESTED_SCOPES)
        ):
            for caller in self.nodes(cst.Call):
                if isinstance(caller.func, cst.Name) and caller.func.value == function.name.value:
                    bound, calling = bound_name(parents, caller), self.values.function_of(caller)
                    if bound is not None:
                        holders.append((bound, calling or self.parsed.module))
        for held, scope in holders:
            for node in walk(scope, NESTED_SCOPES):
                if isinstance(node, cst.Name) and node.value == held:
                    loop = _loop_iterating(node, parents)
                    replaced = _replaced_batch(loop) if loop is not None and _trains(loop) else None
                    if loop is not None and replaced is not None:
                        return loop, replaced
        return None

    def _without_gradients(self, loop: cst.For, function: cst.FunctionDef) -> bool:
        """Whether ``loop`` runs under ``torch.no_grad()``/``torch.inference_mode()``: a ``with`` around it in
        ``function``, or a decorator of ``function``."""
        parents = self.parsed.parents()
        contexts = [d.decorator for d in function.decorators]
        ancestor = parents.get(loop)
        while ancestor is not None and ancestor is not function:
            if isinstance(ancestor, cst.With):
                contexts += [item.item for item in ancestor.items]
            ancestor = parents.get(ancestor)
        for context in contexts:
            called = context.func if isinstance(context, cst.Call) else context
            if any(
                n.startswith("torch.") and n.rpartition(".")[2] in NO_GRADIENTS for n in self.names(called)
            ):
                return True
        return False

    def _built_by(self, dataset: cst.BaseExpression | None) -> cst.Call | None:
        """The call that builds ``dataset``: itself where it is one, else the call whose result the file assigns
        to it (a name, ``self.buffer``), when there is one."""
        if dataset is None or isinstance(dataset, cst.Call):
            return dataset
        built = [
            node.value
            for node in self.nodes(cst.Assign)
            if isinstance(node.value, cst.Call)
            and any(code_of(target.target) == code_of(dataset) for target in node.targets)
        ]
        return built[0] if len(built) == 1 else None

    # -- the class the loader is built in --------------------------------------------------------------
    def _trainer_class(self, node: cst.CSTNode) -> str | None:
        """The name of the class ``node`` is in when it derives from a transformers or TRL trainer (a
        library's trainer, as huggingface/trl's experimental ``PPOTrainer``), else None."""
        parents = self.parsed.parents()
        owner = parents.get(node)
        while owner is not None and not isinstance(owner, cst.ClassDef):
            owner = parents.get(owner)
        if owner is None:
            return None
        bases = {name for base in owner.bases for name in self.names(base.value)}
        derived = any(
            name.partition(".")[0] in HF_PACKAGES and name.rpartition(".")[2].endswith("Trainer")
            for name in bases
        )
        return owner.name.value if derived else None
