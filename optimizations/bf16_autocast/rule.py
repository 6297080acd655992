"""bf16 autocast in a hand-written training loop: the forward pass and the loss run their matmuls in bfloat16.

In each training loop, the statements that compute the loss that ``.backward()`` is called on -- the last
assignment of the loss before it, and the earlier statements of the same block it depends on, except
data moves such as ``x.to(device)`` -- are wrapped in::

    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=bf16_supported()):

``bf16_supported()`` (vendored as ``_perfbot_precision.py``) is true only on a CUDA GPU with bf16 tensor cores
(Ampere and newer). CUDA autocast leaves CPU ops alone, so a CPU-only run, or one on an older GPU, computes
exactly what it did before; ``.backward()`` and the optimizer step stay outside. bf16 keeps float32's range, so
no loss scaling is needed.

Already done: a loop whose function autocasts to bf16, directly or through a name (``ctx = nullcontext() if cpu
else torch.amp.autocast(..., dtype=ptdtype)``, ``ptdtype`` looked up from a bf16-or-float16 choice); a loop whose
file puts the model in bf16 by hand (``model.bfloat16()``, ``m.weight.data = m.weight.data.bfloat16()``, a layer
built as ``nn.Embedding(...).bfloat16()``, a model loaded with ``torch_dtype=torch.bfloat16``): it computes in
bf16 already, and its author chose which parts stay float32.

Where a framework drives training its setting is the site, never an autocast inside it: ``Accelerator(...)``
gets ``mixed_precision=bf16_unless_launched_otherwise()`` (``"bf16"`` on such a GPU unless ``accelerate launch``
chose a precision: Accelerate lets the argument win over the launch), Lightning's ``Trainer``/``Fabric`` gets
``precision=("bf16-mixed" if bf16_supported() else "32-true")``, a DeepSpeed dict config gets ``"bf16":
{"enabled": bf16_supported()}``; a setting already given is already done (bf16) or refused with its line. A
setting a repository helper picks where the GPU has bf16 (litgpt's ``get_default_supported_precision``, called
or defaulting a parameter) is already done too. An ``Accelerator`` given a DeepSpeed plugin is refused: the
DeepSpeed config owns the precision. So is a framework call built only when a caller passes none (``if
accelerator is None: accelerator = Accelerator()``, a default for every caller), and one in a file that builds
another with a precision of its own (huggingface/accelerate's FP8 benchmarks compare a plain ``Accelerator()``
with ``Accelerator(mixed_precision="fp8")``: the plain one is the reference).

A program that builds its parts from YAML configs by class name and reads a ``dtype`` setting from them
(torchtune's recipes: ``training.get_dtype(cfg.dtype)``, the model built in it) trains in bf16 where every such
config says ``dtype: bf16``: each of those lines is already done (:meth:`Bf16Autocast.config_sites`), and its
loops get no autocast. Where any says another dtype, the loops are judged as any other.

Refused: a loop that already autocasts to another dtype, a loop that a run with an FSDP mixed-precision policy
loads (``MixedPrecision``/``MixedPrecisionPolicy`` built in a file the same entry point imports: FSDP casts the
forward, and its policy is where bf16 is chosen), a loop whose model casts itself in place to a dtype by name in a
module the loop's file imports (karpathy/nanochat's ``gpt.py``: ``self.transformer.wte.to(dtype=COMPUTE_DTYPE)``,
its layers casting weights to the activations' dtype instead of autocast), a file that uses a ``GradScaler``
that may be enabled or float16, a loop whose backward is a framework's (``accelerator.backward(loss)``) set up
in another file, a loop with more than one ``.backward()``, a loss not computed in the block that calls
``.backward()`` (a loss kept on an attribute, minGPT's ``logits, self.loss = model(x, y)``, counts as computed
there).

Tier 1 because loss parity holds: the example GPT (``examples/gpt_loop``, GPT-2 small shapes) trained 200
steps on an H100 in float32 and under this autocast, same seed, data and batch order, gave step losses within
0.0041 of each other at all 20 logged steps, at twice the tokens/s (``experiments/from_scratch_gpt``).
"""

from __future__ import annotations

import ast
import functools
import weakref

import libcst as cst
import libcst.matchers as m
from libcst.helpers import parse_template_statement

from optimizations.edits.expressions import add_keywords, expr
from optimizations.edits.planned import PlannedCodemod
from optimizations.program.components import (
    instantiates_components,
    reads_config_key,
    top_level_settings,
)
from optimizations.program.config_use import fills_in_for_a_parameter
from optimizations.program.frameworks import (
    ACCELERATE,
    DEEPSPEED,
    FRAMEWORK_WORDS,
    FrameworkCall,
    framework_backward,
    framework_calls,
    json_config,
    launch_setting,
)
from optimizations.program.reachability import program_of
from optimizations.program.repository import RepoContext, Site, SourceCache
from optimizations.program.shapes import ProgramShape
from optimizations.program.syntax import NESTED_SCOPES, code_of, keyword, literal_value, qualified_under, walk
from optimizations.program.training_loops import BACKWARD, backward_calls, is_method_call, loss_names
from optimizations.program.values import assignments, dict_items, outcomes
from optimizations.program.yaml_settings import YamlSetting
from optimizations.registry import Example, Numerics, Optimization
from optimizations.runtime import PRECISION_RUNTIME

CHECK = "bf16_supported"
LAUNCH_AWARE = "bf16_unless_launched_otherwise"
AUTOCAST = (
    'with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=bf16_supported()):\n    pass\n'
)
# Calls that only move or re-type data: a statement made of these is not part of the forward pass.
DATA_METHODS = ("to", "cuda", "pin_memory", "contiguous", "long", "int", "float", "get", "items", "keys")
DATA_FUNCTIONS = ("next", "len", "iter", "tuple", "list", "dict")
FP16 = ("torch.float16", "torch.half")
BF16 = ("torch.bfloat16",)
# FSDP's mixed-precision policies (FSDP1, FSDP2): a program that builds one casts its forward through FSDP.
FSDP_PRECISION = ("MixedPrecision", "MixedPrecisionPolicy")
# Attributes that name a tensor, not a module: a cast of one is no model's precision.
TENSOR_ATTRIBUTES = frozenset({"data", "weight", "bias", "grad"})
# The keywords a model constructor or loader takes its weights' dtype by.
DTYPE_KEYWORDS = ("dtype", "torch_dtype")
# torch dtype names (and getattr(torch, name) spellings) by the dtype they are.
DTYPE_NAMES = {"half": "float16", "float": "float32", "bf16": "bfloat16", "fp16": "float16"}


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
        value = value.func.value
        if isinstance(value, cst.Call):
            callee = value.func.attr if isinstance(value.func, cst.Attribute) else value.func
            if isinstance(callee, cst.Name) and callee.value[:1].isupper():
                return True
    return False


class _Refused(Exception):
    """A check failed; the message is the reason."""


def _assigned(statement: cst.BaseStatement) -> set[str]:
    """Names a simple statement binds (assignment targets, unpacking included), and the dotted attributes it
    assigns (``self.loss`` of ``logits, self.loss = model(x, y)``)."""
    names: set[str] = set()
    if not isinstance(statement, cst.SimpleStatementLine):
        return names
    for small in statement.body:
        targets = []
        if isinstance(small, cst.Assign):
            targets = [t.target for t in small.targets]
        elif isinstance(small, (cst.AugAssign, cst.AnnAssign)):
            targets = [small.target]
        for target in targets:
            names |= {n.value for n in m.findall(target, m.Name()) if not _attribute_part(target, n)}
            names |= {code_of(a) for a in _unpacked(target) if _dotted(a)}
    return names


def _picks_bf16(function: cst.FunctionDef, bf16: tuple[object, ...]) -> bool:
    """Whether ``function`` asks the GPU for bf16 (``...is_bf16_supported()``) and may return one of ``bf16``."""
    nodes = list(walk(function.body, NESTED_SCOPES))
    asks = any(isinstance(n, cst.Call) and code_of(n.func).endswith("is_bf16_supported") for n in nodes)
    returned = [
        literal_value(v)
        for n in nodes
        if isinstance(n, cst.Return) and n.value is not None
        for v in outcomes(n.value, [function]) or []
    ]
    return asks and any(v in bf16 for v in returned)


def _unpacked(target: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The target itself, or the elements a tuple or list target unpacks into, nested ones included."""
    if isinstance(target, (cst.Tuple, cst.List)):
        return [part for element in target.elements for part in _unpacked(element.value)]
    return [target]


def _dotted(node: cst.BaseExpression) -> bool:
    """``self.loss``, ``state.out.loss``: an attribute of a name, through attributes only."""
    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name)


def _losses(loop: cst.For | cst.While) -> set[str]:
    """The names the loop calls ``.backward()`` on, or the dotted attribute it calls it on directly
    (``self.loss.backward()``, minGPT's trainer)."""
    names = loss_names(loop)
    receivers = [call.func.value for call in backward_calls(loop) if isinstance(call.func, cst.Attribute)]
    return names or {code_of(r) for r in receivers if isinstance(r, cst.Attribute) and _dotted(r)}


def _attribute_part(target: cst.CSTNode, name: cst.Name) -> bool:
    """``name`` is inside an attribute or subscript target (``self.x = ...``, ``d[k] = ...``): not a binding."""
    return any(
        isinstance(node, (cst.Attribute, cst.Subscript)) and m.findall(node, m.Name(name.value))
        for node in m.findall(target, m.Attribute() | m.Subscript())
    )


def _with_element(config: cst.Dict, element: cst.DictElement) -> cst.Dict:
    """The dict literal with one more ``key: value`` at its end, after the same separator as the others."""
    elements = list(config.elements)
    if not elements:
        return config.with_changes(elements=[element])
    separator = (
        elements[0].comma if len(elements) > 1 else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    )
    last = elements[-1]
    elements[-1] = last.with_changes(comma=separator)
    return config.with_changes(elements=[*elements, element.with_changes(comma=last.comma)])


def _read(statement: cst.BaseStatement) -> set[str]:
    return {n.value for n in m.findall(statement, m.Name())}


# How a config spells bfloat16 (torchtune's ``dtype: bf16``).
BF16_DTYPES = ("bf16", "bfloat16", "torch.bfloat16")


def configured_bf16(repo: RepoContext) -> list[YamlSetting]:
    """The ``dtype: bf16`` lines of a program whose component configs all set its dtype to bf16, and that reads
    that setting; ``[]`` otherwise."""
    if not instantiates_components(repo) or not reads_config_key(repo, "dtype"):
        return []
    found = top_level_settings(repo, "dtype")
    return found if found and all(str(s.value) in BF16_DTYPES for s in found) else []


class _Autocast(PlannedCodemod):
    def plan(self, module: cst.Module) -> None:
        self.framework_calls = framework_calls(self.nodes(cst.Call), self.names)
        frameworks = [f for f in self.framework_calls if self.runs(f.call)]
        for found in frameworks:
            self._plan_framework(found)
        if frameworks:
            return  # the framework owns the precision of every loop in this file
        if configured_bf16(self.repo):
            return  # the configs build the model in bf16: their lines are the sites (config_sites)
        self.scaler = next(
            (
                call
                for call in self.nodes(cst.Call)
                if any(name.rsplit(".", 1)[-1] == "GradScaler" for name in self.names(call.func))
                and self._may_be_enabled(call)
            ),
            None,
        )
        for loop in self.training_loops():
            self._plan_loop(loop)

    def _scopes(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        """Where the names ``node`` reads are bound: its function, then the module."""
        owner = self.enclosing_body(node)
        return [owner] if owner is self.parsed.module else [owner, self.parsed.module]

    def _may_be_enabled(self, scaler: cst.Call) -> bool:
        """A ``GradScaler`` that scales unless ``enabled=`` is always false (``enabled=False``, or a name
        bound only to false)."""
        enabled = keyword(scaler, "enabled")
        if enabled is None:
            return True
        values = outcomes(enabled.value, self._scopes(scaler))
        return values is None or any(literal_value(v) is not False for v in values)

    def _plan_framework(self, found: FrameworkCall) -> None:
        framework, call = found.framework, found.call
        if framework is DEEPSPEED:
            self._plan_deepspeed(found)
            return
        bf16 = framework.bf16[0]
        message = (
            f"{code_of(call.func)}(...): {framework.precision}={bf16!r} where the GPU has bf16 tensor cores"
        )
        parent = self.parent(call)
        read = isinstance(parent, cst.Attribute) and parent.value is call
        if isinstance(parent, cst.Expr) or read:
            how = (
                f"only `{code_of(parent)}` is read from it" if read else "the call is a statement of its own"
            )
            self.refused(
                call,
                message,
                f"the `{code_of(call.func)}(...)` built here is thrown away ({how}): it sets up shared state, and "
                "the one that drives training is built elsewhere",
            )
            return
        setting = found.setting
        if setting is not None:
            self._judge_setting(found, message, setting.value)
            return
        if fills_in_for_a_parameter(self, call):
            self.refused(
                call,
                message,
                "it is built only when the caller passes none (`if ... is None:`): a default for every caller, "
                "who chooses the precision with the one it passes",
            )
            return
        reference = self._compared_with(found)
        if reference is not None:
            self.refused(
                call,
                message,
                f"the file builds another one with {reference}: this one is the reference that one is compared "
                "with, and keeps its precision",
            )
            return
        plugin = keyword(call, "deepspeed_plugin") or keyword(call, "deepspeed_plugins")
        if framework is ACCELERATE and plugin is not None:
            self.refused(
                call,
                message,
                f"its DeepSpeed plugin (`{code_of(plugin.value)}`) takes the precision from the DeepSpeed config; "
                'set "bf16": {"enabled": true} there',
            )
            return
        launch = (
            launch_setting(self.repo, framework.precision, self.path) if framework is ACCELERATE else None
        )
        if launch is not None:
            self.refused(call, message, launch)
            return
        if framework is ACCELERATE:  # the argument overrides `accelerate launch`: only where it chose nothing
            value, helper = expr(f"{LAUNCH_AWARE}()"), LAUNCH_AWARE
        else:
            value, helper = expr(f'("{bf16}" if {CHECK}() else "32-true")'), CHECK
        self.replacements[call] = lambda updated: add_keywords(updated, [(framework.precision, value)])
        self.runtime_imports.add((PRECISION_RUNTIME, helper))
        self.changed(call, message)

    def _compared_with(self, found: FrameworkCall) -> str | None:
        """``precision=value at line N`` of another call to the same framework in this file that sets its
        precision to a literal other than bf16 (huggingface/accelerate's FP8 benchmarks build a plain
        ``Accelerator()`` for the baseline and ``Accelerator(mixed_precision="fp8")`` beside it); None otherwise."""
        framework = found.framework
        for other in self.framework_calls:
            given = other.setting
            if other.framework is not framework or other.call is found.call or given is None:
                continue
            value = literal_value(given.value)
            if isinstance(value, str) and value not in framework.bf16:
                return f"`{framework.precision}={code_of(given.value)}` at line {self.line(other.call)}"
        return None

    def _judge_setting(self, found: FrameworkCall, message: str, value: cst.BaseExpression) -> None:
        framework, call = found.framework, found.call
        values = outcomes(value, self._scopes(call))
        literals = None if values is None else [literal_value(v) for v in values]
        written = f"{framework.precision}={code_of(value)}"
        if self.calls(value, LAUNCH_AWARE):
            self.already(
                call, f"{framework.name} mixed precision bf16 unless the launch chose one (`{written}`)"
            )
        elif literals is not None and any(v in framework.bf16 for v in literals):
            self.already(call, f"{framework.name} mixed precision bf16 (`{written}`)")
        elif literals is not None and any(v in framework.float16 for v in literals):
            self.refused(
                call,
                message,
                f"`{written}` at line {self.line(value)}: float16 mixed precision; moving it "
                "to bf16 is a separate change",
            )
        elif (picker := self._bf16_picker(value, call, framework.bf16)) is not None:
            self.already(
                call,
                f"{framework.name} mixed precision bf16 where the GPU has it (`{written}`: "
                f"`{code_of(picker.func)}(...)` at line {self.line(picker)} picks {framework.bf16[0]!r} there)",
            )
        elif (default := self._bf16_default(value, call, framework.bf16)) is not None:
            self.already(
                call,
                f"{framework.name} mixed precision bf16 unless the run asks otherwise (`{written}`: the parameter "
                f"defaults to {literal_value(default)!r} at line {self.line(default)})",
            )
        elif literals is None or ... in literals:
            self.refused(
                call,
                message,
                f"`{written}` at line {self.line(value)} comes from the run's arguments: choose "
                f"{framework.bf16[0]!r} where they are given",
            )
        else:
            self.refused(call, message, f"`{written}` is set explicitly at line {self.line(value)}")

    def _bf16_default(
        self, value: cst.BaseExpression, at: cst.Call, bf16: tuple[object, ...]
    ) -> cst.BaseExpression | None:
        """The default of the parameter ``value`` names, where it is one of ``bf16`` and the function never
        assigns the parameter (Lightning-AI/litgpt's XLA scripts: ``precision: str = "bf16-true"``)."""
        function = self.enclosing_body(at)
        if not isinstance(value, cst.Name) or not isinstance(function, cst.FunctionDef):
            return None
        parameters = (*function.params.params, *function.params.kwonly_params)
        parameter = next((p for p in parameters if p.name.value == value.value), None)
        if parameter is None or parameter.default is None or assignments(function, value.value):
            return None
        return parameter.default if literal_value(parameter.default) in bf16 else None

    def _bf16_picker(
        self, value: cst.BaseExpression, at: cst.Call, bf16: tuple[object, ...]
    ) -> cst.Call | None:
        """The call of a repository function that picks the framework's bf16 value where the GPU supports bf16
        (it calls ``is_bf16_supported()`` and can return one of ``bf16``), where ``value`` is that call, or a
        parameter the function defaults with it (``precision = precision or pick(...)``, litgpt's
        ``get_default_supported_precision``)."""
        candidates = [value]
        if isinstance(value, cst.Name):
            for assign in assignments(self.enclosing_body(at), value.value):
                default = assign.value
                if m.matches(default, m.BooleanOperation(left=m.Name(value.value), operator=m.Or())):
                    default = default.right
                candidates.append(default)
        for candidate in candidates:
            found = self.repository_function(candidate.func) if isinstance(candidate, cst.Call) else None
            if found is not None and _picks_bf16(found[0], bf16):
                return candidate
        return None

    def _plan_deepspeed(self, found: FrameworkCall) -> None:
        call = found.call
        message = 'deepspeed.initialize(...): the config\'s "bf16": {"enabled": true} where the GPU has it'
        setting = found.setting
        if setting is None:
            self.refused(
                call, message, f"the DeepSpeed config comes from the command line (`{code_of(call)}`)"
            )
            return
        values = outcomes(setting.value, self._scopes(call))
        configs = [dict_items(v) for v in values or []]
        if values is None or not values:
            self.refused(call, message, f"the config `{code_of(setting.value)}` is not written in this file")
            return
        if all(isinstance(literal_value(v), str) for v in values):
            for value in values:
                self._judge_json(call, message, literal_value(value))
            return
        if any(items is None for items in configs):
            self.refused(call, message, f"the config `{code_of(setting.value)}` is not a dict literal here")
            return
        for value, items in zip(values, configs, strict=True):
            section = {name: dict_items(items[name]) for name in ("bf16", "fp16") if name in items}
            enabled = {
                name: literal_value(part.get("enabled")) if part else ... for name, part in section.items()
            }
            if enabled.get("bf16") is True:
                self.already(value, 'DeepSpeed bf16 (`"bf16": {"enabled": True}`)')
            elif enabled.get("fp16") is True:
                self.refused(value, message, f"the config enables fp16 at line {self.line(items['fp16'])}")
            elif section:
                self.refused(
                    value, message, f"the config sets precision at line {self.line(value)}: decide there"
                )
            else:
                element = expr(f'{{"bf16": {{"enabled": {CHECK}()}}}}').elements[0]
                self.replacements[value] = lambda updated, element=element: _with_element(updated, element)
                self.runtime_imports.add((PRECISION_RUNTIME, CHECK))
                self.changed(value, message)

    def _judge_json(self, call: cst.Call, message: str, path: str) -> None:
        """A DeepSpeed config given as a JSON file of the repository."""
        found = json_config(self.repo, self.path, path)
        if found is None:
            self.refused(call, message, f"the config file `{path}` is not in the repository")
            return
        where, config = found
        if (config.get("bf16") or {}).get("enabled") is True:
            self.sites.append(
                Site(where, 1, self.optimization.id, "DeepSpeed bf16 in its config", False, already=True)
            )
        elif (config.get("fp16") or {}).get("enabled") is True:
            self.refused(call, message, f"{where} enables fp16: moving it to bf16 is a separate change")
        else:
            self.refused(
                call,
                message,
                f"{where} is JSON, which cannot ask whether the GPU has bf16: add the section "
                "where every GPU that runs it does",
            )

    def _plan_loop(self, loop: cst.For | cst.While) -> None:
        message = (
            "forward and loss under bf16 autocast (CUDA GPUs with bf16 tensor cores; unchanged elsewhere)"
        )
        owner = self.enclosing_body(loop)
        existing = self._autocasts(owner)
        bf16 = [(item, call, dtypes) for item, call, dtypes in existing if "bfloat16" in dtypes]
        if bf16:
            item, call, dtypes = bf16[0]
            if all(site.line != self.line(item) for site in self.sites):
                dtype = keyword(call, "dtype") or call.args[1]
                either = (
                    ""
                    if dtypes == ["bfloat16"]
                    else f"; dtype `{code_of(dtype.value)}` is {' or '.join(dtypes)}"
                )
                self.already(
                    item, f"forward and loss under autocast to bfloat16 (`with {code_of(item)}:`{either})"
                )
            return
        try:
            if existing:
                item, _call, dtypes = existing[0]
                raise _Refused(
                    f"the loop already autocasts at line {self.line(item)} (`{code_of(item)}`, "
                    f"to {' or '.join(dtypes)})"
                )
            sharded = self._fsdp_mixed_precision
            if sharded is not None:
                raise _Refused(
                    f"FSDP mixed precision is set up at {sharded}: the framework that shards the model casts "
                    "its forward; choose bf16 there, not an autocast inside it"
                )
            by_hand = self._cast_by_hand_in_its_modules
            if by_hand is not None:
                raise _Refused(
                    f"the model casts itself to its compute dtype by hand at {by_hand}: its precision is chosen "
                    "there, not by an autocast"
                )
            framework = next((b for b in backward_calls(loop) if framework_backward(b)), None)
            if framework is not None:
                raise _Refused(
                    f"`{code_of(framework)}` at line {self.line(framework)}: the framework that owns this "
                    "backward sets the precision, and its set-up is not in this file"
                )
            if self.scaler is not None:
                raise _Refused(
                    f"the file uses a GradScaler at line {self.line(self.scaler)} (`{code_of(self.scaler)}`): "
                    "float16 mixed precision; moving it to bf16 is a separate change"
                )
            half = self._float16(owner)
            if half is not None:
                raise _Refused(f"the loop's code uses float16 at line {self.line(half)} (`{code_of(half)}`)")
            cast = self._weights_in_bf16(loop)
            if cast is not None:
                if all(site.line != self.line(cast) for site in self.sites):  # one site for the file's loops
                    written = code_of(cast).strip().splitlines()[0]
                    self.already(
                        cast,
                        f"the model is put in bfloat16 by hand (`{written}`): its forward computes in bf16 "
                        "without autocast",
                    )
                return
            block, span = self._span(loop)
        except _Refused as refusal:
            self.refused(loop, message, str(refusal))
            return
        self._wrap(block, span)
        self.runtime_imports.add((PRECISION_RUNTIME, CHECK))
        self.need_module("torch")
        self.changed(span[0], message)

    def _autocasts(self, owner: cst.CSTNode) -> list[tuple[cst.BaseExpression, cst.Call, list[str]]]:
        """The autocast context managers in the function (the ``with`` item, the autocast call), each with the
        dtypes it may cast to:
        ``torch.autocast(...)``, ``torch.cuda.amp.autocast(...)``, ``accelerator.autocast()``, or a name bound
        to one (``ctx = nullcontext() if cpu else torch.amp.autocast(...)``; ``with ctx:``)."""
        found = []
        scopes = [owner] if owner is self.parsed.module else [owner, self.parsed.module]
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
            return ["a dtype set elsewhere"]
        dtypes = []
        for value in values:
            names = {n.rpartition(".")[2] for n in self.names(value) if n.startswith("torch.")}
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
        return any(self.names(value) & set(BF16) for value in given)

    def _span(self, loop: cst.For | cst.While) -> tuple[cst.IndentedBlock, list[cst.BaseStatement]]:
        """The block holding ``.backward()`` and the statements in it to wrap: from the first one of the
        forward pass to the last assignment of the loss."""
        backwards = backward_calls(loop)
        if len(backwards) > 1:
            raise _Refused(
                f"the loop calls .backward() {len(backwards)} times: wrap each forward pass by hand"
            )
        backward = backwards[0]
        statement = self.statement_of(backward)
        block = self.parent(statement)
        body = list(block.body)
        index = next(i for i, s in enumerate(body) if s is statement)
        losses = _losses(loop)
        last = next((i for i in range(index - 1, -1, -1) if _assigned(body[i]) & losses), None)
        if last is None:
            raise _Refused(
                f"the loss ({', '.join(sorted(losses)) or code_of(backward.func.value)}) is not computed in the "
                "block that calls .backward(): wrap its forward pass by hand"
            )
        first, needed = last, _read(body[last])
        for i in range(last - 1, -1, -1):
            written = _assigned(body[i]) if isinstance(body[i], cst.SimpleStatementLine) else _read(body[i])
            if not written & needed:
                continue
            if not isinstance(body[i], cst.SimpleStatementLine):
                break
            if not self._moves_data(body[i]):
                first, needed = i, needed | _read(body[i])
        span = body[first : last + 1]
        for node in span:
            for call in m.findall(node, m.Call()):
                if is_method_call(call, BACKWARD, "step"):
                    raise _Refused(
                        f"line {self.line(call)} steps or calls .backward() inside the forward pass"
                    )
        return block, span

    def _moves_data(self, statement: cst.SimpleStatementLine) -> bool:
        """Only moves or unpacks data: every call is ``.to(...)``, ``.cuda()``, ``next(...)``, ..."""
        for call in m.findall(statement, m.Call()):
            if is_method_call(call, *DATA_METHODS):
                continue
            if isinstance(call.func, cst.Name) and call.func.value in DATA_FUNCTIONS:
                continue
            return False
        return True

    def _wrap(self, block: cst.IndentedBlock, span: list[cst.BaseStatement]) -> None:
        body = list(block.body)
        start = next(i for i, s in enumerate(body) if s is span[0])
        count = len(span)

        def wrap(updated: cst.IndentedBlock) -> cst.IndentedBlock:
            statements = list(updated.body)
            inner = statements[start : start + count]
            leading = inner[0].leading_lines
            inner[0] = inner[0].with_changes(leading_lines=[])
            template = parse_template_statement(AUTOCAST)
            with_statement = template.with_changes(
                body=template.body.with_changes(body=inner), leading_lines=leading
            )
            return updated.with_changes(
                body=[*statements[:start], with_statement, *statements[start + count :]]
            )

        self.replacements[block] = wrap


class Bf16Autocast(Optimization):
    """The forward pass and loss of a hand-written loop under bf16 autocast, where the GPU computes bf16."""

    id = "bf16_autocast"
    title = "bf16 autocast for the forward pass and loss"
    tier = 1
    expected = "~2x tokens/s on an fp32 loop (example GPT on an H100: x1.98, losses within 0.005)"
    summary = (
        "with torch.autocast('cuda', dtype=torch.bfloat16, enabled=<bf16 tensor cores>) around forward+loss"
    )
    scope = "train"
    numerics = Numerics.ROUNDING
    numerics_reason = "forward and loss matmuls in bf16; weights, gradients and optimizer stay float32"
    measured_on = (ProgramShape.LOOP,)
    keywords = (
        "bf16 autocast",
        "bfloat16 autocast",
        "autocast",
        "mixed precision",
    )
    codemods = (_Autocast,)
    needs = (BACKWARD, *FRAMEWORK_WORDS)

    def config_sites(self, ctx: RepoContext) -> list[Site]:
        """Each ``dtype: bf16`` line of a program whose component configs all build it in bf16: already done."""
        return [
            Site(
                s.path,
                s.line,
                self.id,
                f"dtype: {s.text}: the program builds its model in bf16",
                False,
                already=True,
            )
            for s in configured_bf16(ctx)
        ]

    examples = (
        Example(
            "forward_returns_loss",
            before="""\
import torch


def train(model, loader, optimizer, device):
    model.train()
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        logits, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
""",
            after="""\
import torch
from _perfbot_precision import bf16_supported


def train(model, loader, optimizer, device):
    model.train()
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=bf16_supported()):
            logits, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
""",
        ),
        Example(
            "loss_kept_on_the_trainer",
            before="""\
import torch


class Trainer:
    def run(self, model, loader, optimizer):
        for x, y in loader:
            logits, self.loss = model(x, y)
            model.zero_grad(set_to_none=True)
            self.loss.backward()
            optimizer.step()
""",
            after="""\
import torch
from _perfbot_precision import bf16_supported


class Trainer:
    def run(self, model, loader, optimizer):
        for x, y in loader:
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=bf16_supported()):
                logits, self.loss = model(x, y)
            model.zero_grad(set_to_none=True)
            self.loss.backward()
            optimizer.step()
""",
        ),
        Example(
            "forward_then_loss_with_accumulation",
            before="""\
import torch.nn.functional as F


def train(model, batches, optimizer, accumulation):
    for step, batch in enumerate(batches):
        inputs = batch["input_ids"].cuda()
        # next-token prediction
        logits = model(inputs[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), inputs[:, 1:].flatten())
        loss = loss / accumulation
        loss.backward()
        if (step + 1) % accumulation == 0:
            optimizer.step()
            optimizer.zero_grad()
""",
            after="""\
import torch.nn.functional as F
import torch
from _perfbot_precision import bf16_supported


def train(model, batches, optimizer, accumulation):
    for step, batch in enumerate(batches):
        inputs = batch["input_ids"].cuda()
        # next-token prediction
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=bf16_supported()):
            logits = model(inputs[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), inputs[:, 1:].flatten())
            loss = loss / accumulation
        loss.backward()
        if (step + 1) % accumulation == 0:
            optimizer.step()
            optimizer.zero_grad()
""",
        ),
        Example(
            "already_bf16",
            before="""\
import torch


def train(model, loader, optimizer):
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y)
        loss.backward()
        optimizer.step()
""",
        ),
        Example(
            "a_tensor_cast_is_not_a_model_in_bf16",
            before="""\
import torch


def orthogonalize(G):
    X = G.bfloat16()
    return X / (X.norm() + 1e-7)


def train(model, loader, optimizer):
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        optimizer.step()
""",
            after="""\
import torch
from _perfbot_precision import bf16_supported


def orthogonalize(G):
    X = G.bfloat16()
    return X / (X.norm() + 1e-7)


def train(model, loader, optimizer):
    for x, y in loader:
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=bf16_supported()):
            loss = model(x, y)
        loss.backward()
        optimizer.step()
""",
        ),
        Example(
            "refuses_a_loop_run_with_fsdp_mixed_precision",
            before="""\
def train(model, loader, optimizer):
    for batch in loader:
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
""",
            files={
                "policies.py": """\
import torch
from torch.distributed.fsdp import MixedPrecision

bf16_policy = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
""",
                "main.py": """\
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from policies import bf16_policy
from train import train

if __name__ == "__main__":
    model = FSDP(build_model(), mixed_precision=bf16_policy)
    train(model, loader(), optimizer(model))
""",
            },
            refusal="FSDP mixed precision is set up at policies.py:4",
        ),
        Example(
            "an_fsdp_policy_of_another_program_is_not_this_loops",
            before="""\
import torch


def train(model, loader, optimizer):
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    train(build(), batches(), make_optimizer())
""",
            after="""\
import torch
from _perfbot_precision import bf16_supported


def train(model, loader, optimizer):
    for x, y in loader:
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=bf16_supported()):
            loss = model(x, y)
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    train(build(), batches(), make_optimizer())
""",
            files={
                "sharded/main.py": """\
import torch
from torch.distributed.fsdp import MixedPrecision

if __name__ == "__main__":
    policy = MixedPrecision(param_dtype=torch.bfloat16)
""",
            },
        ),
        Example(
            "refuses_a_model_that_casts_itself_to_its_compute_dtype",
            before="""\
import torch

from mini.gpt import GPT

model = GPT()
optimizer = torch.optim.AdamW(model.parameters())
for x, y in batches():
    loss = model(x, y)
    loss.backward()
    optimizer.step()
""",
            files={
                "mini/__init__.py": "",
                "mini/common.py": """\
import torch

COMPUTE_DTYPE = torch.bfloat16 if torch.cuda.is_available() else torch.float32
""",
                "mini/gpt.py": """\
import torch
from torch import nn

from mini.common import COMPUTE_DTYPE


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(512, 64)
        self.wte.to(dtype=COMPUTE_DTYPE)
""",
            },
            refusal="the model casts itself to its compute dtype by hand at mini/gpt.py:11",
        ),
        Example(
            "refuses_the_reference_of_a_precision_comparison",
            before="""\
from accelerate import Accelerator


def train_baseline(model, data):
    accelerator = Accelerator()
    return run(accelerator, model, data)


def train_fp8(model, data):
    accelerator = Accelerator(mixed_precision="fp8")
    return run(accelerator, model, data)
""",
            refusal='the file builds another one with `mixed_precision="fp8"` at line 10',
        ),
        Example(
            "a_bf16_sibling_is_no_comparison",
            before="""\
from accelerate import Accelerator


def evaluate(model, data):
    accelerator = Accelerator()
    return run(accelerator, model, data)


def train(model, data):
    accelerator = Accelerator(mixed_precision="bf16")
    return run(accelerator, model, data)
""",
            after="""\
from accelerate import Accelerator
from _perfbot_precision import bf16_unless_launched_otherwise


def evaluate(model, data):
    accelerator = Accelerator(mixed_precision=bf16_unless_launched_otherwise())
    return run(accelerator, model, data)


def train(model, data):
    accelerator = Accelerator(mixed_precision="bf16")
    return run(accelerator, model, data)
""",
        ),
        Example(
            "refuses_a_default_for_callers_that_pass_none",
            before="""\
from accelerate import Accelerator


def get_training_utilities(model_name, accelerator=None):
    if accelerator is None:
        accelerator = Accelerator()
    return accelerator, load(model_name)
""",
            refusal="it is built only when the caller passes none",
        ),
        Example(
            "a_tensor_cast_in_a_library_layer_is_no_model_precision",
            before="""\
import torch

from tuners.layer import Adapter

model = Adapter()
optimizer = torch.optim.AdamW(model.parameters())
for x, y in batches():
    loss = model(x, y)
    loss.backward()
    optimizer.step()
""",
            after="""\
import torch

from tuners.layer import Adapter
from tuners._perfbot_precision import bf16_supported

model = Adapter()
optimizer = torch.optim.AdamW(model.parameters())
for x, y in batches():
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=bf16_supported()):
        loss = model(x, y)
    loss.backward()
    optimizer.step()
""",
            files={
                "tuners/__init__.py": "",
                "tuners/layer.py": """\
from torch import nn


class Adapter(nn.Module):
    def merge(self, base_layer, delta, orig_dtype):
        base_layer.bias.data.add_(delta).to(orig_dtype)
        self.base.weight.to(dtype=orig_dtype)
""",
            },
        ),
        Example(
            "already_bf16_weights_cast_by_hand",
            before="""\
import torch
from torch import nn

from model import GPT

model = GPT().cuda()
for m in model.modules():
    if isinstance(m, nn.Embedding):
        m.weight.data = m.weight.data.bfloat16()
model = torch.compile(model)
optimizer = torch.optim.AdamW(model.parameters())
for x, y in batches():
    loss = model(x, y)
    loss.backward()
    optimizer.step()
""",
        ),
        Example(
            "already_bf16_layers_built_in_bf16",
            before="""\
import torch
from torch import nn


class GPT(nn.Module):
    def __init__(self, vocab_size, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim).bfloat16()
        self.proj = nn.Linear(dim, vocab_size)


def train(model, loader, optimizer):
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        optimizer.step()
""",
        ),
        Example(
            "already_bf16_model_cast_in_place",
            before="""\
import torch


def train(model, loader, optimizer):
    model.to(torch.bfloat16)
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        optimizer.step()
""",
        ),
        Example(
            "already_bf16_model_loaded_in_bf16",
            before="""\
import torch
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=torch.bfloat16).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
for batch in loader:
    loss = model(**batch).loss
    loss.backward()
    optimizer.step()
""",
        ),
        Example(
            "already_bf16_through_a_name",
            before="""\
import contextlib
import torch

dtype = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
cast = {"bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = torch.autocast("cuda", dtype=cast) if torch.cuda.is_available() else contextlib.nullcontext()
scaler = torch.cuda.amp.GradScaler(enabled=dtype == "float16")


def train(model, loader, optimizer):
    for x, y in loader:
        with ctx:
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
""",
        ),
        Example(
            "already_bf16_where_a_helper_picks_it",
            before="""\
from typing import Optional

import lightning as L

from precision import default_precision


def setup(precision: Optional[str] = None) -> None:
    precision = precision or default_precision(training=True)
    fabric = L.Fabric(devices=1, precision=precision)
    fabric.launch()
""",
            files={
                "precision.py": """\
import torch


def default_precision(training: bool) -> str:
    if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bf16-mixed" if training else "bf16-true"
    return "32-true"
""",
            },
        ),
        Example(
            "precision_a_helper_reads_from_the_environment",
            before="""\
import lightning as L

from precision import default_precision


def setup() -> None:
    fabric = L.Fabric(devices=1, precision=default_precision())
    fabric.launch()
""",
            files={
                "precision.py": """\
import os


def default_precision() -> str:
    return "bf16-mixed" if os.environ.get("BF16") else "32-true"
""",
            },
            refusal="comes from the run's arguments",
        ),
        Example(
            "already_bf16_by_the_parameters_default",
            before="""\
import lightning as L


def setup(devices: int = 8, precision: str = "bf16-true") -> None:
    fabric = L.Fabric(devices=devices, precision=precision)
    fabric.launch()
""",
        ),
        Example(
            "precision_a_parameter_reassigns",
            before="""\
import lightning as L


def setup(precision: str = "bf16-true", quantize: bool = False) -> None:
    if quantize:
        precision = "32-true"
    fabric = L.Fabric(devices=1, precision=precision)
    fabric.launch()
""",
            refusal="comes from the run's arguments",
        ),
        Example(
            "precision_a_helper_picks_without_bf16",
            before="""\
import lightning as L

from precision import fallback_precision


def setup() -> None:
    fabric = L.Fabric(devices=1, precision=fallback_precision())
    fabric.launch()
""",
            files={
                "precision.py": """\
import torch


def fallback_precision() -> str:
    return "32-true" if torch.cuda.is_bf16_supported() else "16-mixed"
""",
            },
            refusal="comes from the run's arguments",
        ),
        Example(
            "accelerator_built_only_to_read_the_process_index",
            before="""\
import os

from accelerate import Accelerator
from transformers import AutoModelForCausalLM


def load(path):
    device_map = "auto"
    if int(os.environ.get("WORLD_SIZE", "0")) > 1:
        device_map = {"": Accelerator().process_index}
    return AutoModelForCausalLM.from_pretrained(path, device_map=device_map)
""",
            refusal="thrown away (only `Accelerator().process_index` is read from it)",
        ),
        Example(
            "accelerator_with_a_deepspeed_plugin",
            before="""\
from accelerate import Accelerator
from accelerate.utils import DeepSpeedPlugin


class Engine:
    def __init__(self, config_file, steps):
        plugin = DeepSpeedPlugin(hf_ds_config=config_file)
        self.accelerator = Accelerator(deepspeed_plugin=plugin, gradient_accumulation_steps=steps)

    def fit(self, model, optimizer, loader):
        model, optimizer, loader = self.accelerator.prepare(model, optimizer, loader)
        for batch in loader:
            self.accelerator.backward(model(**batch).loss)
            optimizer.step()
""",
            refusal="its DeepSpeed plugin (`plugin`) takes the precision from the DeepSpeed config",
        ),
        Example(
            "accelerator_built_only_to_set_up_shared_state",
            before="""\
from accelerate import Accelerator
from accelerate.state import AcceleratorState


def device_mesh():
    Accelerator()
    return AcceleratorState().device_mesh


def train(model, loader, optimizer, accelerator):
    mesh = device_mesh()
    for x, y in loader:
        loss = model(x, y, mesh)
        accelerator.backward(loss)
        optimizer.step()
""",
            refusal="the `Accelerator(...)` built here is thrown away",
        ),
        Example(
            "accelerate_mixed_precision",
            before="""\
from accelerate import Accelerator


def train(model, loader, optimizer):
    accelerator = Accelerator()
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        loss = model(x, y)
        accelerator.backward(loss)
        optimizer.step()
""",
            after="""\
from accelerate import Accelerator
from _perfbot_precision import bf16_unless_launched_otherwise


def train(model, loader, optimizer):
    accelerator = Accelerator(mixed_precision=bf16_unless_launched_otherwise())
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        loss = model(x, y)
        accelerator.backward(loss)
        optimizer.step()
""",
        ),
        Example(
            "refuses_grad_scaler",
            before="""\
import torch


def train(model, loader, optimizer):
    scaler = torch.cuda.amp.GradScaler()
    for x, y in loader:
        loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
            refusal="GradScaler",
        ),
        Example(
            "refuses_float16_autocast",
            before="""\
import torch


def train(model, loader, optimizer):
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
        loss.backward()
        optimizer.step()
""",
            refusal="already autocasts",
        ),
    )
