"""Deliberate choices: what shows that the program set something on purpose, so an optimization keeps it.

A setting counts as chosen on purpose where a comment in reach gives a reason for it (on the setting's line, or
in the comment lines right above it, naming the setting or saying why), where hand-written code's function or
class docstring says it is written out so on purpose (``explicit implementation ... to show``, ``Careful ...
this one is the exact one``), where the file builds attention masks of its own (4D or block-diagonal:
FlashAttention takes none of them), where the model family needs eager attention to train, or where attention
weights are read (only eager attention returns them). Each piece of
evidence is a :class:`Choice`: the line it is on and what it says, quoted for the plan.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass

import libcst as cst

from optimizations.program.positions import start_line
from optimizations.program.repository import ParsedFile
from optimizations.program.syntax import literal_value

# Comments that talk to tools, not to readers: never a reason.
DIRECTIVE = re.compile(r"#\s*(?:type:|noqa|pragma|fmt:|pylint:|ruff:|isort:|mypy:|pyright:|perfbot:)", re.I)
# Words that make a comment a reason, whatever it names.
REASON = re.compile(
    r"\b(?:because|since|needs?|needed|requires?|required|must|keep|avoid|instead|on purpose|intentional(?:ly)?|"
    r"deliberate(?:ly)?|do not|don't|does not|doesn't|not supported|unsupported|incompatible|breaks?|broken|"
    r"bug|workaround|nans?|oom|deterministic|reproducib\w*|so that|otherwise|hangs?|crash\w*|fails?)\b",
    re.I,
)
# A comment on a switched-off setting that recommends turning it on for speed ("True increases speed", "set to
# true for faster training"): an invitation, not a reason to keep it off. One that also gives a reason is kept.
INVITES_ON = re.compile(
    r"\btrue\b.{0,40}?\b(?:increases? (?:the )?(?:speed|throughput)|faster|speeds? (?:it |things |training )?up)\b",
    re.I,
)
# Words that make a docstring say its code is written out by hand on purpose: a reason, a warning, a teaching
# aim. A docstring that only names or cites the formula ("Implementation of ...", "Reference: <paper>") is none.
WRITTEN_OUT = re.compile(
    r"\b(?:careful(?:ly)?|exact(?:ly)?|explicit(?:ly)?|to show|for clarity|educational|on purpose|"
    r"intentional(?:ly)?|deliberate(?:ly)?)\b",
    re.I,
)
# Words that make a comment name an attention, worker or compile setting.
# A call that patches a model family's attention to FlashAttention before the model is loaded (lm-sys/FastChat's
# train_mem.py: `replace_llama_attn_with_flash_attn()`): the program's own choice of attention kernels.
FLASH_PATCH = re.compile(r"^replace_\w*attn\w*_with_flash_attn\w*$")
ATTENTION_TOPICS = ("attn", "attention", "eager", "sdpa", "flash", "fa2", "softcap", "mask")
WORKER_TOPICS = ("worker", "fork", "spawn", "multiprocess", "subprocess")
COMPILE_TOPICS = ("compile", "dynamo", "inductor")
# Reading the file's own attention masks: 4D ones transformers builds, block-diagonal ones, or a mask of four
# dimensions checked for.
CUSTOM_MASKS = (
    (re.compile(r"\b_?prepare_4d_\w*attention_mask\w*"), "builds 4D attention masks"),
    (re.compile(r"\bblock_diag\b"), "builds block-diagonal attention masks"),
    (re.compile(r"\battention_mask\w*\s*\.\s*(?:dim\(\)|ndim)\s*==\s*4"), "passes 4D attention masks"),
)
CUSTOM_MASK_COMMENT = re.compile(r"\b(?:custom|4d)\s+(?:attention\s+)?mask", re.I)
# Model families whose training transformers asks to run with eager attention: Gemma 2 soft-caps its attention
# logits, which SDPA and FlashAttention 2 before 2.6 do not, and Gemma 3 inherits it
# (Gemma2ForCausalLM.forward and Gemma3ForCausalLM.forward warn "It is strongly recommended to train Gemma2
# models with the `eager` attention implementation").
EAGER_FAMILIES = re.compile(r"gemma[-_]?[23](?![0-9])", re.I)
EAGER_FAMILY_WHY = (
    "transformers asks to train Gemma 2 and 3 with eager attention (their attention logits are soft-capped; "
    "Gemma2ForCausalLM.forward warns otherwise)"
)
# Settings that turn compilation on or off, by their keyword or assigned name.
COMPILE_SWITCHES = frozenset(
    {"compile", "torch_compile", "use_compile", "use_torch_compile", "compile_model"}
)


@dataclass(frozen=True)
class Choice:
    """Evidence of a deliberate choice: the line it is on, and what it shows, in words."""

    line: int
    evidence: str


def comments(parsed: ParsedFile) -> dict[int, str]:
    """The file's comments by line (Python's tokenizer: a ``#`` in a string is none); once per parse."""
    return parsed.derived(_comments)


def _comments(parsed: ParsedFile) -> dict[int, str]:
    found: dict[int, str] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(parsed.source).readline):
            if token.type == tokenize.COMMENT:
                found[token.start[0]] = token.string.strip()
    except (tokenize.TokenError, SyntaxError):
        pass
    return found


def _gives_reason(comment: str, topics: tuple[str, ...]) -> bool:
    if DIRECTIVE.match(comment):
        return False
    lowered = comment.lower()
    return bool(REASON.search(comment)) or any(topic in lowered for topic in topics)


def invites_turning_on(comment: str) -> bool:
    """Whether ``comment``, on a setting that is off, recommends turning it on for speed and gives no reason
    to keep it off (torchtune's ``packed: False  # True increases speed``)."""
    return bool(INVITES_ON.search(comment)) and not REASON.search(comment)


def commented(parsed: ParsedFile, line: int, topics: tuple[str, ...] = (), above: int = 2) -> Choice | None:
    """A comment giving a reason for the setting on ``line``: the one ending that line, else one of up to
    ``above`` comment lines right above it; it names the setting (one of ``topics``) or says why (``because``,
    ``needs``, ``keep``, ``breaks``...). Tool directives (``# type:``, ``# noqa``) are none."""
    found = comments(parsed)
    lines = parsed.source.splitlines()
    candidates = [line] if line in found else []
    for previous in range(line - 1, max(line - above, 1) - 1, -1):
        if previous not in found or not lines[previous - 1].lstrip().startswith("#"):
            break
        candidates.append(previous)
    for where in candidates:
        if _gives_reason(found[where], topics):
            return Choice(where, f"the comment at line {where}: `{found[where]}`")
    return None


def written_out_on_purpose(parsed: ParsedFile, *definitions: cst.FunctionDef | cst.ClassDef) -> Choice | None:
    """The first of ``definitions`` (a function, the class it is in) whose docstring says its code is written
    out by hand on purpose (:data:`WRITTEN_OUT`, or a reason word): the line of the docstring and its words."""
    for definition in definitions:
        docstring = definition.get_docstring(clean=True)
        body = definition.body.body if isinstance(definition.body, cst.IndentedBlock) else ()
        if not docstring or not body:
            continue
        said = " ".join(docstring.split())
        if WRITTEN_OUT.search(said) or REASON.search(said):
            line = start_line(parsed, body[0])
            kind = "class" if isinstance(definition, cst.ClassDef) else "function"
            return Choice(
                line, f"the docstring of {kind} `{definition.name.value}` at line {line}: `{said[:160]}`"
            )
    return None


def custom_masks(parsed: ParsedFile) -> Choice | None:
    """Where the file builds or passes attention masks of its own (4D, block-diagonal), or says it does in a
    comment: attention that FlashAttention's and a causal SDPA call's masks cannot express."""
    notes = comments(parsed)
    for number, text in enumerate(parsed.source.splitlines(), start=1):
        code = text.split("#", 1)[0] if number in notes else text
        for pattern, what in CUSTOM_MASKS:
            if pattern.search(code):
                return Choice(number, f"line {number} {what}")
        if number in notes and CUSTOM_MASK_COMMENT.search(notes[number]):
            return Choice(number, f"the comment at line {number} names a custom mask: `{notes[number]}`")
    return None


def eager_family(text: str) -> str | None:
    """Why a model named by ``text`` (a class name, a checkpoint) trains with eager attention, or ``None``."""
    return EAGER_FAMILY_WHY if EAGER_FAMILIES.search(text) else None


def attention_weights_read(parsed: ParsedFile) -> Choice | None:
    """An ``output_attentions=True`` in the file: attention weights are read, which only eager attention
    returns."""
    if "output_attentions" not in parsed.source:
        return None
    for argument in parsed.nodes(cst.Arg):
        if (
            argument.keyword is not None
            and argument.keyword.value == "output_attentions"
            and literal_value(argument.value) is True
        ):
            line = start_line(parsed, argument)
            return Choice(
                line,
                f"line {line} reads attention weights (`output_attentions=True`): only eager returns them",
            )
    return None


def compile_turned_off(parsed: ParsedFile) -> Choice | None:
    """A compile switch set to ``False`` with a comment giving a reason (:func:`commented`): a keyword
    (``torch_compile=False``), an assignment (``compile = False``, ``args.compile = False``) or a field
    (``compile: bool = False``)."""
    if "compile" not in parsed.source:
        return None
    for node in parsed.nodes(cst.Arg, cst.Assign):
        if isinstance(node, cst.Arg):
            named = node.keyword.value if node.keyword is not None else ""
            values = [(named, node.value)]
        else:
            values = [(_switch_name(target.target), node.value) for target in node.targets]
        for name, value in values:
            if name in COMPILE_SWITCHES and literal_value(value) is False:
                line = start_line(parsed, node)
                if (reason := commented(parsed, line, COMPILE_TOPICS)) is not None:
                    return Choice(line, f"`{name}` is turned off at line {line}, and {reason.evidence}")
    for field in parsed.nodes(cst.AnnAssign):
        name = _switch_name(field.target)
        if name in COMPILE_SWITCHES and field.value is not None and literal_value(field.value) is False:
            line = start_line(parsed, field)
            if (reason := commented(parsed, line, COMPILE_TOPICS)) is not None:
                return Choice(line, f"`{name}` defaults to False at line {line}, and {reason.evidence}")
    return None


def _switch_name(target: cst.BaseExpression) -> str:
    if isinstance(target, cst.Name):
        return target.value
    return target.attr.value if isinstance(target, cst.Attribute) else ""
