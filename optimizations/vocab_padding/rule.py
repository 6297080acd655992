"""Vocabulary padding: a from-scratch model's ``vocab_size`` rounded up to a multiple of 64 (50257 → 50304).

The embedding and output matmuls then have a size tensor cores tile evenly. Padded where the size is an
integer literal that a config class of the repository holds: a class field (``vocab_size: int = 50257``),
an ``__init__`` default, or ``vocab_size=50257`` passed to such a class.

Why it is harmless, and when it is not: the extra ids never occur in the data (a tokenizer of the original
size makes it), so their embedding rows are never looked up; their output logits enter the softmax's
normaliser, which costs ``(padded - vocab) / padded`` of the probability mass at initialisation (0.09% for
GPT-2, about +0.001 in the loss) and which training drives down, since they are never a target. That holds
only if the size reaches nothing but the embedding and output layers, so every read of ``.vocab_size`` in
the files that share code with the site's file (:meth:`Program.shares_code`: nanoGPT's ``sample.py`` shares
``model.py`` with ``train.py``; a standalone script kept for the record shares nothing) must be an argument of
``nn.Embedding``/``nn.Linear`` or of a ``.view``/``.reshape``; any other read (sizing the data, a tokenizer, an
``assert`` against one) is refused, as is such a file that samples from the logits (``generate``: a padded id
could come out), a tokenizer built with the literal, and a Hugging Face config
(``model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64)`` does this there). A config class that
pads the vocabulary itself (a field or attribute such as Lightning-AI/litgpt's ``padded_vocab_size``, or the
size passed through a rounding helper) is already done, and so are the calls to such a class.

Measured (``experiments/from_scratch_gpt``): the mean loss over steps 160-300 of the example GPT moved by
-0.007 to +0.005 across three seeds, within seed noise; tier 2 because the loss is not the same number.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from optimizations.edits.planned import PlannedCodemod
from optimizations.program.positions import start_line
from optimizations.program.reachability import program_of
from optimizations.program.repository import RepoContext, SourceCache
from optimizations.program.shapes import ProgramShape
from optimizations.program.syntax import code_of, keyword, qualified_under, walk
from optimizations.registry import Example, Numerics, Optimization

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
            if any(p.name.value == FIELD for p in statement.params.params + statement.params.kwonly_params):
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


def _int_literal(node: cst.BaseExpression | None) -> int | None:
    return int(node.evaluated_value) if isinstance(node, cst.Integer) else None


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
                calls = [c for c in m.findall(function, m.Call()) if _callee(c) in SAMPLERS]
                if calls:
                    where = f"{path}:{start_line(parsed, calls[0])}"
                    self.problems.append(
                        (path, f"{name}() samples from the logits at {where}: a padded id could come out")
                    )

    def _sizes_a_layer(self, node: cst.Attribute, parents) -> bool:
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


class _Pad(PlannedCodemod):
    def plan(self, module: cst.Module) -> None:
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
                        owner, f"vocab_size {_int_literal(literal)}, padded by the class itself: `{pads}`"
                    )
                elif _int_literal(literal) % MULTIPLE == 0:
                    if not tokenizer:
                        padded_already.append((owner, literal))
                elif tokenizer:
                    refusals.append((owner, literal, f"{cls.name.value} is a tokenizer class"))
                else:
                    candidates.append((owner, literal))
        for call in self.nodes(cst.Call):
            given = keyword(call, FIELD)
            size = _int_literal(given.value) if given is not None else None
            if size is None:
                continue
            names = self.names(call.func)
            callee = _callee(call)
            pads = self._padded_by(callee)
            if pads is not None:
                self.already(given, f"vocab_size {size}, padded by {callee} itself: `{pads}`")
            elif size % MULTIPLE == 0:
                if callee in self._repository().config_classes:
                    padded_already.append((given, given.value))
            elif qualified_under(names, ("transformers",), (callee,)):
                refusals.append(
                    (
                        call,
                        given.value,
                        "a Hugging Face config: use model.resize_token_embeddings("
                        "len(tokenizer), pad_to_multiple_of=64) there",
                    )
                )
            elif qualified_under(names, TOKENIZER_PACKAGES, (callee,)) or any(
                w in callee.lower() for w in TOKENIZER_WORDS
            ):
                refusals.append(
                    (call, given.value, f"`{callee}(...)` builds a tokenizer with this vocabulary")
                )
            elif callee in self._repository().config_classes:
                candidates.append((given, given.value))
        for owner, literal in padded_already:
            self.already(owner, f"vocab_size {_int_literal(literal)} (a multiple of {MULTIPLE})")
        message = "vocab_size {} → {} (a multiple of 64; the extra ids never occur in the data)"
        for owner, literal, reason in refusals:
            size = _int_literal(literal)
            self.refused(owner, message.format(size, padded(size)), reason)
        if not candidates:
            return
        program = program_of(self.repo)
        problems = [
            problem for path, problem in self._repository().problems if program.shares_code(self.path, path)
        ]
        for owner, literal in candidates:
            size = _int_literal(literal)
            if problems:
                self.refused(owner, message.format(size, padded(size)), "; ".join(problems))
                continue
            self.replacements[literal] = lambda updated, size=size: updated.with_changes(
                value=str(padded(size))
            )
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

    def _class_literals(self, cls: cst.ClassDef):
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
                    if _int_literal(value) is not None:
                        yield statement, value
            elif isinstance(statement, cst.FunctionDef) and statement.name.value == "__init__":
                for param in statement.params.params + statement.params.kwonly_params:
                    if param.name.value == FIELD and _int_literal(param.default) is not None:
                        yield param, param.default


class VocabPadding(Optimization):
    """A from-scratch model's vocabulary size rounded up to a multiple of 64 for tensor-core-friendly matmuls."""

    id = "vocab_padding"
    title = "vocabulary size padded to a multiple of 64"
    tier = 2
    expected = "+5% tokens/s compiled, +40% uncompiled (example GPT, H100); loss unchanged within seed noise"
    summary = "vocab_size=50257 → 50304 where the size only shapes the embedding and output layers"
    scope = "model"
    numerics = Numerics.DYNAMICS
    numerics_reason = "logits of ids that never occur enter the softmax: the loss is not the same number"
    measured_on = (ProgramShape.LOOP,)
    keywords = (
        "pad the vocabulary",
        "vocabulary padding",
        "vocab padding",
        "pad vocab",
        "vocab_size",
        "50304",
    )
    codemods = (_Pad,)
    needs = (FIELD,)

    examples = (
        Example(
            "already_padded_by_the_config_itself",
            path="model.py",
            before="""\
from dataclasses import dataclass
from typing import Optional

import torch.nn as nn


@dataclass
class Config:
    vocab_size: int = 50254
    padding_multiple: int = 512
    padded_vocab_size: Optional[int] = None
    n_embd: int = 768

    def __post_init__(self):
        if self.padded_vocab_size is None:
            self.padded_vocab_size = -(-self.vocab_size // self.padding_multiple) * self.padding_multiple


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wte = nn.Embedding(config.padded_vocab_size, config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.padded_vocab_size, bias=False)
""",
        ),
        Example(
            "config_field",
            path="model.py",
            before="""\
from dataclasses import dataclass

import torch.nn as nn


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50257  # GPT-2 BPE
    n_embd: int = 768


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
""",
            after="""\
from dataclasses import dataclass

import torch.nn as nn


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304  # GPT-2 BPE
    n_embd: int = 768


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
""",
        ),
        Example(
            "config_built_in_another_file",
            before="""\
from model import GPTConfig

SIZES = {"small": GPTConfig(n_layer=12, vocab_size=50257), "tiny": GPTConfig(n_layer=2, vocab_size=512)}
""",
            after="""\
from model import GPTConfig

SIZES = {"small": GPTConfig(n_layer=12, vocab_size=50304), "tiny": GPTConfig(n_layer=2, vocab_size=512)}
""",
            files={
                "model.py": """\
from dataclasses import dataclass

import torch.nn as nn


@dataclass
class GPTConfig:
    n_layer: int = 12
    vocab_size: int = 50304


def head(config, width):
    return nn.Linear(width, config.vocab_size)
"""
            },
        ),
        Example(
            "a_read_in_a_script_that_shares_nothing_is_not_a_problem",
            before="""\
from dataclasses import dataclass

import torch.nn as nn


@dataclass
class GPTConfig:
    vocab_size: int = 50257


def head(config, width):
    return nn.Linear(width, config.vocab_size)
""",
            after="""\
from dataclasses import dataclass

import torch.nn as nn


@dataclass
class GPTConfig:
    vocab_size: int = 50304


def head(config, width):
    return nn.Linear(width, config.vocab_size)
""",
            files={
                "records/old_train.py": """\
from dataclasses import dataclass


@dataclass
class OldConfig:
    vocab_size: int = 50257


def check(config, tokenizer):
    assert config.vocab_size == tokenizer.n_vocab
"""
            },
        ),
        Example(
            "already_padded_by_the_model_class",
            before="""\
import torch.nn as nn


def next_multiple_of_n(v, *, n):
    return next(x for x in range(n, int(v) + 1 + n, n) if x >= v)


class GPT(nn.Module):
    def __init__(self, vocab_size: int, model_dim: int):
        super().__init__()
        vocab_size = next_multiple_of_n(vocab_size, n=128)
        self.embed = nn.Embedding(vocab_size, model_dim)


model = GPT(vocab_size=50257, model_dim=768)
""",
        ),
        Example(
            "a_namesake_class_that_pads_in_an_unrelated_script_is_another_class",
            before="""\
import torch.nn as nn


class GPT(nn.Module):
    def __init__(self, vocab_size: int, model_dim: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, model_dim)


model = GPT(vocab_size=50257, model_dim=768)
""",
            after="""\
import torch.nn as nn


class GPT(nn.Module):
    def __init__(self, vocab_size: int, model_dim: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, model_dim)


model = GPT(vocab_size=50304, model_dim=768)
""",
            files={
                "records/newer_train.py": """\
import torch.nn as nn


class GPT(nn.Module):
    def __init__(self, vocab_size: int, model_dim: int):
        super().__init__()
        self.embed = nn.Embedding(round_up(vocab_size, 128), model_dim)
"""
            },
        ),
        Example(
            "already_a_multiple_of_64",
            before="""\
class Config:
    vocab_size = 32000
""",
        ),
        Example(
            "refuses_size_checked_against_tokenizer",
            before="""\
from dataclasses import dataclass

import tiktoken


@dataclass
class Config:
    vocab_size: int = 50257


def check(config):
    assert config.vocab_size == tiktoken.get_encoding("gpt2").n_vocab
""",
            refusal="`config.vocab_size` is read at train.py:12",
        ),
        Example(
            "refuses_hugging_face_config",
            before="""\
from transformers import GPT2Config

config = GPT2Config(vocab_size=50257, n_layer=12)
""",
            refusal="resize_token_embeddings",
        ),
    )
