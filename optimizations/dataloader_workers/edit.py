"""The codemod of ``dataloader_workers``: worker processes, pinned memory, persistent workers and a prefetch
factor for each data loader and TrainingArguments-family config it may change (see README.md).

Why a loader must keep loading as it does is judged in :mod:`.edit_refusals`."""

from __future__ import annotations

from dataclasses import replace

import libcst as cst
from libcst.helpers import parse_template_expression, parse_template_statement

from optimizations.edits.expressions import add_keywords, replace_keyword
from optimizations.edits.imports import insert_after_imports
from optimizations.edits.recipe_switch import RecipeSetting, switch
from optimizations.program.attribute_defaults import attribute_defaults
from optimizations.program.choices import WORKER_TOPICS, commented
from optimizations.program.config_use import not_a_run_config
from optimizations.program.hf import ARGUMENT_PARSERS, is_training_config
from optimizations.program.recipes import parser_types
from optimizations.program.repository import RepoContext
from optimizations.program.requirements import admits_older
from optimizations.program.syntax import (
    code_of,
    defines,
    is_data_loader,
    keyword,
    literal_value,
    qualified_under,
)
from optimizations.registry import Optimization

from .edit_refusals import LoaderRefusals

# The module-level worker count every edited call reads; the code below stands ``{workers}`` for its name.
WORKERS = "DATALOADER_WORKERS"
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


class AddWorkers(LoaderRefusals):
    """Workers, pinned memory, persistent workers and a prefetch factor for each loader and config that may take
    them, a worker count defined once per module; refusals in the order :meth:`_refusal` judges them."""

    def __init__(self, context, optimization: Optimization, repo: RepoContext):
        super().__init__(context, optimization, repo)
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

    # -- argument parsers: the settings go where the script's launches set them ------------------------
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
                f"no shell script launches this script, whose parser (line {self.line(call)}) reads the flags: pass "
                "`--dataloader_num_workers 4 --dataloader_pin_memory true` where the run is launched",
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
                f"{a.keyword.value}={code_of(a.value)}"
                for a in (current, pin)
                if a is not None and a.keyword is not None  # keyword arguments, as keyword() finds them
            )
            self.already(original_node, f"{callee}(...): {shown}")
            return updated_node
        count = literal_value(current.value) if current is not None else None
        if current is not None and count == 0 and not isinstance(count, bool):
            line = self.line(keyword(original_node, label) or original_node)
            if (choice := commented(self.parsed, line, WORKER_TOPICS, above=1)) is not None:
                self.kept(line, f"{callee}(...): {label}=0", choice.evidence)
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
            default = self._positive_default(current.value)
            if default is not None and (pin is None or literal_value(pin.value) is not False):
                self.already(
                    original_node, f"{callee}(...): {label}=`{code_of(current.value)}`, {default} by default"
                )
                return updated_node
            self.refused(
                original_node,
                message,
                f"{label} comes from `{code_of(current.value)}` (line {self.line(original_node)}); raise its "
                "default where that value is defined",
            )
            return updated_node
        reason = self._refusal(original_node, settings)
        if reason is not None:
            self.refused(original_node, message, reason)
            return updated_node
        if settings is TORCH_SETTINGS and (discarded := self._discarded_batches(original_node)) is not None:
            loop, replaced = discarded
            self.proposed(
                original_node,
                message,
                f"the training loop at line {self.line(loop)} replaces each batch of this loader before using it "
                f"(`{code_of(replaced)}` at line {self.line(replaced)}): workers would load batches nothing "
                "reads. Train on the loader's batches (then give it workers) or drop the loader; either changes "
                "how batches are sampled, which a person should decide",
            )
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
        if (iterable := self._iterable_dataset(node)) is not None:
            return (
                f"the dataset `{code_of(iterable)}` (line {self.line(iterable)}) is an IterableDataset: every "
                "worker would replay the whole stream unless it shards by torch.utils.data.get_worker_info()"
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

    def _positive_default(self, workers: cst.BaseExpression) -> str | None:
        """``N (line L)`` where ``workers`` reads a setting (``args.num_workers``) whose every default in this file
        is a worker count above 0; None otherwise."""
        tree = self.parsed.syntax()
        if not isinstance(workers, cst.Attribute) or tree is None:
            return None
        defaults = attribute_defaults(tree, workers.attr.value)
        counts = [d.value for d in defaults]
        if not counts or not all(type(c) is int and c > 0 for c in counts):
            return None
        return f"{counts[0]} (line {defaults[0].line})"

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
