"""Reading one key in YAML config files: every mapping that sets it, its value as written, and where it is.

PyYAML composes the document into nodes that know where they start and end in the text, so an edit
(:mod:`optimizations.edits.yaml_text`) can replace exactly that span and leave the rest of the file as it was.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import yaml


@dataclass(frozen=True)
class YamlSetting:
    """One ``key: value`` of a mapping in a YAML file, the mapping's other keys and values, and its position."""

    path: str
    line: int
    key: str
    value: object
    text: str  # the value as written
    start: int
    end: int
    siblings: dict[str, object]  # every scalar key of the mapping holding the setting -> its value


@functools.lru_cache(maxsize=256)
def composed_documents(text: str) -> tuple[yaml.Node, ...] | None:
    """The YAML documents of ``text`` as composed nodes (read, never changed), once per text; ``None`` when the
    text is not plain YAML."""
    try:
        return tuple(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError:
        return None


def settings(path: str, text: str, key: str) -> list[YamlSetting]:
    """Every scalar ``key:`` in any mapping of the file's documents; none when the file is not plain YAML."""
    documents = composed_documents(text) if key in text else None
    if documents is None:
        return []
    found: list[YamlSetting] = []
    pending = [d for d in documents if d is not None]
    while pending:
        node = pending.pop()
        if isinstance(node, yaml.SequenceNode):
            pending.extend(node.value)
        if not isinstance(node, yaml.MappingNode):
            continue
        siblings = {
            k.value: scalar_value(v)
            for k, v in node.value
            if isinstance(k, yaml.ScalarNode) and isinstance(v, yaml.ScalarNode)
        }
        for name, value in node.value:
            pending.append(value)
            if isinstance(name, yaml.ScalarNode) and name.value == key and isinstance(value, yaml.ScalarNode):
                start, end = value.start_mark.index, value.end_mark.index
                found.append(
                    YamlSetting(
                        path,
                        value.start_mark.line + 1,
                        key,
                        scalar_value(value),
                        text[start:end],
                        start,
                        end,
                        siblings,
                    )
                )
    return sorted(found, key=lambda s: s.start)


def scalar_value(node: yaml.ScalarNode) -> object:
    """The Python value PyYAML's safe loader gives a scalar node."""
    return yaml.SafeLoader("").construct_object(node, deep=True)
