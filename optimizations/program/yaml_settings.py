"""Reading and setting one key in YAML config files without disturbing the rest of the file.

PyYAML composes the document into nodes that know where they start and end in the text; a value is changed by
replacing exactly that span, so comments, key order, quoting and indentation stay as they were.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import yaml

# How each YAML 1.1 boolean spelling is turned on, in the same case style.
_TURNED_ON = {
    "false": "true",
    "False": "True",
    "FALSE": "TRUE",
    "no": "yes",
    "No": "Yes",
    "NO": "YES",
    "off": "on",
    "Off": "On",
    "OFF": "ON",
}


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


def turn_on(text: str, setting: YamlSetting) -> str | None:
    """The file with a false boolean ``setting`` switched to true in its own spelling; ``None`` if it is not one."""
    if setting.value is not False or setting.text not in _TURNED_ON:
        return None
    return text[: setting.start] + _TURNED_ON[setting.text] + text[setting.end :]


def add_keys(text: str, values: dict[str, str], comment: str = "") -> tuple[str, int] | None:
    """The file with ``key: value`` lines (after a ``comment`` line) appended to its top-level block mapping,
    and the line of the first key; ``None`` when the file is not one plain YAML block mapping."""
    try:
        document = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    if not isinstance(document, yaml.MappingNode) or document.flow_style or not document.value:
        return None
    indent = " " * document.value[0][0].start_mark.column
    end = document.value[-1][1].end_mark
    at = end.index if end.column == 0 else text.find("\n", end.index) + 1 or len(text)
    head = text[:at] if text[:at].endswith("\n") or not at else text[:at] + "\n"
    lines = [f"{indent}{comment}"] if comment else []
    lines += [f"{indent}{key}: {value}" for key, value in values.items()]
    line = head.count("\n") + 1 + bool(comment)
    return head + "\n".join(lines) + "\n" + text[at:], line
