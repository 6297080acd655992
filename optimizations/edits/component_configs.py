"""Edits to the mappings a YAML config builds objects from (torchtune's ``_component_``, Hydra's ``_target_``;
:mod:`optimizations.program.components`): a keyword added to one without disturbing the rest of the file, and a
boolean setting of such a config switched on, or kept where the config's author commented on it."""

from __future__ import annotations

from optimizations.edits.yaml_text import turn_on
from optimizations.program.choices import invites_turning_on
from optimizations.program.components import Component
from optimizations.program.repository import Site
from optimizations.program.yaml_settings import YamlSetting


def switch_on(
    text: str, setting: YamlSetting, optimization: str, why: str, blocked: str | None = None
) -> tuple[str, Site]:
    """The file with a false boolean ``setting`` turned true in its own spelling, and its site (``why``: what
    turning it on does). Already done where it is true; kept as chosen on purpose where a comment is on it (on
    its line, or in the comment lines right above it that name its key), unless the comment recommends turning it
    on for speed; refused where it is not a boolean or where ``blocked`` says why."""
    message = f"{setting.key}: {setting.text} -> true ({why})"
    comment = _comment_on(text, setting)
    if setting.value is True:
        return text, Site(
            setting.path, setting.line, optimization, f"{setting.key}: {setting.text}", False, already=True
        )
    reasons = []
    if setting.value is not False:
        reasons.append(f"{setting.key} is not a boolean here")
    elif comment.startswith("#") and not invites_turning_on(
        comment
    ):  # a commented choice is the author's: kept
        why = f"the config comments on {setting.key}: {setting.text}: `{comment}`"
        chosen = f"{setting.key}: {setting.text}"
        return text, Site(setting.path, setting.line, optimization, chosen, False, why, kept=True)
    if blocked is not None:
        reasons.append(blocked)
    if reasons:
        return text, Site(setting.path, setting.line, optimization, message, False, "; ".join(reasons))
    return turn_on(text, setting) or text, Site(setting.path, setting.line, optimization, message)


def _comment_on(text: str, setting: YamlSetting) -> str:
    """The comment on ``setting``: the one ending its line, else the first of the comment lines right above it
    that names its key (``# compile True means ...`` above ``compile: False``; a section title such as
    ``# Memory management`` is not one); ``""`` for none."""
    inline = text[setting.end :].split("\n", 1)[0].strip()
    if inline.startswith("#"):
        return inline
    above = text[: text.rfind("\n", 0, setting.start) + 1].splitlines()
    block: list[str] = []
    while above and above[-1].strip().startswith("#"):
        block.insert(0, above.pop().strip())
    return next((line for line in block if setting.key.lower() in line.lower()), "")


def add_keyword(text: str, component: Component, key: str, value: str) -> str | None:
    """The file with ``key: value`` added to ``component``'s mapping on the line after its class key, at the
    mapping's indentation; ``None`` for a flow mapping, which has no line of its own for a key."""
    if component.flow:
        return None
    head = text[: component.after_class]
    if not head.endswith("\n"):
        head += "\n"
    return f"{head}{' ' * component.indent}{key}: {value}\n{text[component.after_class :]}"
