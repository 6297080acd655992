"""``kept_as_data`` on the smaller uses of a loaded model: what counts as keeping it as data, and what is a run."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from optimizations.program.model_use import kept_as_data
from optimizations.program.repository import ParsedFile

LOAD = 'model = AutoModelForCausalLM.from_pretrained("base")\n'


def kept(uses: str) -> str | None:
    """Where the script's loaded model is kept, as code; ``None`` when it is used otherwise."""
    parsed = ParsedFile("script.py", LOAD + textwrap.dedent(uses))
    load = next(node for node in parsed.module.body[0].body[0].children if isinstance(node, cst.Call))
    found = kept_as_data(parsed.module, load, parsed)
    return None if found is None else parsed.module.code_for_node(found)


@pytest.mark.parametrize(
    "uses, where",
    [
        ("model.eval()\nmodel.save_pretrained('out')\n", "model.save_pretrained"),
        ("model.train(False)\nmodel.save_pretrained('out')\n", "model.save_pretrained"),
        (
            "first = model.model.layers[0].self_attn.q_proj.weight\n",
            "model.model.layers[0].self_attn.q_proj.weight",
        ),
        (
            "for layer in model.model.layers:\n    layer.flag = True\nmodel.save_pretrained('out')\n",
            "model.save_pretrained",
        ),
        (
            "for layer in model.model.layers:\n    del layer.mlp\nstate = model.state_dict()\n",
            "model.state_dict",
        ),
    ],
)
def test_uses_that_keep_the_model_as_data(uses: str, where: str) -> None:
    assert kept(uses) == where


@pytest.mark.parametrize(
    "uses",
    [
        "model.train()\nmodel.save_pretrained('out')\n",  # training mode: it is about to be trained
        "model.train(True)\nmodel.save_pretrained('out')\n",
        "model.eval(True)\nmodel.save_pretrained('out')\n",  # not the flag setter perfbot knows
        "out = model.lm_head.weight(hidden)\n",  # a part called, not a tensor read
        "for layer in model.model.layers:\n    hidden = layer(hidden)\n",  # the parts run
        "for index, layer in enumerate(model.model.layers):\n    layer.flag = index\n",  # parts passed on
    ],
)
def test_uses_that_run_or_pass_on_the_model(uses: str) -> None:
    assert kept(uses) is None
