"""The codemod: each ``vocab_size`` integer literal a config class of the repository holds (a field, an ``__init__``
default, a keyword of a call of the class) is rounded up, unless the size reaches more than the layers."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import libcst as cst
import libcst.matchers as m

from optimizations.program.positions import start_line
from optimizations.program.reachability import program_of
from optimizations.program.repository import RepoContext, SourceCache
from optimizations.program.syntax import code_of, keyword, qualified_under, walk

from .edit_resize import PadResizedEmbeddings

FIELD = "vocab_size"
MULTIPLE = 64
LAYERS = ("Embedding", "Linear")
SHAPES = ("view", "reshape")
SAMPLERS = ("multinomial", "argmax", "topk")
# Words in the name of a helper that rounds a size up.
ROUNDING_WORDS = ("multiple", "pad", "round", "align")
TOKENIZER_PACKAGES = ("tokenizers", "sentencepiece", "tiktoken")
TOKENIZER_WORDS = ("token", "bpe", "wordpiece", "unigram", "sentencepiece")


def padded(size: int) -> int:
    """``size`` rounded up to a multiple of :data:`MULTIPLE`."""
    return -(-size // MULTIPLE) * MULTIPLE


def _holds_field(cls: cst.ClassDef) -> bool:
    """The class has a ``vocab_size`` field or ``__init__`` parameter."""
    for statement in cls.body.body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                targets = [small.target] if isinstance(small, cst.AnnAssign) else []
                if isinstance(small, cst.Assign):
                    targets = [t.target for t in small.targets]
                if any(m.matches(t, m.Name(FIELD)) for t in targets):
                    return True
        elif isinstance(statement, cst.FunctionDef) and statement.name.value == "__init__":
            if any(
                p.name.value == FIELD for p in [*statement.params.params, *statement.params.kwonly_params]
            ):
                return True
    return False


def _padding_attribute(cls: cst.ClassDef) -> str | None:
    """How the class pads the vocabulary itself: a field or ``self.`` attribute named with both "vocab" and
    "pad" (Lightning-AI/litgpt's ``padded_vocab_size``, computed from ``vocab_size`` and ``padding_multiple``),
    or the size passed through a rounding helper (KellerJordan/modded-nanogpt's ``vocab_size =
    next_multiple_of_n(vocab_size, n=128)``: a callee named for a multiple, padding, rounding or alignment)."""
    for node in walk(cls, stop=()):
        target = node.target if isinstance(node, (cst.AnnAssign, cst.AssignTarget)) else None
        if isinstance(target, cst.Attribute):
            target = target.attr
        if isinstance(target, cst.Name) and "vocab" in target.value and "pad" in target.value:
            return target.value
        if isinstance(node, cst.Call) and any(word in _callee(node).lower() for word in ROUNDING_WORDS):
            if any(_reads_field(arg.value) for arg in node.args):
                return code_of(node)
    return None


def _reads_field(node: cst.BaseExpression) -> bool:
    """``vocab_size`` or ``<anything>.vocab_size``."""
    return m.matches(node, m.Name(FIELD) | m.Attribute(attr=m.Name(FIELD)))


def _with_value(value: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """A planned replacement: the updated literal with ``value``."""
    return lambda updated: updated.with_changes(value=value)


class _Repository:
    """What the rest of the repository does with ``vocab_size``: config classes that hold it, reads that go
    beyond sizing layers, and sampling from logits."""

    def __init__(self, repo: RepoContext):
        self.config_classes: set[str] = set()
        self.padding_classes: dict[str, list[tuple[str, str]]] = {}  # class name: (file, how it pads), each
        self.problems: list[tuple[str, str]] = []  # (file, what it does)
        for path in RepoContext(repo.root).python_files():
            text = repo.read(path)
            if FIELD in text or any(s in text for s in SAMPLERS):
                self._scan(path, text, repo.sources)

    def _scan(self, path: str, text: str, sources: SourceCache) -> None:
        """One file's config classes, reads of the field and samplers, from the run's shared parse of it."""
        parsed = sources.parse(path, text)
        parents = parsed.parents()
        for cls in parsed.nodes(cst.ClassDef):
            if _holds_field(cls):
                self.config_classes.add(cls.name.value)
                pads = _padding_attribute(cls)
                if pads is not None:
                    self.padding_classes.setdefault(cls.name.value, []).append((path, pads))
        for node in parsed.nodes(cst.Attribute):
            if node.attr.value == FIELD and not self._sizes_a_layer(node, parents):
                where = f"{path}:{start_line(parsed, node)}"
                self.problems.append((path, f"`{code_of(node)}` is read at {where} beyond sizing the layers"))
        for function in parsed.nodes(cst.FunctionDef):
            name = function.name.value
            if name.startswith(("generate", "sample")):
                found = m.findall(function, m.Call())
                calls = [c for c in found if isinstance(c, cst.Call) and _callee(c) in SAMPLERS]
                if calls:
                    where = f"{path}:{start_line(parsed, calls[0])}"
                    self.problems.append(
                        (path, f"{name}() samples from the logits at {where}: a padded id could come out")
                    )

    def _sizes_a_layer(self, node: cst.Attribute, parents: dict[cst.CSTNode, cst.CSTNode]) -> bool:
        """A write (``self.vocab_size = ...``), or an argument of ``nn.Embedding``/``nn.Linear``/``.view``."""
        up = parents[node]
        if isinstance(up, cst.AssignTarget):
            return True
        while isinstance(up, (cst.Arg, cst.UnaryOperation, cst.BinaryOperation)):
            if isinstance(up, cst.Arg):
                call = parents[up]
                return isinstance(call, cst.Call) and (
                    _callee(call) in LAYERS
                    or isinstance(call.func, cst.Attribute)
                    and call.func.attr.value in SHAPES
                )
            up = parents[up]
        return False


def _callee(call: cst.Call) -> str:
    func = call.func
    return (
        func.attr.value
        if isinstance(func, cst.Attribute)
        else func.value
        if isinstance(func, cst.Name)
        else ""
    )


class PadVocabulary(PadResizedEmbeddings):
    """``vocab_size`` literals of the repository's config classes → the next multiple of 64; a Hugging Face
    model's ``resize_token_embeddings`` padded to it (:class:`PadResizedEmbeddings`)."""

    def plan(self, module: cst.Module) -> None:
        self.plan_resizes()
        self.repository: _Repository | None = None
        candidates: list[tuple[cst.CSTNode, cst.Integer]] = []
        refusals: list[tuple[cst.CSTNode, cst.Integer, str]] = []
        padded_already: list[tuple[cst.CSTNode, cst.Integer]] = []
        for cls in self.nodes(cst.ClassDef):
            tokenizer = "token" in cls.name.value.lower()
            pads = None if tokenizer else _padding_attribute(cls)
            for owner, literal in self._class_literals(cls):
                if pads is not None:
                    self.already(
                        owner, f"vocab_size {literal.evaluated_value}, padded by the class itself: `{pads}`"
                    )
                elif literal.evaluated_value % MULTIPLE == 0:
                    if not tokenizer:
                        padded_already.append((owner, literal))
                elif tokenizer:
                    refusals.append((owner, literal, f"{cls.name.value} is a tokenizer class"))
                else:
                    candidates.append((owner, literal))
        for call in self.nodes(cst.Call):
            given = keyword(call, FIELD)
            if given is None or not isinstance(given.value, cst.Integer):
                continue
            literal = given.value
            size = literal.evaluated_value
            names = self.names(call.func)
            callee = _callee(call)
            pads = self._padded_by(callee)
            if pads is not None:
                self.already(given, f"vocab_size {size}, padded by {callee} itself: `{pads}`")
            elif size % MULTIPLE == 0:
                if callee in self._repository().config_classes:
                    padded_already.append((given, literal))
            elif qualified_under(names, ("transformers",), (callee,)):
                refusals.append(
                    (
                        call,
                        literal,
                        "a Hugging Face config: use model.resize_token_embeddings("
                        "len(tokenizer), pad_to_multiple_of=64) there",
                    )
                )
            elif qualified_under(names, TOKENIZER_PACKAGES, (callee,)) or any(
                w in callee.lower() for w in TOKENIZER_WORDS
            ):
                refusals.append((call, literal, f"`{callee}(...)` builds a tokenizer with this vocabulary"))
            elif callee in self._repository().config_classes:
                candidates.append((given, literal))
        for owner, literal in padded_already:
            self.already(owner, f"vocab_size {literal.evaluated_value} (a multiple of {MULTIPLE})")
        message = "vocab_size {} → {} (a multiple of 64; the extra ids never occur in the data)"
        for owner, literal, reason in refusals:
            size = literal.evaluated_value
            self.refused(owner, message.format(size, padded(size)), reason)
        if not candidates:
            return
        program = program_of(self.repo)
        problems = [
            problem for path, problem in self._repository().problems if program.shares_code(self.path, path)
        ]
        for owner, literal in candidates:
            size = literal.evaluated_value
            if problems:
                self.refused(owner, message.format(size, padded(size)), "; ".join(problems))
                continue
            self.replacements[literal] = _with_value(str(padded(size)))
            self.changed(owner, message.format(size, padded(size)))

    def _padded_by(self, callee: str) -> str | None:
        """How the class ``callee`` names pads the vocabulary itself, where a file sharing code with this one
        defines it so; None elsewhere."""
        program = program_of(self.repo)
        for path, pads in self._repository().padding_classes.get(callee, []):
            if program.shares_code(self.path, path):
                return pads
        return None

    def _repository(self) -> _Repository:
        if self.repository is None:
            self.repository = _Repository(self.repo)
        return self.repository

    def _class_literals(self, cls: cst.ClassDef) -> Iterator[tuple[cst.CSTNode, cst.Integer]]:
        """``(node, literal)`` for each integer ``vocab_size`` literal the class sets: fields and ``__init__``
        defaults."""
        for statement in cls.body.body:
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, cst.AnnAssign) and m.matches(small.target, m.Name(FIELD)):
                        value = small.value
                    elif isinstance(small, cst.Assign) and any(
                        m.matches(t.target, m.Name(FIELD)) for t in small.targets
                    ):
                        value = small.value
                    else:
                        continue
                    if isinstance(value, cst.Integer):
                        yield statement, value
            elif isinstance(statement, cst.FunctionDef) and statement.name.value == "__init__":
                for param in [*statement.params.params, *statement.params.kwonly_params]:
                    if param.name.value == FIELD and isinstance(param.default, cst.Integer):
                        yield param, param.default
