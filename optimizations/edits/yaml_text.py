"""Setting keys in YAML config files without disturbing the rest of the file: a value is changed by replacing
exactly the span PyYAML's composed node covers (:mod:`optimizations.program.yaml_settings`), so comments, key
order, quoting and indentation stay as they were; new keys are appended to the top-level mapping."""

from __future__ import annotations

import yaml

from optimizations.program.yaml_settings import YamlSetting

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
