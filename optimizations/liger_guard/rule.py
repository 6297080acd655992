"""Liger-Kernel, guarded: ``use_liger_kernel`` on a config only where Liger's fused kernels help.

Targets ``TrainingArguments``-family configs (``transformers``, ``trl``). The flag becomes
``use_liger_kernel=liger_kernel_usable(model)``, a vendored run-time check
(``optimizations/liger_guard/helper.py``, copied beside the file as ``_perfbot_liger.py``) that is true only when
``liger_kernel`` imports, a GPU is present, Liger has kernels for the model type and the model carries no
PEFT adapter, so the patched program runs unchanged where Liger is missing. ``model`` is the model the
trainer that takes this config trains, so it must be bound, with its final value, where the config is built.

Liger's kernels do not compose with PEFT's LoRA layers (a LoRA SFT run takes twice as long with them; its
fused linear cross-entropy alone, on the LoRA model's untouched ``lm_head``, measured no gain on the H200 with
TRL 1.16, whose SFT trainer fuses the LM head itself: ``experiments/host_overhead``), and
Liger is kept apart from DPO's precomputed reference log-probs. So configs whose trainer gets a LoRA model
(``peft_config=``, or a model wrapped by ``get_peft_model`` here, directly or through a function of this
module) are refused with that reason, as is a DPO config with ``precompute_ref_log_probs=True``. TRL 1.x applies only Liger's layer kernels (RMSNorm, RoPE,
SwiGLU) and keeps its own fused LM-head loss, and has deprecated the flag in favour of Hub kernels: the win is
on full fine-tunes.

A script whose ``HfArgumentParser``/``TrlParser`` fills the config from flags gets ``use_liger_kernel: true`` in
each recipe its launch lines pass (:mod:`optimizations.program.recipes`), where the repository installs
liger-kernel (a recipe cannot check that at run time); recipes with ``use_peft: true`` or precomputed DPO
reference log-probs are refused for the reasons above, as is a script whose trainer always gets a LoRA config.
A DPO recipe is left to precomputed reference log-probs (the measured DPO win) unless it turns them off.
"""

from __future__ import annotations

from dataclasses import replace

import libcst as cst

from optimizations.edits.codemod import OptimizationCodemod
from optimizations.edits.expressions import add_keywords, call_expr, replace_keyword
from optimizations.edits.recipe_switch import RecipeSetting, switch
from optimizations.edits.vendoring import RuntimeHelper
from optimizations.program.config_use import (
    HELPER_ONLY_CONFIG_FILES,
    HELPER_ONLY_CONFIG_PROGRAM,
    not_a_run_config,
)
from optimizations.program.hf import (
    ARGUMENT_PARSERS,
    HF_CONFIGS,
    PEFT_FROM_FLAGS,
    is_argument_parser,
    is_training_config,
    trainer_class,
)
from optimizations.program.recipes import parser_types
from optimizations.program.repository import RepoContext
from optimizations.program.requirements import declares_dependency
from optimizations.program.syntax import code_of, keyword, literal_value, qualified_under
from optimizations.program.trainer_calls import LINK_METADATA, TrainerLinks
from optimizations.registry import Example, Numerics, Optimization

HELPER = "liger_kernel_usable"
RUNTIME = RuntimeHelper("liger", "optimizations.liger_guard")
LORA_SLOWDOWN = (
    "Liger's kernels do not compose with PEFT's LoRA layers (a LoRA SFT run took 2x as long with them), and "
    "its fused linear cross-entropy on a LoRA model's untouched lm_head measured no gain (+0.1%, H200, TRL "
    "1.16 fuses the LM head itself); keep use_liger_kernel off on LoRA runs"
)
PRECOMPUTE_CLASH = (
    "DPO precomputes the reference log-probs here (precompute_ref_log_probs=True), and Liger had to be turned "
    "off beside them when this plan was first carried out: keep one of the two"
)
EXPLICITLY_OFF = (
    "use_liger_kernel=False is set explicitly and perfbot keeps that choice; replace it with the run-time "
    "check if Liger should be used where it helps"
)
LIGER_DISTRIBUTION = "liger-kernel"


def _recipe_blocked(siblings: dict[str, object]) -> str | None:
    """Why a recipe with these keys keeps Liger off: a LoRA run, precomputed DPO log-probs, an explicit false."""
    if siblings.get("use_peft") is True:
        return f"the recipe trains LoRA adapters (use_peft: true): {LORA_SLOWDOWN}"
    if siblings.get("precompute_ref_log_probs") is True:
        return (
            "the recipe precomputes the DPO reference log-probs (precompute_ref_log_probs: true), which Liger "
            "is kept apart from on one config: keep one of the two"
        )
    if siblings.get("use_liger_kernel") is False:
        return "the recipe sets use_liger_kernel: false and perfbot keeps that choice"
    return None


def _dpo_recipe_blocked(siblings: dict[str, object]) -> str | None:
    """A DPO recipe keeps Liger off unless it turns precomputed reference log-probs off."""
    if siblings.get("precompute_ref_log_probs") is False:
        return _recipe_blocked(siblings)
    return _recipe_blocked(siblings) or (
        "a DPO recipe: Liger is kept apart from precomputed reference log-probs on one config, and perfbot leaves "
        "DPO configs to precompute (dpo_precompute, the measured DPO win); set precompute_ref_log_probs: false "
        "here to choose Liger"
    )


# The setting in the recipes of an argument-parser script: fixed there, as a recipe has no run-time check.
RECIPE_LIGER = RecipeSetting(
    "use_liger_kernel",
    "true",
    lambda value: value is True,
    comment="# perfbot: Liger's fused kernels (full fine-tunes; liger-kernel is a dependency).",
    blocked=_recipe_blocked,
)


class _GuardLiger(OptimizationCodemod):
    METADATA_DEPENDENCIES = OptimizationCodemod.METADATA_DEPENDENCIES + LINK_METADATA

    def __init__(self, context, optimization: Optimization, repo: RepoContext):
        super().__init__(context, optimization, repo)
        self.edited = False
        self.links: TrainerLinks | None = None

    def visit_Module(self, node: cst.Module) -> None:
        self.links = TrainerLinks(self, node)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if is_argument_parser(self.names(original_node.func)):
            self._parser(original_node)
            return updated_node
        if not is_training_config(self.names(original_node.func)):
            return updated_node
        if not_a_run_config(self, original_node):
            return updated_node
        current = keyword(original_node, "use_liger_kernel")
        if current is not None and self.calls(current.value, HELPER):
            guard = f"use_liger_kernel={code_of(current.value)}"
            self.already(
                original_node, f"{code_of(original_node.func)}(...): Liger guarded at run time ({guard})"
            )
            return updated_node
        message = (
            f"{code_of(original_node.func)}(...): use_liger_kernel where Liger helps (checked at run time)"
        )
        model, precompute, reason = self._guard_inputs(original_node, current)
        if reason is not None:
            self.refused(original_node, message, reason)
            return updated_node
        guard = (
            call_expr(HELPER, model)
            if precompute is None
            else call_expr(HELPER, model, precompute_ref_log_probs=precompute)
        )
        if current is not None:
            call = replace_keyword(updated_node, "use_liger_kernel", guard)
        else:
            call = add_keywords(updated_node, [("use_liger_kernel", guard)])
        self.changed(original_node, message)
        self.edited = True
        return call

    def _guard_inputs(
        self, call: cst.Call, current: cst.Arg | None
    ) -> tuple[cst.BaseExpression | None, cst.BaseExpression | None, str | None]:
        """``(model, precompute_ref_log_probs value or None, None)`` for the guard, or ``(None, None, reason)``."""
        setting = None if current is None else literal_value(current.value)
        if current is not None and setting not in (True, False):
            return (
                None,
                None,
                f"use_liger_kernel comes from `{code_of(current.value)}`; guard it where that is set",
            )
        model, reason = self._trained_model(call)
        settings = ["use_liger_kernel"]
        if qualified_under(self.names(call.func), ("trl",), ("DPOConfig",)):
            settings.append("precompute_ref_log_probs")  # a precompute hidden in the splat would clash
        hidden = self.links.values.hidden(call, settings)
        if reason is None and hidden is not None:
            return None, None, hidden
        precompute = keyword(call, "precompute_ref_log_probs")
        precompute_value = None if precompute is None else literal_value(precompute.value)
        if reason is None and precompute_value is True:
            reason = PRECOMPUTE_CLASH
        if reason is None and setting is False:
            reason = EXPLICITLY_OFF
        if reason is not None:
            return None, None, reason
        forwarded = precompute.value if precompute is not None and precompute_value is ... else None
        return model, forwarded, None

    def _trained_model(self, call: cst.Call) -> tuple[cst.BaseExpression | None, str | None]:
        """The model the config's trainer trains, readable at the config call; or why not."""
        trainers = self.links.trainers_receiving(call)
        if not trainers:
            return None, (
                "no trainer call in this module takes this config as args=, so the guard cannot see the model; "
                "build the config where the model and trainer are, or set use_liger_kernel by hand for full "
                "fine-tunes only"
            )
        for trainer in trainers:
            peft = keyword(trainer, "peft_config")
            if peft is not None and literal_value(peft.value) is not None:
                adapter = f"peft_config={code_of(peft.value)}"
                return None, f"the trainer adds a LoRA adapter ({adapter}): {LORA_SLOWDOWN}"
            if keyword(trainer, "model_init") is not None:
                return None, "the trainer builds its model with model_init, which the guard cannot see"
        models = {
            code_of(model): model for t in trainers if (model := self.links.model_argument(t)) is not None
        }
        if len(models) != 1:
            return (
                None,
                "the trainers that take this config train different models; set use_liger_kernel by hand",
            )
        model = next(iter(models.values()))
        scope = self.links.scope(call)
        wrapped = self.links.peft_wrap(model)
        if wrapped is not None:
            return None, f"the model is a LoRA model ({wrapped}): {LORA_SLOWDOWN}"
        problem = self.links.unbound_at(model, self.line(call), self.line(trainers[0]), scope)
        if problem is not None:
            return None, f"the guard needs the trained model where the config is built, but {problem}"
        return model, None

    def _parser(self, call: cst.Call) -> None:
        """An argument parser filling a TrainingArguments-family config: Liger in the recipes its launches pass."""
        types = parser_types(call, self.nodes(cst.Assign))
        if not any(is_training_config(self.names(e)) for e in types):
            return
        message = f"`{code_of(call.func)}` fills the config from flags: use_liger_kernel in its recipes"
        reason = self._fixed_adapter()
        if reason is None and declares_dependency(self.repo, LIGER_DISTRIBUTION) is None:
            reason = (
                f"a recipe cannot check at run time that {LIGER_DISTRIBUTION} is installed, and the repository does "
                f"not list it among its requirements: add it, then set use_liger_kernel: true in full fine-tune recipes"
            )
        dpo = any(qualified_under(self.names(e), ("trl",), ("DPOConfig",)) for e in types)
        setting = replace(RECIPE_LIGER, blocked=_dpo_recipe_blocked) if dpo else RECIPE_LIGER
        launched = None if reason else switch(self.repo, self.path, setting, self.optimization.id)
        if reason is None and launched is None:
            reason = (
                "no shell script or README command launches this script: pass `--use_liger_kernel true` where a "
                "full fine-tune is launched"
            )
        if reason is not None:
            self.refused(call, message, reason)
        self.sites.extend(launched or [])

    def _fixed_adapter(self) -> str | None:
        """Why every run of this script trains LoRA: a trainer here gets a ``peft_config`` that flags cannot
        turn off (anything but TRL's ``get_peft_config(model_args)``, which is ``None`` without ``use_peft``)."""
        for trainer in self.nodes(cst.Call):
            if trainer_class(self.names(trainer.func)) is None:
                continue
            peft = keyword(trainer, "peft_config")
            if peft is None or literal_value(peft.value) is None:
                continue
            from_flags = isinstance(peft.value, cst.Call) and qualified_under(
                self.names(peft.value.func), (PEFT_FROM_FLAGS[0],), PEFT_FROM_FLAGS[1:]
            )
            if not from_flags:
                return f"the trainer adds a LoRA adapter (peft_config={code_of(peft.value)}): {LORA_SLOWDOWN}"
        return None

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if self.edited:
            self.import_runtime(RUNTIME, HELPER)
        return updated_node


class LigerGuard(Optimization):
    """Liger-Kernel's fused Triton kernels, switched on at run time only where they help (never on LoRA)."""

    id = "liger_guard"
    title = "use Liger-Kernel where it helps, checked at run time"
    tier = 1
    expected = "+10-20% full fine-tune throughput"
    summary = "use_liger_kernel guarded by a run-time check: liger installed, supported model, no LoRA, no DPO precompute"
    scope = "train"
    numerics = Numerics.ROUNDING
    numerics_reason = (
        "Liger's Triton kernels (norms, RoPE, SwiGLU, chunked cross-entropy): same loss, other order"
    )
    keywords = ("use_liger_kernel", "liger")
    codemods = (_GuardLiger,)
    needs = (*HF_CONFIGS, *(parser for _, parser in ARGUMENT_PARSERS))

    examples = (
        Example(
            "no_site_config_only_a_repository_helper_reads",
            before=HELPER_ONLY_CONFIG_PROGRAM,
            files=HELPER_ONLY_CONFIG_FILES,
        ),
        Example(
            "full_fine_tune",
            before="""\
from transformers import AutoModelForCausalLM
from trl import SFTConfig, SFTTrainer


def train(path, data):
    model = AutoModelForCausalLM.from_pretrained(path)
    args = SFTConfig(output_dir="out", bf16=True)
    trainer = SFTTrainer(model=model, args=args, train_dataset=data)
    trainer.train()
""",
            after="""\
from transformers import AutoModelForCausalLM
from trl import SFTConfig, SFTTrainer
from _perfbot_liger import liger_kernel_usable


def train(path, data):
    model = AutoModelForCausalLM.from_pretrained(path)
    args = SFTConfig(output_dir="out", bf16=True, use_liger_kernel=liger_kernel_usable(model))
    trainer = SFTTrainer(model=model, args=args, train_dataset=data)
    trainer.train()
""",
        ),
        Example(
            "module_import_inline_config_hub_model",
            before="""\
import trl


def train(data):
    trainer = trl.SFTTrainer(model="Qwen/Qwen2.5-0.5B", args=trl.SFTConfig(output_dir="out"), train_dataset=data)
    trainer.train()
""",
            after="""\
import trl
from _perfbot_liger import liger_kernel_usable


def train(data):
    trainer = trl.SFTTrainer(model="Qwen/Qwen2.5-0.5B", args=trl.SFTConfig(output_dir="out", use_liger_kernel=liger_kernel_usable("Qwen/Qwen2.5-0.5B")), train_dataset=data)
    trainer.train()
""",
        ),
        Example(
            "aliased_multiline_unguarded_flag_with_comments",
            before="""\
import transformers as hf


def train(model, data, cfg):
    args = hf.TrainingArguments(
        output_dir=cfg.out,  # checkpoints
        use_liger_kernel=True,  # fused kernels
        bf16=True
    )
    return hf.Trainer(model, args, train_dataset=data).train()
""",
            after="""\
import transformers as hf
from _perfbot_liger import liger_kernel_usable


def train(model, data, cfg):
    args = hf.TrainingArguments(
        output_dir=cfg.out,  # checkpoints
        use_liger_kernel=liger_kernel_usable(model),  # fused kernels
        bf16=True
    )
    return hf.Trainer(model, args, train_dataset=data).train()
""",
        ),
        Example(
            "dpo_precompute_from_settings",
            before="""\
from trl import DPOConfig, DPOTrainer


def train(model, data, dpo):
    config = DPOConfig(output_dir="out", precompute_ref_log_probs=dpo["precompute"])
    DPOTrainer(model=model, args=config, train_dataset=data).train()
""",
            after="""\
from trl import DPOConfig, DPOTrainer
from _perfbot_liger import liger_kernel_usable


def train(model, data, dpo):
    config = DPOConfig(output_dir="out", precompute_ref_log_probs=dpo["precompute"], use_liger_kernel=liger_kernel_usable(model, precompute_ref_log_probs=dpo["precompute"]))
    DPOTrainer(model=model, args=config, train_dataset=data).train()
""",
        ),
        Example(
            "explicit_keyword_beside_a_splat",
            before="""\
from trl import SFTConfig, SFTTrainer


def train(model, data, overrides):
    args = SFTConfig(output_dir="out", use_liger_kernel=True, **overrides)
    SFTTrainer(model=model, args=args, train_dataset=data).train()
""",
            after="""\
from trl import SFTConfig, SFTTrainer
from _perfbot_liger import liger_kernel_usable


def train(model, data, overrides):
    args = SFTConfig(output_dir="out", use_liger_kernel=liger_kernel_usable(model), **overrides)
    SFTTrainer(model=model, args=args, train_dataset=data).train()
""",
        ),
        Example(
            "refuses_model_returned_wrapped_from_a_helper_module",
            before="""\
from trl import SFTConfig, SFTTrainer

from setup_model import prepare


def train(path, data):
    model, tokenizer = prepare(path)
    args = SFTConfig(output_dir="out")
    SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer).train()
""",
            files={
                "setup_model.py": """\
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer


def with_adapter(base, rank):
    wrapped = get_peft_model(base, LoraConfig(r=rank))
    return wrapped


def prepare(path):
    base = AutoModelForCausalLM.from_pretrained(path)
    return with_adapter(base, 8), AutoTokenizer.from_pretrained(path)
"""
            },
            refusal="`prepare(...)` (train.py:7), which returns `with_adapter(...)` (setup_model.py:12), which returns "
            "`get_peft_model(...)` (setup_model.py:6)",
        ),
        Example(
            "already_guarded",
            before="""\
from _perfbot_liger import liger_kernel_usable
from trl import SFTConfig, SFTTrainer


def train(model, data):
    args = SFTConfig(output_dir="out", use_liger_kernel=liger_kernel_usable(model))
    SFTTrainer(model=model, args=args, train_dataset=data).train()
""",
        ),
        Example(
            "refuses_model_wrapped_by_get_peft_model",
            before="""\
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
from trl import SFTConfig, SFTTrainer


def load(path):
    model = AutoModelForCausalLM.from_pretrained(path)
    return get_peft_model(model, LoraConfig(r=16, target_modules=["q_proj", "v_proj"]))


def train(path, data):
    model = load(path)
    args = SFTConfig(output_dir="out", use_liger_kernel=True)
    SFTTrainer(model=model, args=args, train_dataset=data).train()
""",
            refusal="the model is a LoRA model (`load(...)` (train.py:12), which returns `get_peft_model(...)` (train.py:8))",
        ),
        Example(
            "refuses_trainer_peft_config",
            before="""\
from peft import LoraConfig
from trl import SFTConfig, SFTTrainer


def train(model, data):
    lora = LoraConfig(r=16, target_modules=["q_proj", "v_proj"])
    args = SFTConfig(output_dir="out")
    SFTTrainer(model=model, args=args, train_dataset=data, peft_config=lora).train()
""",
            refusal="took 2x as long",
        ),
        Example(
            "refuses_dpo_precompute",
            before="""\
from trl import DPOConfig, DPOTrainer


def train(model, data):
    args = DPOConfig(output_dir="out", precompute_ref_log_probs=True)
    DPOTrainer(model=model, args=args, train_dataset=data).train()
""",
            refusal="precompute_ref_log_probs=True",
        ),
        Example(
            "refuses_model_built_after_config",
            before="""\
from transformers import AutoModelForCausalLM
from trl import SFTConfig, SFTTrainer


def train(path, data):
    args = SFTConfig(output_dir="out")
    model = AutoModelForCausalLM.from_pretrained(path)
    SFTTrainer(model=model, args=args, train_dataset=data).train()
""",
            refusal="`model` is assigned after this line (line 7)",
        ),
        Example(
            "refuses_config_without_trainer",
            before="""\
from trl import SFTConfig


def make_args(out):
    return SFTConfig(output_dir=out)
""",
            refusal="no trainer call in this module takes this config",
        ),
    )
