"""Finding and switching on a YAML setting without disturbing the rest of the file."""

from __future__ import annotations

import yaml

from optimizations.edits.yaml_text import turn_on
from optimizations.program.yaml_settings import settings

CONFIG = """\
# SFT defaults
learning_rate: 2.0e-4   # peak
packing: False  # one example per row
stages:
  - name: warmup
    packing: off
  - name: main
    packing: true
"""


def test_finds_every_mapping_with_the_key_and_its_siblings():
    found = settings("c.yaml", CONFIG, "packing")
    assert [(s.line, s.text, s.value) for s in found] == [
        (3, "False", False),
        (6, "off", False),
        (8, "true", True),
    ]
    assert found[0].siblings == {"learning_rate": 2.0e-4, "packing": False}
    assert found[1].siblings == {"name": "warmup", "packing": False}


def test_turn_on_keeps_spelling_comments_and_everything_else():
    text = CONFIG
    for setting in reversed(settings("c.yaml", text, "packing")):
        edited = turn_on(text, setting)
        text = edited if edited is not None else text
    assert text == CONFIG.replace("packing: False", "packing: True").replace("packing: off", "packing: on")
    assert yaml.safe_load(text)["packing"] is True


def test_turn_on_leaves_values_that_are_not_false():
    text = "packing: true\nmax_length: 0\n"
    assert turn_on(text, settings("c.yaml", text, "packing")[0]) is None
    assert turn_on(text, settings("c.yaml", text, "max_length")[0]) is None


def test_a_templated_or_broken_file_has_no_settings():
    assert settings("c.yaml", "packing: {{ pack }\n  - [", "packing") == []
