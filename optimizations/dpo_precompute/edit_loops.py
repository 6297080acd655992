"""What ``dpo_precompute`` proposes for a hand-written DPO loop: a precompute pass of the reference log-probs that
the loop lacks. Writing one restructures the data pipeline and the step, so it is a proposal for a person, never an
edit (issue #51: small, mergeable diffs)."""

from __future__ import annotations

import re

import libcst as cst

from optimizations.edits.planned import PlannedCodemod
from optimizations.program.reachability import program_of
from optimizations.program.repository import Site
from optimizations.program.runs.every_run import runs_of
from optimizations.program.runs.hydra import run_recipes
from optimizations.program.syntax import NESTED_SCOPES, code_of, local_callee, walk
from optimizations.program.yaml_settings import settings as yaml_settings

# The names a reference model goes by: `ref_model`, `reference_model`, `self.ref`, `model_ref`, `ref_policy`.
REFERENCE = re.compile(r"^(?:ref|reference)(?:_model|_policy|_net|_lm)?$|^(?:model|policy)_ref$", re.I)
# A function named for computing the reference log-probs once: `build_reference_logprobs_cache`,
# `precompute_ref_logps` (it names the reference, log-probs, and a cache or precompute pass).
PRECOMPUTED = re.compile(r"^(?=.*ref)(?=.*log_?p)(?=.*(?:cache|precompute))", re.I)
# torch's contexts that run without gradients, as a reference forward does.
NO_GRADIENTS = frozenset({"torch.no_grad", "torch.inference_mode", "torch.autograd.grad_mode.no_grad"})
# A preference loss's word: a file without it holds no DPO loop.
PREFERENCE_LOSS = "logsigmoid"
WHY = (
    "a precompute pass the loop lacks: the reference log-probs would be computed once over the dataset before "
    "training and carried with each batch, which changes how the data is built and what the step reads; a person "
    "should write that pass (TRL's DPOTrainer does it with precompute_ref_log_probs=True)"
)


def _head(node: cst.BaseExpression) -> str:
    """The last name of ``node``: ``ref_model`` of ``self.ref_model``, of ``ref_model.forward`` too."""
    if isinstance(node, cst.Attribute) and node.attr.value in ("forward", "__call__"):
        node = node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return node.value if isinstance(node, cst.Name) else ""


class ReferencePerStep(PlannedCodemod):
    """Proposes a precompute pass where a hand-written loop that computes a preference loss runs its reference
    model under ``torch.no_grad()`` in every step."""

    def plan(self, module: cst.Module) -> None:
        if not self._preference_loss():
            return
        for loop in self.training_loops():
            call = self._reference_forward(loop) or next(
                filter(None, map(self._reference_forward, self._called_functions(loop))), None
            )
            if call is None:
                cached = self._cached_before(loop)
                if cached is not None:
                    self.already(
                        cached,
                        f"`{code_of(cached.func)}(...)` computes the reference log-probs once, before the loop at "
                        f"line {self.line(loop)}",
                    )
                continue
            message = (
                f"`{code_of(call)}` runs the reference model in every step: its log-probs computed once, before "
                "training"
            )
            switch = next(
                (a for a in call.args if a.keyword is not None and "cache" in a.keyword.value), None
            )
            if switch is not None:
                self.refused(
                    call,
                    message,
                    f"the program caches the reference log-probs itself behind `{code_of(switch)}` (line "
                    f"{self.line(switch)}): turning that on is the run's choice",
                )
                self.sites.extend(self._switch_in_recipes(switch))
            else:
                self.proposed(call, message, WHY)

    def _switch_in_recipes(self, switch: cst.Arg) -> list[Site]:
        """Each line of the runs' recipes that sets the config key the switch reads (``use_cache=
        self.config.cache_reference_logprobs`` and HALOs' ``cache_reference_logprobs: false``), refused there:
        the program's own switch, the run's to turn on."""
        if not isinstance(switch.value, cst.Attribute):
            return []
        key, found = switch.value.attr.value, {}
        for run in runs_of(self.repo, self.path):
            for recipe in run_recipes(self.repo, run.entry, run.launch):
                try:
                    text = self.repo.read(recipe)
                except (OSError, UnicodeDecodeError):
                    continue
                for setting in yaml_settings(recipe, text, key):
                    found[(recipe, setting.line)] = Site(
                        recipe,
                        setting.line,
                        self.optimization.id,
                        f"{key}: {setting.text}",
                        False,
                        f"the program's own switch for caching the reference log-probs, read at {self.path}:"
                        f"{self.line(switch)}: turning it on is the run's choice",
                    )
        return list(found.values())

    def _cached_before(self, loop: cst.For | cst.While) -> cst.Call | None:
        """A call before ``loop``, in its function, of a function named for caching or precomputing reference
        log-probs (allenai/open-instruct's ``build_reference_logprobs_cache``)."""
        owner = self.enclosing_body(loop)
        return next(
            (
                node
                for node in walk(owner.body if isinstance(owner, cst.FunctionDef) else owner, NESTED_SCOPES)
                if isinstance(node, cst.Call)
                and self.line(node) < self.line(loop)
                and PRECOMPUTED.search(code_of(node.func).rpartition(".")[2])
            ),
            None,
        )

    def _preference_loss(self) -> bool:
        """The file computes a preference loss, or imports a repository module that does (OpenRLHF's trainer
        takes its ``DPOLoss`` from ``openrlhf/models/loss.py``)."""
        if PREFERENCE_LOSS in self.parsed.source:
            return True
        program = program_of(self.repo)
        return any(
            PREFERENCE_LOSS in self.repo.read(p) for p in program.imported_from(self.path) - {self.path}
        )

    def _called_functions(self, loop: cst.For | cst.While) -> list[cst.FunctionDef]:
        """The functions of this file the loop calls by name or as ``self.<method>`` (the step's metrics method
        that holds the reference forward: eric-mitchell/direct-preference-optimization's
        ``get_batch_metrics``)."""
        called = {
            name
            for node in walk(loop.body, NESTED_SCOPES)
            if isinstance(node, cst.Call) and (name := local_callee(node)) is not None
        }
        return [f for f in self.nodes(cst.FunctionDef) if f.name.value in called]

    def _reference_forward(self, loop: cst.For | cst.While | cst.FunctionDef) -> cst.Call | None:
        """The first call of ``loop`` (or of a function it calls), under a no-gradient context, of a reference
        model or of a function given one."""
        for block in walk(loop.body, NESTED_SCOPES):
            if not isinstance(block, cst.With) or not any(
                isinstance(item.item, cst.Call) and self.names(item.item.func) & NO_GRADIENTS
                for item in block.items
            ):
                continue
            for call in walk(block.body, NESTED_SCOPES):
                if not isinstance(call, cst.Call):
                    continue
                given = [
                    argument.value for argument in call.args if argument.keyword is None and not argument.star
                ]
                if any(REFERENCE.match(_head(node)) for node in (call.func, *given)):
                    return call
        return None
