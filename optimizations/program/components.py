"""Objects a YAML config builds by class name: torchtune's ``_component_`` and Hydra's ``_target_`` mappings.

A recipe such as torchtune's ``optimizer: {_component_: torch.optim.AdamW, lr: 3e-4}`` is read by
``config.instantiate(cfg.optimizer, params)``, which calls the class with the mapping's other keys as keyword
arguments: the mapping is the call, written in the config. This module finds those mappings with PyYAML's
composed nodes (which know where each starts in the text, so :mod:`optimizations.edits.component_configs`
can edit one without disturbing the rest of the file), and tells whether the program instantiates components or
reads a setting at all.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar, cast

import yaml

from optimizations.program.repository import RepoContext, same_file
from optimizations.program.yaml_settings import YamlSetting, composed_documents, scalar_value, settings

# The keys that name the class a mapping builds: torchtune's, then Hydra's.
CLASS_KEYS = ("_component_", "_target_")
# A call of an instantiating function in Python source: ``config.instantiate(...)``, ``instantiate(...)``.
INSTANTIATE = re.compile(r"\binstantiate\s*\(")
# What one optimization's pass found in the repository's Python files and component configs, by question: asked
# once per pass, whichever files' transforms ask (a pass edits configs only after its Python files).
T = TypeVar("T")
_FOUND: weakref.WeakKeyDictionary[RepoContext, dict[str, object]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Component:
    """One mapping of a YAML file that builds ``cls``: its keyword values and lines, and where a key goes."""

    path: str
    line: int  # the class key's line
    cls: str
    keywords: dict[str, object]  # the mapping's other scalar keys -> their values
    lines: dict[str, int]  # the same keys -> their lines
    settings: dict[str, object]  # the scalar keys of the document's top-level mapping -> their values
    indent: int  # the column of the mapping's keys
    after_class: int  # the index just past the class key's line: where a new key line is inserted
    flow: bool  # written inline (``{_component_: ..., lr: 1}``): no key line can be added


def components(path: str, text: str, classes: tuple[str, ...]) -> list[Component]:
    """Every block or flow mapping of the file that builds one of ``classes`` (a name ending in a dot: any class
    of that module); none when the file is not plain YAML or never names them."""
    documents = composed_documents(text) if any(cls in text for cls in classes) else None
    if documents is None:
        return []
    found: list[Component] = []
    pending = [(d, _scalars(d)) for d in documents if d is not None]
    while pending:
        node, settings = pending.pop()
        if isinstance(node, yaml.SequenceNode):
            pending.extend((item, settings) for item in node.value)
        if not isinstance(node, yaml.MappingNode):
            continue
        pending.extend((value, settings) for _, value in node.value)
        scalars = _scalar_pairs(node)
        named = next(
            ((k, v) for k, v in scalars if k.value in CLASS_KEYS and _builds(v.value, classes)), None
        )
        if named is None:
            continue
        key, value = named
        newline = text.find("\n", value.end_mark.index)
        found.append(
            Component(
                path=path,
                line=key.start_mark.line + 1,
                cls=value.value,
                keywords={k.value: scalar_value(v) for k, v in scalars if k is not key},
                lines={k.value: k.start_mark.line + 1 for k, v in scalars if k is not key},
                settings=settings,
                indent=key.start_mark.column,
                after_class=len(text) if newline < 0 else newline + 1,
                flow=node.flow_style,
            )
        )
    return sorted(found, key=lambda c: c.after_class)


def _builds(cls: str, classes: tuple[str, ...]) -> bool:
    """``cls`` is one of ``classes``, or in a module one of them names with a trailing dot."""
    return any(cls == name or (name.endswith(".") and cls.startswith(name)) for name in classes)


def _scalar_pairs(node: yaml.MappingNode) -> list[tuple[yaml.ScalarNode, yaml.ScalarNode]]:
    return [
        (k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and isinstance(v, yaml.ScalarNode)
    ]


def _scalars(node: yaml.Node) -> dict[str, object]:
    """A mapping's scalar keys and their values; ``{}`` for anything else."""
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {k.value: scalar_value(v) for k, v in _scalar_pairs(node)}


def instantiates_components(ctx: RepoContext) -> bool:
    """Whether any Python file of the repository calls an ``instantiate`` function: the program builds what its
    configs name (torchtune's ``config.instantiate``, Hydra's ``hydra.utils.instantiate``). A plan's focus does
    not narrow this: a config the plan names is read by code the plan need not name."""
    return _python_matches(ctx, INSTANTIATE)


def read_text(ctx: RepoContext, path: str) -> str | None:
    """The file's text; ``None`` when it cannot be read as UTF-8 (no config perfbot can read or edit)."""
    try:
        return ctx.read(path)
    except (OSError, UnicodeDecodeError):
        return None


def reads_config_key(ctx: RepoContext, key: str) -> bool:
    """Whether any Python file of the repository reads ``key`` from a config: ``.get("key", ...)``,
    ``["key"]``, or an attribute ``.key`` that is not called (``cfg.compile``, not ``model.compile()``)."""
    k = re.escape(key)
    return _python_matches(
        ctx, re.compile(rf"""\.get\(\s*["']{k}["']|\[\s*["']{k}["']\s*\]|\.{k}\b(?!\s*\()""")
    )


def _python_matches(ctx: RepoContext, pattern: re.Pattern[str]) -> bool:
    """Whether ``pattern`` occurs in any Python file of the repository, whatever a plan's focus names."""

    def search() -> bool:
        whole = RepoContext(ctx.root, ctx.exclude, sources=ctx.sources)
        return any(pattern.search(read_text(ctx, path) or "") for path in whole.python_files())

    return _once(ctx, f"python:{pattern.pattern}", search)


def top_level_settings(ctx: RepoContext, key: str) -> list[YamlSetting]:
    """The top-level ``key:`` of every component config of the repository (a YAML that builds something by
    class name), once per pass."""

    def find() -> list[YamlSetting]:
        found = []
        for path, text in readable_configs(ctx):
            if _builds_components(text):
                lines = text.splitlines()
                found += [s for s in settings(path, text, key) if lines[s.line - 1].startswith(f"{key}:")]
        return found

    return _once(ctx, f"top:{key}", find)


def _once(ctx: RepoContext, question: str, answer: Callable[[], T]) -> T:
    """``answer()`` for ``question`` about ``ctx``'s repository, computed once per pass over it."""
    found = _FOUND.setdefault(ctx, {})
    if question not in found:
        found[question] = answer()
    return cast(T, found[question])


def _builds_components(text: str) -> bool:
    """Whether a YAML text names a class to build in any mapping (``_component_:`` or ``_target_:``)."""
    return any(f"{key}:" in text for key in CLASS_KEYS)


def config_files(ctx: RepoContext) -> list[str]:
    """The repository's YAML files in scope; those a plan's focus names, when it names any."""
    found = ctx.files("*.yaml", "*.yml")
    return [path for path in found if any(same_file(path, hint) for hint in ctx.focus)] or found


def readable_configs(ctx: RepoContext) -> Iterator[tuple[str, str]]:
    """``(path, text)`` of each of :func:`config_files` that reads as UTF-8 (the others perfbot neither reads
    nor edits)."""
    for path in config_files(ctx):
        text = read_text(ctx, path)
        if text is not None:
            yield path, text
