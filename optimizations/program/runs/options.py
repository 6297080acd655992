"""The options a hand-written training program takes from its command line, with their defaults in its code,
and the values of them a run on a CPU needs.

A program's options are its argparse options (``--max-steps``, read with dashes as underscores), or, where it
has none, the module-level globals that a configurator file it runs with ``exec`` overrides from ``--name=value``
words (nanoGPT's ``configurator.py``): those are spelled ``--name=``, passed joined to their value.
"""

from __future__ import annotations

import ast
import posixpath
from dataclasses import dataclass
from typing import Any, TypeGuard

from optimizations.program.attribute_defaults import argparse_argument
from optimizations.program.repository import RepoContext
from optimizations.program.run_calls import called_name

DEVICE_OPTIONS = ("device",)
COMPILE_OPTIONS = ("compile", "use_compile", "torch_compile")
# The options that shape the model a program builds from them, and the value each takes at the shapes a tiny Hub
# model is built at (benchmarks.architectures: hidden 64, 2 layers, 4 heads, 2 key-value heads).
TINY_SHAPES = (
    (("hidden_size", "n_embd", "n_embed", "d_model", "dim", "model_dim", "embed_dim", "emb_dim"), 64),
    (("num_hidden_layers", "n_layer", "n_layers", "num_layers", "depth"), 2),
    (("num_attention_heads", "n_head", "n_heads", "num_heads"), 4),
    (("num_key_value_heads", "n_kv_head", "n_kv_heads", "num_kv_heads"), 2),
    (("max_seq_len", "max_seq_length", "seq_len", "seq_length", "block_size", "context_length"), 64),
)


@dataclass(frozen=True)
class Option:
    """One option of a hand-written program: how the command spells it and its default in the code."""

    flag: str  # ``--max-steps``, or ``--max_iters=`` for a configurator's ``--name=value`` word
    default: Any = None  # the literal default (None where the code computes it)


def program_options(repo: RepoContext, entry: str, text: str) -> dict[str, Option]:
    """The options of the entry point ``entry`` (whose source is ``text``), by name with dashes read as
    underscores: its argparse options, else the globals its configurator overrides."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    options: dict[str, Option] = {}
    for node in ast.walk(tree):
        argument = argparse_argument(node) if isinstance(node, ast.Call) else None
        if argument is None:
            continue
        default = _literal(argument.keywords.get("default"))
        for flag in (n for n in argument.names if n.startswith("--")):
            options[flag[2:].replace("-", "_")] = Option(flag, default)
    if options or not _execs_a_configurator(repo, entry, tree):
        return options
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target = statement.targets[0]
            if isinstance(target, ast.Name) and not target.id.startswith("_"):
                options[target.id] = Option(f"--{target.id}=", _literal(statement.value))
    return options


def cpu_settings(options: dict[str, Option]) -> list[tuple[str, str, str]]:
    """``(flag, value, why)`` for each option a CPU run needs set: the device where the code defaults to CUDA,
    the compile switch off where the code turns it on, and the width, depth, heads and sequence length of the
    model the program builds from its options at a tiny model's shape (a wider default takes minutes a step on
    a CPU); the batch stays the program's."""
    found = []
    for name in DEVICE_OPTIONS:
        default = options[name].default if name in options else None
        if isinstance(default, str) and default.startswith("cuda"):
            found.append((options[name].flag, "cpu", f"the program defaults to {default!r}"))
    for name in COMPILE_OPTIONS:
        option = options.get(name)
        default = option.default if option is not None else None
        # a boolean is turned off only through a configurator, which reads `False` as a literal (argparse's
        # `type=bool` would read any word as true)
        switch = default is True and option is not None and option.flag.endswith("=")
        if option is not None and (switch or (_integer(default) and default > 0)):
            off = "False" if isinstance(default, bool) else "0"
            found.append((option.flag, off, "compiling there takes longer than the steps measured"))
    for names, tiny in TINY_SHAPES:
        for name in names:
            default = options[name].default if name in options else None
            if _integer(default) and default > tiny:
                why = f"the model the program builds from its options, at a tiny model's shape (default {default})"
                found.append((options[name].flag, str(tiny), why))
    return found


def _integer(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _execs_a_configurator(repo: RepoContext, entry: str, tree: ast.Module) -> bool:
    """The entry point runs, at module level, ``exec(open(PATH).read())`` of a repository file that reads
    ``sys.argv``: a configurator that sets the entry's globals from the command line."""
    for statement in tree.body:
        call = statement.value if isinstance(statement, ast.Expr) else None
        if not (isinstance(call, ast.Call) and called_name(call) == "exec" and call.args):
            continue
        opened = [
            node
            for node in ast.walk(call.args[0])
            if isinstance(node, ast.Call) and called_name(node) == "open" and node.args
        ]
        for node in opened:
            parts = [
                a.value
                for a in ast.walk(node.args[0])
                if isinstance(a, ast.Constant) and isinstance(a.value, str)
            ]
            path = posixpath.join(*parts) if parts else ""
            candidates = (
                posixpath.normpath(path),
                posixpath.normpath(posixpath.join(posixpath.dirname(entry), path)),
            )
            if path and any("sys.argv" in repo.text(candidate) for candidate in candidates):
                return True
    return False


def _literal(node: ast.expr | None) -> Any:
    """The value of a literal expression; None for anything computed."""
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
