"""Dataloader workers: load and collate batches in worker processes, into pinned memory, ahead of the GPU.

Targets ``TrainingArguments``-family configs (``transformers``, ``trl``) and raw
``torch.utils.data.DataLoader(...)`` calls (torchdata's ``StatefulDataLoader`` too, which takes the same
arguments and saves its workers' positions). The worker count is computed once per module at run time
(``min(4, cpu_count - 1)``) so a one-core machine gets 0, and the options that torch rejects with 0 workers
(persistent workers, a prefetch factor) are only switched on when there are workers. Memory is pinned only
where ``torch.cuda.is_available()``: without an accelerator torch warns that pinning does nothing.

A loader is left alone where workers would break it or do nothing: it is built at import time, its dataset is
an ``IterableDataset`` (every worker would replay the stream; torchtext's datasets and streamed Hugging Face
datasets are such streams), its dataset is a repository class whose code
uses CUDA (items a worker process cannot touch), it is only measured (``len(loader)``), never iterated, or it
is built at every call of an evaluation function that other code calls and only scores with it (minGPT's
``eval_split``: persistent workers would start at every call to read the loader once).
So is a config no trainer reads: one handed only to the repository's own helpers that read its fields
(LLaMA-Factory's inference script gives its dataset loader one; :mod:`optimizations.program.config_use`).

A script whose ``HfArgumentParser``/``TrlParser`` fills such a config from flags gets the settings where each
shell launch of it takes them from: its ``--dataloader_num_workers`` flag or its ``--config`` recipe
(``dataloader_num_workers: 4``, pinned memory, persistent workers; :mod:`optimizations.program.recipes`).
"""

from __future__ import annotations

from dataclasses import replace

import libcst as cst
from libcst.helpers import parse_template_expression, parse_template_statement

from optimizations.edits.codemod import OptimizationCodemod
from optimizations.edits.expressions import add_keywords, replace_keyword
from optimizations.edits.imports import insert_after_imports
from optimizations.edits.recipe_switch import RecipeSetting, switch
from optimizations.edits.settings_placement import SettingsPlacement
from optimizations.program.classes import repository_classes
from optimizations.program.config_use import not_a_run_config
from optimizations.program.hf import ARGUMENT_PARSERS, HF_CONFIGS, HF_PACKAGES, is_training_config
from optimizations.program.model_use import bound_name
from optimizations.program.names import scoped_names
from optimizations.program.positions import start_line
from optimizations.program.recipes import parser_types
from optimizations.program.repository import ParsedFile, RepoContext, Site
from optimizations.program.requirements import admits_older
from optimizations.program.syntax import (
    code_of,
    defines,
    is_data_loader,
    keyword,
    literal_value,
    qualified_under,
    walk,
)
from optimizations.program.training_loops import BACKWARD, is_method_call
from optimizations.registry import Example, Numerics, Optimization

# The module-level worker count every edited call reads; the code below stands ``{workers}`` for its name.
WORKERS = "DATALOADER_WORKERS"
# torch's iterable-style dataset, as the repository's classes may name their base.
TORCH_ITERABLE_DATASETS = frozenset(
    {"torch.utils.data.IterableDataset", "torch.utils.data.dataset.IterableDataset"}
)
# Libraries whose dataset builders return iterable-style datasets: torchtext's datasets are datapipes (0.12 and
# later), and so are torchdata's iterable datapipes.
ITERABLE_BUILDERS = ("torchtext.datasets", "torchdata.datapipes.iter")
WORKERS_DEFINITION = "{workers} = min(4, (os.cpu_count() or 1) - 1)"
WORKERS_COMMENT = (
    "# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead."
)

# keyword -> value template, for TrainingArguments-style configs and for torch's DataLoader.
HF_SETTINGS = {
    "dataloader_num_workers": "{workers}",
    "dataloader_pin_memory": "torch.cuda.is_available()",
    "dataloader_persistent_workers": "{workers} > 0",
    "dataloader_prefetch_factor": "(2 if {workers} > 0 else None)",
}
TORCH_SETTINGS = {
    "num_workers": "{workers}",
    "pin_memory": "torch.cuda.is_available()",
    "persistent_workers": "{workers} > 0",
    "prefetch_factor": "(2 if {workers} > 0 else None)",
}


# How a site's message names the settings besides the worker count (torch's keyword; transformers prefixes it).
SETTING_WORDS = {
    "pin_memory": "pinned memory",
    "persistent_workers": "persistent workers",
    "prefetch_factor": "prefetch factor 2",
}

# How a site's message says that the worker count was the program's, and what was left out of the settings.
KEPT_WORKERS = "left as set)"
LEFT_OUT = " (left out"

# The transformers release each TrainingArguments setting came in (dataloader_num_workers is older than 4.0). One
# that a release the repository still allows lacks is left out: that release would reject the flag or keyword.
TRANSFORMERS_SINCE = {
    "dataloader_pin_memory": "4.3.0",
    "dataloader_persistent_workers": "4.36.0",
    "dataloader_prefetch_factor": "4.38.0",
}

# The same settings in launch flags and recipe YAMLs of an argument-parser script (values are fixed there).
RECIPE_WORKERS = RecipeSetting(
    "dataloader_num_workers",
    "4",
    lambda value: isinstance(value, int) and not isinstance(value, bool) and value > 0,
    {"dataloader_pin_memory": "true", "dataloader_persistent_workers": "true"},
    "# perfbot: load batches in worker processes into pinned memory.",
)


def _setting(template: str) -> cst.BaseExpression:
    """A setting's value: ``template`` with ``{workers}``, where it appears, standing for the worker count."""
    if "{workers}" not in template:
        return cst.parse_expression(template)
    return parse_template_expression(template, workers=cst.Name(WORKERS))


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


def _loop_iterating(name: cst.Name, parents: dict[cst.CSTNode, cst.CSTNode]) -> cst.For | None:
    """The ``for`` loop that iterates ``name``: ``for x in name``, or through a call such as
    ``enumerate(name)``; None for any other use of the name."""
    parent = parents.get(name)
    if isinstance(parent, cst.For) and parent.iter is name:
        return parent
    call = parents.get(parent) if isinstance(parent, cst.Arg) else None
    loop = parents.get(call) if isinstance(call, cst.Call) else None
    return loop if isinstance(loop, cst.For) and loop.iter is call else None


def _trains(loop: cst.For) -> bool:
    """Whether ``loop``'s body calls a ``.backward()`` or a ``.step()`` anywhere."""
    return any(is_method_call(node, BACKWARD, "step") for node in walk(loop.body, ()))


class _AddWorkers(SettingsPlacement, OptimizationCodemod):
    def __init__(self, context, optimization: Optimization, repo: RepoContext):
        super().__init__(context, optimization, repo)
        self.guarded_depth = 0  # inside a function or an `if __name__ == "__main__":` block
        self.iterable_classes: set[str] = set()
        self.iterable_instances: set[str] = set()
        self.edited = False
        self._unknown_to_allowed: dict[str, str] | None = None

    def visit_Module(self, node: cst.Module) -> None:
        self.start_placement()

    def _too_new(self) -> dict[str, str]:
        """The TrainingArguments settings that a transformers release the repository allows lacks, each with the
        requirement that allows it (:data:`TRANSFORMERS_SINCE`)."""
        if self._unknown_to_allowed is None:
            self._unknown_to_allowed = {}
            for key, release in TRANSFORMERS_SINCE.items():
                if (requirement := admits_older(self.repo, "transformers", release)) is not None:
                    self._unknown_to_allowed[key] = requirement
        return self._unknown_to_allowed

    def _left_out(self) -> str:
        """`` (left out, as requirements.txt: transformers>=4.31.0 allows older releases:
        dataloader_persistent_workers, new in 4.36.0)`` for the settings :meth:`_too_new` names, or nothing."""
        by_requirement: dict[str, list[str]] = {}
        for key, requirement in self._too_new().items():
            by_requirement.setdefault(requirement, []).append(f"{key}, new in {TRANSFORMERS_SINCE[key]}")
        return "".join(
            f"{LEFT_OUT}, as {requirement} allows older releases: {'; '.join(keys)})"
            for requirement, keys in by_requirement.items()
        )

    # -- where the code runs -------------------------------------------------------------------------
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

    # -- iterable datasets: workers would each replay the whole stream ------------------------------
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

    def _dataset_is_iterable(self, call: cst.Call) -> bool:
        """Whether the loader's dataset is an ``IterableDataset``: built from a class of this file, or of another
        module of the repository (``from mypkg.data import Stream``), that derives from torch's."""
        value = _dataset_of(call)
        if value is None:
            return False
        if self._builds_iterable(value) or (
            isinstance(value, cst.Name) and value.value in self.iterable_instances
        ):
            return True
        builder = self._built_by(value)
        if builder is None:
            return False
        bases = repository_classes(self.repo).ancestors(self.path, self.qualified(builder.func))
        return not bases.isdisjoint(TORCH_ITERABLE_DATASETS)

    def _dataset_on_device(self, call: cst.Call) -> str | None:
        """Why the loader's dataset may hold its items on a CUDA device, or None: its class is one of the
        repository's and its code uses CUDA (a replay buffer that keeps experience on the GPU). A worker process
        cannot touch CUDA tensors, and perfbot cannot tell that the items stay on the host."""
        dataset = _dataset_of(call)
        builder = self._built_by(dataset)
        if builder is None:
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
                and parents.get(parents.get(node)) is not binding
            ):
                argument, measure = parents.get(node), parents.get(parents.get(node))
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
                and parents.get(parents.get(node)) is not binding
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

    def _parser(self, call: cst.Call) -> None:
        """An argument parser filling a TrainingArguments-family config: workers where its launches set them."""
        if not any(is_training_config(self.names(e)) for e in parser_types(call, self.nodes(cst.Assign))):
            return
        companions = {k: v for k, v in RECIPE_WORKERS.companions.items() if k not in self._too_new()}
        launched = switch(
            self.repo, self.path, replace(RECIPE_WORKERS, companions=companions), self.optimization.id
        )
        if launched is None:
            self.refused(
                call,
                f"`{code_of(call.func)}` fills the config from flags: dataloader workers in its launch",
                "no shell script launches this script: pass `--dataloader_num_workers 4 "
                "--dataloader_pin_memory true` where the run is launched",
            )
        self.sites.extend(launched or [])

    # -- the calls -------------------------------------------------------------------------------------
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        names = self.names(original_node.func)
        if any(qualified_under(names, (package,), (parser,)) for package, parser in ARGUMENT_PARSERS):
            self._parser(original_node)
            return updated_node
        if is_training_config(names):
            if not_a_run_config(self, original_node):
                return updated_node
            settings = {k: v for k, v in HF_SETTINGS.items() if k not in self._too_new()}
            label = "dataloader_num_workers"
        elif is_data_loader(names):
            settings, label = TORCH_SETTINGS, "num_workers"
        else:
            return updated_node
        callee = code_of(original_node.func)

        current = keyword(updated_node, label)
        pin_label = "pin_memory" if settings is TORCH_SETTINGS else "dataloader_pin_memory"
        pin = keyword(updated_node, pin_label)
        if current is not None and self._loads_with_workers(current.value):
            shown = ", ".join(
                f"{a.keyword.value}={code_of(a.value)}" for a in (current, pin) if a is not None
            )
            self.already(original_node, f"{callee}(...): {shown}")
            return updated_node
        message = f"{callee}(...): {label}={WORKERS}" + "".join(
            f", {words}"
            for key, words in SETTING_WORDS.items()
            if key in settings or f"dataloader_{key}" in settings
        )
        if settings is not TORCH_SETTINGS:
            message += self._left_out()
        if current is not None and literal_value(current.value) is ...:
            pinned = settings is TORCH_SETTINGS and pin is None
            if pinned and self.values.hidden(original_node, ["pin_memory"]) is None:
                self.need_module("torch")
                self.changed(
                    original_node,
                    f"{callee}(...): pin_memory=torch.cuda.is_available() "
                    f"({label} from `{code_of(current.value)}` {KEPT_WORKERS}",
                )
                return add_keywords(updated_node, [("pin_memory", _setting(TORCH_SETTINGS["pin_memory"]))])
            self.refused(
                original_node,
                message,
                f"{label} comes from `{code_of(current.value)}`; raise its default where that value is defined",
            )
            return updated_node
        reason = self._refusal(original_node, settings)
        if reason is not None:
            self.refused(original_node, message, reason)
            return updated_node

        call = updated_node
        if current is not None:
            call = replace_keyword(call, label, _setting(settings[label]))
        missing = [(k, _setting(v)) for k, v in settings.items() if keyword(call, k) is None]
        call = self.placed(original_node, updated_node, add_keywords(call, missing))
        if any(name in ("pin_memory", "dataloader_pin_memory") for name, _ in missing):
            self.need_module("torch")
        self.changed(original_node, message)
        self.edited = True
        return call

    def _refusal(self, node: cst.Call, settings: dict[str, str]) -> str | None:
        """Why the loader or config ``node`` must keep loading as it does, the first reason found; None where
        workers may go in."""
        if (hidden := self.values.hidden(node, settings)) is not None:
            return hidden
        torch_loader = settings is TORCH_SETTINGS
        if torch_loader and (trainer := self._trainer_class(node)) is not None:
            return (
                f"built by the trainer class `{trainer}`, whose users choose workers with "
                "`args.dataloader_num_workers` and `args.dataloader_pin_memory`: a count fixed here would "
                "override theirs; read them from `self.args`"
            )
        if self.guarded_depth == 0:
            return (
                "runs at import time: worker processes started with spawn/forkserver re-import this module; "
                'move it into a function or under `if __name__ == "__main__":`'
            )
        if not torch_loader:
            return None
        if self._dataset_is_iterable(node):
            return (
                "the dataset is an IterableDataset: every worker would replay the whole stream unless it "
                "shards by torch.utils.data.get_worker_info()"
            )
        if (on_device := self._dataset_on_device(node)) is not None:
            return on_device
        if (evaluated := self._evaluated_per_call(node)) is not None:
            function, loop, caller = evaluated
            return (
                f"the loader is built at every call of `{function.name.value}()`, which evaluates and is called "
                f"from `{caller.name.value}()`, and read there once by a loop that neither back-propagates nor "
                f"steps (line {self.line(loop)}): its worker processes would start at every call to read it "
                "once; give workers to a loader built once"
            )
        if (measured := self._only_measured(node)) is not None:
            return (
                f"the loader is only measured (`{code_of(measured)}` at line {self.line(measured)}), never "
                "iterated: workers would load nothing"
            )
        return None

    def _trainer_class(self, node: cst.CSTNode) -> str | None:
        """The name of the class ``node`` is in when it derives from a transformers or TRL trainer (a
        library's trainer, as huggingface/trl's experimental ``PPOTrainer``), else None."""
        parents = self.parsed.parents()
        while (node := parents.get(node)) is not None and not isinstance(node, cst.ClassDef):
            pass
        if node is None:
            return None
        bases = {name for base in node.bases for name in self.names(base.value)}
        derived = any(
            name.partition(".")[0] in HF_PACKAGES and name.rpartition(".")[2].endswith("Trainer")
            for name in bases
        )
        return node.name.value if derived else None

    def _loads_with_workers(self, workers: cst.BaseExpression) -> bool:
        """The call already loads as this optimization would have it: a literal worker count above 0, or the
        module's own ``DATALOADER_WORKERS`` (a previous run's). A count the program passes in (a variable, a
        parameter) may well be 0, as a caller's ``num_workers=0`` makes it: not an answer of "already"."""
        count = literal_value(workers)
        if count is not ...:
            return count not in (0, None, False)
        return (
            isinstance(workers, cst.Name)
            and workers.value == WORKERS
            and defines(self.parsed.module, WORKERS)
        )

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if not self.edited or defines(updated_node, WORKERS):
            return updated_node
        self.need_module("os")
        definition = parse_template_statement(WORKERS_DEFINITION, workers=cst.Name(WORKERS))
        definition = definition.with_changes(
            leading_lines=[cst.EmptyLine(comment=cst.Comment(WORKERS_COMMENT))]
        )
        return insert_after_imports(updated_node, [definition])


class DataloaderWorkers(Optimization):
    """Batches prepared by worker processes into pinned memory while the GPU trains on the previous one."""

    id = "dataloader_workers"
    title = "dataloader workers with pinned memory and persistent workers"

    def subject(self, changed: list[Site]) -> str:
        """The title where every site got persistent workers; else what the sites did: workers and pinned memory
        (a transformers the repository allows lacks the rest), or only pinned memory (the program sets the
        worker count)."""
        if changed and all(KEPT_WORKERS in site.message for site in changed):
            return "pinned memory for data loaders whose worker count the program sets"
        if any("persistent" not in site.message.partition(LEFT_OUT)[0] for site in changed):
            return "dataloader workers with pinned memory"
        return self.title

    tier = 1
    expected = "+10-30% GPU util"
    summary = "dataloader_num_workers / num_workers with pin memory, persistent workers and prefetch"
    scope = "data"
    numerics = Numerics.EXACT
    numerics_reason = (
        "the same batches, loaded in worker processes (random augmentation draws from each worker's seed)"
    )
    keywords = (
        "dataloader_num_workers",
        "dataloader workers",
        "num_workers",
        "dataloader_pin_memory",
        "pin memory",
    )
    codemods = (_AddWorkers,)
    needs = (*HF_CONFIGS, "DataLoader", *(parser for _, parser in ARGUMENT_PARSERS))

    examples = (
        Example(
            "beside_a_splat_an_imported_helper_builds",
            before="""\
from transformers import TrainingArguments

from schedules import warmup_settings


def build(run):
    return TrainingArguments(output_dir=run.out, **warmup_settings(run))
""",
            after="""\
from transformers import TrainingArguments

from schedules import warmup_settings
import os
import torch

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


def build(run):
    return TrainingArguments(output_dir=run.out, **warmup_settings(run), dataloader_num_workers=DATALOADER_WORKERS, dataloader_pin_memory=torch.cuda.is_available(), dataloader_persistent_workers=DATALOADER_WORKERS > 0, dataloader_prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None))
""",
            files={
                "schedules.py": """\
def warmup_settings(run):
    settings = {}
    if run.warmup_steps:
        settings.update(warmup_steps=run.warmup_steps)
    else:
        settings["warmup_ratio"] = run.warmup_ratio
    return settings
"""
            },
        ),
        Example(
            "refuses_splat_of_unknown_keys",
            before="""\
from transformers import TrainingArguments


def build(run, extra):
    settings = {"output_dir": run.out}
    settings.update(extra)
    return TrainingArguments(**settings)
""",
            refusal="(train.py:4), whose keys are unknown: `extra` is a parameter of build()",
        ),
        Example(
            "sft_config",
            before="""\
from trl import SFTConfig


def build(out):
    return SFTConfig(output_dir=out, packing=False)
""",
            after="""\
from trl import SFTConfig
import os
import torch

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


def build(out):
    return SFTConfig(output_dir=out, packing=False, dataloader_num_workers=DATALOADER_WORKERS, dataloader_pin_memory=torch.cuda.is_available(), dataloader_persistent_workers=DATALOADER_WORKERS > 0, dataloader_prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None))
""",
        ),
        Example(
            "aliased_module_multiline_with_comments",
            before="""\
import os
import transformers as hf


def build(cfg):
    args = hf.TrainingArguments(
        output_dir=cfg.out,  # where checkpoints go
        dataloader_num_workers=0,
        bf16=True,  # H100
    )
    return args
""",
            after="""\
import os
import transformers as hf
import torch

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


def build(cfg):
    args = hf.TrainingArguments(
        output_dir=cfg.out,  # where checkpoints go
        dataloader_num_workers=DATALOADER_WORKERS,
        bf16=True,  # H100
        dataloader_pin_memory=torch.cuda.is_available(),
        dataloader_persistent_workers=DATALOADER_WORKERS > 0,
        dataloader_prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None),
    )
    return args
""",
        ),
        Example(
            "torch_dataloader_aliased",
            before="""\
from torch.utils.data import DataLoader as DL


def loader(ds):
    return DL(ds, batch_size=8, shuffle=True)
""",
            after="""\
from torch.utils.data import DataLoader as DL
import os
import torch

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


def loader(ds):
    return DL(ds, batch_size=8, shuffle=True, num_workers=DATALOADER_WORKERS, pin_memory=torch.cuda.is_available(), persistent_workers=DATALOADER_WORKERS > 0, prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None))
""",
        ),
        Example(
            "imports_after_a_statement",
            before="""\
import sys

sys.path.insert(0, ".")
import torch
from torch.utils.data import DataLoader


def loader(ds):
    return DataLoader(ds, batch_size=8)
""",
            after="""\
import sys
import os

sys.path.insert(0, ".")
import torch
from torch.utils.data import DataLoader

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


def loader(ds):
    return DataLoader(ds, batch_size=8, num_workers=DATALOADER_WORKERS, pin_memory=torch.cuda.is_available(), persistent_workers=DATALOADER_WORKERS > 0, prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None))
""",
        ),
        Example(
            "stateful_dataloader",
            before="""\
import torch
from torchdata.stateful_dataloader import StatefulDataLoader


class Recipe:
    def _setup_data(self, ds, sampler, batch_size, collate_fn):
        return StatefulDataLoader(
            dataset=ds,
            batch_size=batch_size,
            sampler=sampler,
            collate_fn=collate_fn,
            drop_last=True,
        )
""",
            after="""\
import torch
from torchdata.stateful_dataloader import StatefulDataLoader
import os

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


class Recipe:
    def _setup_data(self, ds, sampler, batch_size, collate_fn):
        return StatefulDataLoader(
            dataset=ds,
            batch_size=batch_size,
            sampler=sampler,
            collate_fn=collate_fn,
            drop_last=True,
            num_workers=DATALOADER_WORKERS,
            pin_memory=torch.cuda.is_available(),
            persistent_workers=DATALOADER_WORKERS > 0,
            prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None),
        )
""",
        ),
        Example(
            "loader_only_measured_for_a_step_count",
            before="""\
import math

from torch.utils.data import DataLoader


def total_steps(dataset, sampler, epochs):
    data_loader = DataLoader(dataset, batch_sampler=sampler)
    return math.floor(len(data_loader) * epochs)
""",
            refusal="the loader is only measured (`len(data_loader)` at line 8), never iterated",
        ),
        Example(
            "loader_measured_and_iterated",
            before="""\
import torch
from torch.utils.data import DataLoader


def train(model, dataset, optimizer):
    loader = DataLoader(dataset, batch_size=8)
    print(f"{len(loader)} steps")
    for batch in loader:
        model(batch).backward()
        optimizer.step()
""",
            after="""\
import torch
from torch.utils.data import DataLoader
import os

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


def train(model, dataset, optimizer):
    loader = DataLoader(dataset, batch_size=8, num_workers=DATALOADER_WORKERS, pin_memory=torch.cuda.is_available(), persistent_workers=DATALOADER_WORKERS > 0, prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None))
    print(f"{len(loader)} steps")
    for batch in loader:
        model(batch).backward()
        optimizer.step()
""",
        ),
        Example(
            "evaluation_loader_built_per_call",
            before="""\
from torch.utils.data import DataLoader


def eval_split(model, dataset):
    loader = DataLoader(dataset, batch_size=100, num_workers=0)
    correct = 0
    for b, (x, y) in enumerate(loader):
        correct += (model(x).argmax(-1) == y).sum().item()
    return correct / len(dataset)


def on_batch_end(trainer):
    if trainer.iter_num % 500 == 0:
        print(eval_split(trainer.model, trainer.test_dataset))
""",
            refusal="`eval_split()`, which evaluates and is called from `on_batch_end()`",
        ),
        Example(
            "loader_iterated_without_gradients",
            before="""\
import torch
from torch.utils.data import DataLoader


def score(model, dataset):
    loader = DataLoader(dataset, batch_size=64)
    scores = []
    with torch.no_grad():
        for batch in loader:
            scores.append(model(batch))
    return scores


class Sweep:
    def run(self, model, dataset):
        return [self.score(model, dataset) for _ in range(3)]

    def score(self, model, dataset):
        return score(model, dataset)
""",
            refusal="the loader is built at every call of `score()`",
        ),
        Example(
            "evaluation_script_entry_point",
            before="""\
import fire
import torch
from torch.utils.data import DataLoader


def calculate_ppl(model, dataset):
    loader = DataLoader(dataset, batch_size=4)
    with torch.no_grad():
        for batch in loader:
            print(model(batch).loss.exp())


if __name__ == "__main__":
    fire.Fire(calculate_ppl)
""",
            after="""\
import fire
import torch
from torch.utils.data import DataLoader
import os

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


def calculate_ppl(model, dataset):
    loader = DataLoader(dataset, batch_size=4, num_workers=DATALOADER_WORKERS, pin_memory=torch.cuda.is_available(), persistent_workers=DATALOADER_WORKERS > 0, prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None))
    with torch.no_grad():
        for batch in loader:
            print(model(batch).loss.exp())


if __name__ == "__main__":
    fire.Fire(calculate_ppl)
""",
        ),
        Example(
            "loop_trains_through_a_helper",
            before="""\
from torch.utils.data import DataLoader


def fit(model, dataset, step):
    loader = DataLoader(dataset, batch_size=8)
    for batch in loader:
        step(model, batch)


def fit_validated(model, dataset, optimizer):
    loader = DataLoader(dataset, batch_size=8)
    for batch in loader:
        model(batch).backward()
        optimizer.step()


def main(model, dataset, optimizer, step):
    fit(model, dataset, step)
    fit_validated(model, dataset, optimizer)
""",
            after="""\
from torch.utils.data import DataLoader
import os
import torch

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


def fit(model, dataset, step):
    loader = DataLoader(dataset, batch_size=8, num_workers=DATALOADER_WORKERS, pin_memory=torch.cuda.is_available(), persistent_workers=DATALOADER_WORKERS > 0, prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None))
    for batch in loader:
        step(model, batch)


def fit_validated(model, dataset, optimizer):
    loader = DataLoader(dataset, batch_size=8, num_workers=DATALOADER_WORKERS, pin_memory=torch.cuda.is_available(), persistent_workers=DATALOADER_WORKERS > 0, prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None))
    for batch in loader:
        model(batch).backward()
        optimizer.step()


def main(model, dataset, optimizer, step):
    fit(model, dataset, step)
    fit_validated(model, dataset, optimizer)
""",
        ),
        Example(
            "arguments_on_a_line_of_their_own",
            before="""\
from torch.utils.data import DataLoader


def train(model, dataset, optimizer):
    loader = DataLoader(
        dataset, shuffle=True, batch_size=8
    )
    for batch in loader:
        model(batch).backward()
        optimizer.step()
""",
            after="""\
from torch.utils.data import DataLoader
import os
import torch

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


def train(model, dataset, optimizer):
    loader = DataLoader(
        dataset, shuffle=True, batch_size=8, num_workers=DATALOADER_WORKERS, pin_memory=torch.cuda.is_available(), persistent_workers=DATALOADER_WORKERS > 0, prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None)
    )
    for batch in loader:
        model(batch).backward()
        optimizer.step()
""",
        ),
        Example(
            "already_uses_workers",
            before="""\
import torch


def loader(ds):
    return torch.utils.data.DataLoader(ds, batch_size=8, num_workers=8, pin_memory=True)
""",
        ),
        Example(
            "a_count_passed_in_is_not_already_workers",
            before="""\
from torch.utils.data import DataLoader


def loader(ds, num_workers=0):
    return DataLoader(ds, batch_size=8, num_workers=num_workers, pin_memory=True)
""",
            refusal="num_workers comes from `num_workers`; raise its default where that value is defined",
        ),
        Example(
            "pins_memory_when_workers_come_from_a_variable",
            before="""\
from torch.utils.data import DataLoader


def loader(ds, num_workers):
    return DataLoader(ds, batch_size=8, shuffle=True, num_workers=num_workers)
""",
            after="""\
from torch.utils.data import DataLoader
import torch


def loader(ds, num_workers):
    return DataLoader(ds, batch_size=8, shuffle=True, num_workers=num_workers, pin_memory=torch.cuda.is_available())
""",
        ),
        Example(
            "refuses_iterable_dataset",
            before="""\
import torch
from torch.utils.data import IterableDataset


class Stream(IterableDataset):
    def __iter__(self):
        yield from range(10)


def main():
    loader = torch.utils.data.DataLoader(Stream(), batch_size=2)
    return list(loader)
""",
            refusal="IterableDataset",
        ),
        Example(
            "refuses_a_library_stream",
            before="""\
from datasets import load_dataset
from torch.utils.data import DataLoader
from torchtext.datasets import Multi30k


def loaders(collate):
    train_iterator = Multi30k(split="train", language_pair=("de", "en"))
    web = load_dataset("allenai/c4", "en", split="train", streaming=True)
    return DataLoader(train_iterator, batch_size=8, collate_fn=collate), DataLoader(web, batch_size=8)
""",
            refusal="IterableDataset",
        ),
        Example(
            "refuses_iterable_dataset_of_another_module",
            before="""\
from torch.utils.data import DataLoader

from data.streams import TokenStream


def main():
    stream = TokenStream("corpus.txt")
    return list(DataLoader(stream, batch_size=2))
""",
            files={
                "data/__init__.py": "",
                "data/streams.py": """\
import torch.utils.data


class LineStream(torch.utils.data.IterableDataset):
    def __init__(self, path):
        self.path = path


class TokenStream(LineStream):
    def __iter__(self):
        yield from open(self.path)
""",
            },
            refusal="IterableDataset",
        ),
        Example(
            "no_site_config_only_a_repository_helper_reads",
            before="""\
from transformers import TrainingArguments

from data.loading import load_prompts


def main():
    args = TrainingArguments(output_dir="unused")
    prompts = load_prompts("prompts.jsonl", training_args=args)
    print(dict(args=len(prompts), seed=args.seed))
""",
            files={
                "data/__init__.py": "",
                "data/loading.py": """\
import json


def load_prompts(path, training_args):
    with training_args.main_process_first(desc="load"):
        return _read(path, training_args)


def _read(path, args):
    return [json.loads(line) for line in open(path)][: args.seed]
""",
            },
        ),
        Example(
            "loader_built_inside_a_trainer_class",
            before="""\
from torch.utils.data import DataLoader
from transformers import Trainer


class RolloutTrainer(Trainer):
    def rollout_loader(self, prompts):
        return DataLoader(prompts, batch_size=self.args.per_device_train_batch_size, shuffle=True)
""",
            refusal="built by the trainer class `RolloutTrainer`",
        ),
        Example(
            "library_default_for_callers_without_a_config",
            before="""\
from transformers import Trainer, TrainingArguments


class MyTrainer(Trainer):
    def __init__(self, model, args=None, train_dataset=None):
        if args is None:
            args = TrainingArguments(f"{type(model).__name__}-trained")
        super().__init__(model=model, args=args, train_dataset=train_dataset)
""",
        ),
        Example(
            "config_of_a_repository_that_still_allows_transformers_4_31",
            before="""\
from transformers import Trainer, TrainingArguments


def main(model, data):
    args = TrainingArguments(output_dir="out")
    Trainer(model=model, args=args, train_dataset=data).train()
""",
            after="""\
from transformers import Trainer, TrainingArguments
import os
import torch

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


def main(model, data):
    args = TrainingArguments(output_dir="out", dataloader_num_workers=DATALOADER_WORKERS, dataloader_pin_memory=torch.cuda.is_available())
    Trainer(model=model, args=args, train_dataset=data).train()
""",
            files={"requirements.txt": "torch\ntransformers>=4.31.0\n"},
        ),
        Example(
            "config_a_repository_helper_hands_to_a_trainer",
            before="""\
from transformers import TrainingArguments

from recipes import build_trainer


def main(model, data):
    args = TrainingArguments(output_dir="out")
    build_trainer(model, args, data).train()
""",
            after="""\
from transformers import TrainingArguments

from recipes import build_trainer
import os
import torch

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


def main(model, data):
    args = TrainingArguments(output_dir="out", dataloader_num_workers=DATALOADER_WORKERS, dataloader_pin_memory=torch.cuda.is_available(), dataloader_persistent_workers=DATALOADER_WORKERS > 0, dataloader_prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None))
    build_trainer(model, args, data).train()
""",
            files={
                "recipes.py": """\
from transformers import Trainer


def build_trainer(model, training_args, dataset):
    return Trainer(model=model, args=training_args, train_dataset=dataset)
""",
            },
        ),
        Example(
            "refuses_hidden_kwargs",
            before="""\
from trl import DPOConfig


def build(overrides):
    return DPOConfig(output_dir="out", **overrides)
""",
            refusal="**overrides",
        ),
        Example(
            "refuses_import_time_loader",
            before="""\
import torch

loader = torch.utils.data.DataLoader(list(range(10)), batch_size=2)
""",
            refusal="import time",
        ),
    )
