"""What already decides a training loop's precision, so that no autocast goes around it: an autocast of the
loop's own, the model's weights put in bf16 by hand, an FSDP mixed-precision policy of the same run, a model that
casts itself to its compute dtype, or component configs that build the program in bf16."""

from __future__ import annotations

import ast
import functools
import weakref
from typing import cast

import libcst as cst

from optimizations.edits.planned import PlannedCodemod
from optimizations.program.components import instantiates_components, reads_config_key, top_level_settings
from optimizations.program.reachability import program_of
from optimizations.program.repository import RepoContext, SourceCache
from optimizations.program.syntax import NESTED_SCOPES, code_of, keyword, literal_value, qualified_under, walk
from optimizations.program.training_loops import is_method_call
from optimizations.program.values import outcomes
from optimizations.program.yaml_settings import YamlSetting

FP16 = ("torch.float16", "torch.half")
BF16 = ("torch.bfloat16",)
# FSDP's mixed-precision policies (FSDP1, FSDP2): a program that builds one casts its forward through FSDP.
FSDP_PRECISION = ("MixedPrecision", "MixedPrecisionPolicy")
# Attributes that name a tensor, not a module: a cast of one is no model's precision.
TENSOR_ATTRIBUTES = frozenset({"data", "weight", "bias", "grad"})
# The keywords a model constructor or loader takes its weights' dtype by.
DTYPE_KEYWORDS = ("dtype", "torch_dtype", "param_dtype")
# torch dtype names (and getattr(torch, name) spellings) by the dtype they are.
DTYPE_NAMES = {"half": "float16", "float": "float32", "bf16": "bfloat16", "fp16": "float16"}
# How a config spells bfloat16 (torchtune's ``dtype: bf16``).
BF16_DTYPES = ("bf16", "bfloat16", "torch.bfloat16")


_POLICIES: weakref.WeakKeyDictionary[SourceCache, list[tuple[str, str]]] = weakref.WeakKeyDictionary()


def fsdp_precision_policies(repo: RepoContext) -> list[tuple[str, str]]:
    """``(file, "file:line (`call`)")`` for the first FSDP mixed-precision policy (``MixedPrecision(...)``,
    FSDP2's ``MixedPrecisionPolicy(...)``) each file of the repository builds; read once per run."""
    if repo.sources not in _POLICIES:
        found = []
        for path in repo.python_files():
            try:
                text = repo.read(path)
            except (OSError, UnicodeDecodeError):
                continue
            if "torch.distributed.fsdp" not in text or "MixedPrecision" not in text:
                continue
            tree = repo.sources.syntax(path, text)
            calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)] if tree is not None else []
            policy = next((c for c in calls if _called_name(c.func) in FSDP_PRECISION), None)
            if policy is not None:
                found.append((path, f"{path}:{policy.lineno} (`{ast.unparse(policy.func)}(...)`)"))
        _POLICIES[repo.sources] = found
    return _POLICIES[repo.sources]


def _casts_a_submodule(call: ast.Call) -> bool:
    """A cast (:func:`_casts_to_a_dtype`) of ``self.<attributes>``, none of them a tensor's (``data``,
    ``weight``, ``bias``, ``grad``) and no call on the way: a module's own submodule cast in place."""
    if not (_casts_to_a_dtype(call) and isinstance(call.func, ast.Attribute)):
        return False
    receiver = call.func.value
    while isinstance(receiver, ast.Attribute | ast.Subscript):
        if isinstance(receiver, ast.Attribute) and receiver.attr in TENSOR_ATTRIBUTES:
            return False
        receiver = receiver.value
    return isinstance(receiver, ast.Name) and receiver.id == "self" and receiver is not call.func.value


def _casts_to_a_dtype(call: ast.Call) -> bool:
    """``x.to(dtype=D)``, ``x.to(D)`` or ``x.to(device, D)`` with ``D`` a dtype other than float32 (a name with
    "dtype" in it, or ``torch.bfloat16``/``torch.float16``), or ``x.bfloat16()``/``x.half()``."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr in ("bfloat16", "half"):
        return not call.args
    if func.attr != "to":
        return False
    given = [k.value for k in call.keywords if k.arg == "dtype"] + list(call.args)
    return any(_names_a_reduced_dtype(value) for value in given)


def _names_a_reduced_dtype(value: ast.expr) -> bool:
    """``torch.bfloat16``/``torch.float16``/``torch.half``, or a name or attribute with "dtype" in it."""
    name = value.attr if isinstance(value, ast.Attribute) else value.id if isinstance(value, ast.Name) else ""
    return name in ("bfloat16", "float16", "half") or "dtype" in name.lower()


def _called_name(func: ast.expr) -> str:
    """The last name of a called expression: ``MixedPrecision`` for ``fsdp.MixedPrecision``."""
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _built_cast(value: cst.BaseExpression) -> bool:
    """``Layer(...).bfloat16()`` or ``Layer(...).to(...)``, through ``.cuda()``s: an object built (a class, by
    its capitalised name) and cast."""
    while is_method_call(value, "bfloat16", "to", "cuda"):
        value = cast(cst.Attribute, value.func).value  # a method call's callee is an attribute
        if isinstance(value, cst.Call):
            callee = value.func.attr if isinstance(value.func, cst.Attribute) else value.func
            if isinstance(callee, cst.Name) and callee.value[:1].isupper():
                return True
    return False


def configured_bf16(repo: RepoContext) -> list[YamlSetting]:
    """The ``dtype: bf16`` lines of a program whose component configs all set its dtype to bf16, and that reads
    that setting; ``[]`` otherwise."""
    if not instantiates_components(repo) or not reads_config_key(repo, "dtype"):
        return []
    found = top_level_settings(repo, "dtype")
    return found if found and all(str(s.value) in BF16_DTYPES for s in found) else []


# What :meth:`LoopPrecision._dtypes` says of a dtype it cannot follow to a value (``dtype=ptdtype`` from a flag).
UNFOLLOWED_DTYPE = "a dtype set elsewhere"


class LoopPrecision(PlannedCodemod):
    """The checks of a training loop that find its precision already chosen: by an autocast of its own, by weights
    in bf16, or outside its file (an FSDP policy, a model that casts itself)."""

    def _autocasts(self, owner: cst.CSTNode) -> list[tuple[cst.BaseExpression, cst.Call, list[str]]]:
        """The autocast context managers in the function (the ``with`` item, the autocast call), each with the
        dtypes it may cast to:
        ``torch.autocast(...)``, ``torch.cuda.amp.autocast(...)``, ``accelerator.autocast()``, or a name bound
        to one (``ctx = nullcontext() if cpu else torch.amp.autocast(...)``; ``with ctx:``)."""
        found = []
        scopes: list[cst.CSTNode] = [owner] if owner is self.parsed.module else [owner, self.parsed.module]
        for node in walk(owner.body if isinstance(owner, cst.FunctionDef) else owner, NESTED_SCOPES):
            if not isinstance(node, cst.WithItem):
                continue
            for value in outcomes(node.item, scopes) or [node.item]:
                if isinstance(value, cst.Call) and (
                    qualified_under(self.names(value.func), ("torch",), ("autocast",))
                    or is_method_call(value, "autocast")
                ):
                    found.append((node.item, value, self._dtypes(value, scopes)))
                    break
        return found

    def _dtypes(self, autocast: cst.Call, scopes: list[cst.CSTNode]) -> list[str]:
        """The dtypes an autocast may cast to, by name (``float16`` when none is given: CUDA's default);
        ``a dtype set elsewhere`` where it cannot be followed."""
        given = keyword(autocast, "dtype")
        if given is None and len(autocast.args) > 1 and autocast.args[1].keyword is None:
            given = autocast.args[1]  # autocast(device_type, dtype) and cuda.amp.autocast(enabled, dtype)
        if given is None:
            return ["float16"] if not is_method_call(autocast, "autocast") else ["the framework's dtype"]
        values = outcomes(given.value, scopes)
        if values is None:
            return [UNFOLLOWED_DTYPE]
        dtypes = []
        for value in values:
            names: set[object] = {n.rpartition(".")[2] for n in self.names(value) if n.startswith("torch.")}
            if isinstance(value, cst.Call) and code_of(value.func) == "getattr" and len(value.args) == 2:
                names = {literal_value(v) for v in outcomes(value.args[1].value, scopes) or []}
            named = {DTYPE_NAMES.get(n, n) for n in names if isinstance(n, str)}
            dtypes.extend(sorted(named) or [code_of(value)])
        return list(dict.fromkeys(dtypes))

    def _float16(self, owner: cst.CSTNode) -> cst.CSTNode | None:
        scope = owner.body if isinstance(owner, cst.FunctionDef) else owner
        for node in walk(scope, NESTED_SCOPES):
            if isinstance(node, (cst.Attribute, cst.Name)) and self.names(node) & set(FP16):
                return node
            if is_method_call(node, "half") and not node.args:
                return node
        return None

    @functools.cached_property
    def _fsdp_mixed_precision(self) -> str | None:
        """Where an FSDP mixed-precision policy is built in a file that the same run loads as this one
        (:func:`fsdp_precision_policies`); None where none is."""
        program = program_of(self.repo)
        return next(
            (
                where
                for path, where in fsdp_precision_policies(self.repo)
                if program.same_run(self.path, path)
            ),
            None,
        )

    @functools.cached_property
    def _cast_by_hand_in_its_modules(self) -> str | None:
        """``file:line (`code`)`` of a module cast in place to a dtype by name in a file this one imports
        (karpathy/nanochat's ``gpt.py``: ``self.transformer.wte.to(dtype=COMPUTE_DTYPE)``, its linear layers
        casting their weights to the activations' dtype "replacing torch.amp.autocast"); None where none is.
        Only a statement in a class's method that casts one of its own submodules counts: a statement-level
        ``.to(...)`` casts a module in place (a tensor's would do nothing unassigned), and huggingface/peft's
        ``base_layer.bias.data.add_(...).to(orig_dtype)`` is a tensor's, not a model's precision."""
        program = program_of(self.repo)
        for path in sorted(program.imported_from(self.path) - {self.path}):
            tree = program.syntax(path)
            methods = [
                method
                for cls in (ast.walk(tree) if tree is not None else ())
                if isinstance(cls, ast.ClassDef)
                for method in cls.body
                if isinstance(method, ast.FunctionDef)
            ]
            for node in (n for method in methods for n in ast.walk(method)):
                if (
                    isinstance(node, ast.Expr)
                    and isinstance(node.value, ast.Call)
                    and _casts_a_submodule(node.value)
                ):
                    return f"{path}:{node.lineno} (`{ast.unparse(node.value)}`)"
        return None

    def _weights_in_bf16(self, loop: cst.For | cst.While) -> cst.BaseSmallStatement | None:
        """A statement of the file that puts the model's weights in bfloat16 by hand: a module cast in place
        (``model.bfloat16()``, ``model.to(torch.bfloat16)`` as a statement: a tensor's ``.to`` does nothing
        unassigned), a parameter's data cast (``m.weight.data = m.weight.data.bfloat16()``), a layer built and
        cast (``self.embed = nn.Embedding(v, d).bfloat16()``: what follows it must take bf16 inputs), or a model
        the loop calls built or loaded in bf16 (``model = GPT(cfg).bfloat16()``, ``from_pretrained(...,
        torch_dtype=torch.bfloat16)``). KellerJordan/modded-nanogpt's scripts cast their layers so."""
        called = {
            c.func.value for c in walk(loop, ()) if isinstance(c, cst.Call) and isinstance(c.func, cst.Name)
        }
        for node in walk(self.parsed.module, ()):
            if (
                isinstance(node, cst.Expr)
                and isinstance(node.value, cst.Call)
                and self._casts_to_bf16(node.value)
            ):
                return node
            if not isinstance(node, cst.Assign) or not any(
                isinstance(n, cst.Call) and self._casts_to_bf16(n)
                for n in [node.value, *walk(node.value, ())]
            ):
                continue
            for target in (t.target for t in node.targets):
                if isinstance(target, cst.Attribute) and (
                    target.attr.value == "data" or _built_cast(node.value)
                ):
                    return node
                if isinstance(target, cst.Name) and target.value in called:
                    return node
        return None

    def _casts_to_bf16(self, call: cst.Call) -> bool:
        """``x.bfloat16()``, ``x.to(..., torch.bfloat16)``, or a call given ``dtype``/``torch_dtype`` bf16."""
        if is_method_call(call, "bfloat16") and not call.args:
            return True
        given = [
            a.value
            for a in call.args
            if is_method_call(call, "to") or (a.keyword is not None and a.keyword.value in DTYPE_KEYWORDS)
        ]
        scopes: list[cst.CSTNode] = [self.enclosing_body(call), self.parsed.module]
        return any(
            all(self.names(v) & set(BF16) for v in (outcomes(value, scopes) or [value])) for value in given
        )
