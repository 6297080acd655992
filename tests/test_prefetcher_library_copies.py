"""The prefetcher takes a library helper that moves the whole batch in place (torchtune's
``utils.batch_to_device(batch, device)``) as the loop's copy, by qualified name, and refuses where the helper
would move something CudaPrefetcher does not, or moves only part of the batch, or only sometimes."""

from __future__ import annotations

import sys
import textwrap
import types

import pytest
import torch

from optimizations.prefetcher import helper as runtime
from optimizations.program.repository import RepoContext
from optimizations.registry import get

LOOP = """\
{imports}


class Recipe:
    def __init__(self, model, loader, optimizer, device):
        self._model, self._loader, self._optimizer = model, loader, optimizer
        self._device = device

    def train(self):
        losses = []
        for idx, batch in enumerate(self._loader):
{body}
            loss = self._model(batch)
            loss.backward()
            self._optimizer.step()
            losses.append(loss.item())
        return losses
"""


def _source(imports: str, body: str) -> str:
    return LOOP.format(imports=imports, body=textwrap.indent(textwrap.dedent(body), " " * 12).rstrip("\n"))


def _transform(tmp_path, source: str):
    (tmp_path / "recipe.py").write_text(source)
    return get("prefetcher").transform_source(source, "recipe.py", RepoContext(tmp_path))


def _loop_sites(result):
    return [s for s in result.sites if s.message.startswith("`for ")]


@pytest.mark.parametrize(
    ("imports", "call"),
    [
        ("from torchtune import utils", "utils.batch_to_device(batch, self._device)"),
        ("from torchtune.utils import batch_to_device", "batch_to_device(batch, device=self._device)"),
        ("from torchtune.utils._device import batch_to_device as move", "move(batch, self._device)"),
        ("import torchtune.utils as tu", "tu.batch_to_device(device=self._device, batch=batch)"),
    ],
)
def test_torchtune_batch_to_device_is_the_loops_copy_however_imported(tmp_path, imports, call):
    result = _transform(tmp_path, _source(imports, f"{call}\nn = (batch['labels'] != -100).sum()"))
    (site,) = _loop_sites(result)
    assert site.applicable, site.reason
    assert "copy dropped" in site.message
    assert "for idx, batch in enumerate(CudaPrefetcher(self._loader, self._device)):" in result.source
    assert call not in result.source
    assert "n = (batch['labels'] != -100).sum()" in result.source


def test_a_function_of_the_same_name_that_is_not_the_librarys_is_no_copy(tmp_path):
    imports = "from mypkg.utils import batch_to_device"
    result = _transform(tmp_path, _source(imports, "batch_to_device(batch, self._device)"))
    assert _loop_sites(result) == [] and result.source == _source(
        imports, "batch_to_device(batch, self._device)"
    )


def test_only_the_helper_call_leaves_a_line_with_other_statements(tmp_path):
    body = "utils.batch_to_device(batch, self._device); n = len(batch)"
    result = _transform(tmp_path, _source("from torchtune import utils", body))
    assert _loop_sites(result)[0].applicable
    assert "batch_to_device" not in result.source and "\n            n = len(batch)\n" in result.source


PACKED_COLLATE = "from torchtune.data import padded_collate_packed\n\nCOLLATE = padded_collate_packed"


@pytest.mark.parametrize(
    ("imports", "body", "reason"),
    [
        (  # torchtune's packed collate puts a BlockMask in the batch: batch_to_device moves it, the prefetcher not
            f"from torchtune import utils\n{PACKED_COLLATE}",
            "utils.batch_to_device(batch, self._device)",
            "also moves flex-attention BlockMasks, which CudaPrefetcher leaves where they are",
        ),
        (  # ... as does a comprehension that calls `.to` on every value
            PACKED_COLLATE,
            "batch = {k: v.to(self._device) for k, v in batch.items()}",
            "`{k: v.to(device) ...}` also moves flex-attention BlockMasks",
        ),
        (
            "from torchtune import utils\nfrom torch.nn.attention.flex_attention import BlockMask\n\nMask = BlockMask",
            "utils.batch_to_device(batch, self._device)",
            "(`BlockMask` at line",
        ),
        (  # a StatefulDataLoader's position saved mid-epoch: one batch ahead under the prefetcher
            "from torchtune import utils\n\n\ndef save(recipe):\n    return recipe._loader.state_dict()",
            "utils.batch_to_device(batch, self._device)",
            "the loader's position is checkpointed (`recipe._loader.state_dict()`",
        ),
        (
            "from torchtune import utils",
            "utils.batch_to_device(batch['inputs'], self._device)",
            "not the whole batch",
        ),
        (
            "from torchtune import utils",
            "if self._device.type == 'cuda':\n    utils.batch_to_device(batch, self._device)",
            "not a statement of its own",
        ),
        (
            "from torchtune import utils",
            "lengths = batch['lengths'].tolist()\nutils.batch_to_device(batch, self._device)",
            "used on the host at line",
        ),
        (
            "from torchtune import utils",
            "utils.batch_to_device(batch, self._devices[idx])",
            "changes with each batch",
        ),
        (
            "from torchtune import utils",
            "self._device = pick(idx)\nutils.batch_to_device(batch, self._device)",
            "(the device) is assigned inside the loop",
        ),
        (
            "from torchtune import utils",
            "utils.batch_to_device(batch, batch['device'])",
            "the device is read from the batch",
        ),
        (
            "from torchtune import utils",
            "x = batch['x'].to('cuda:1')\nutils.batch_to_device(batch, self._device)",
            "different devices",
        ),
    ],
)
def test_refusals(tmp_path, imports, body, reason):
    source = _source(imports, body)
    result = _transform(tmp_path, source)
    (site,) = _loop_sites(result)
    assert not site.applicable and reason in site.reason, site.reason
    assert result.source == source


def test_host_reads_after_the_in_place_move_are_on_the_device_either_way(tmp_path):
    body = "utils.batch_to_device(batch, self._device)\nlengths = batch['lengths'].tolist()"
    result = _transform(tmp_path, _source("from torchtune import utils", body))
    assert _loop_sites(result)[0].applicable


def _batch_to_device(batch: dict, device) -> None:
    """torchtune's documented contract, written here: tensors and nested dicts moved in place, else ValueError."""
    for key, value in batch.items():
        if isinstance(value, dict):
            _batch_to_device(value, device)
        elif isinstance(value, torch.Tensor):
            batch[key] = value.to(device)
        else:
            raise ValueError(key)


def test_the_rewritten_recipe_trains_like_the_original_on_cpu(tmp_path, monkeypatch):
    source = _source(
        "import torch\nfrom torchtune import utils",
        "utils.batch_to_device(batch, self._device)\nassert batch['x'].device == self._device",
    )
    result = _transform(tmp_path, source)
    assert _loop_sites(result)[0].applicable
    torchtune = types.ModuleType("torchtune")
    torchtune.utils = types.SimpleNamespace(batch_to_device=_batch_to_device)
    monkeypatch.setitem(sys.modules, "torchtune", torchtune)
    monkeypatch.setitem(sys.modules, "_perfbot_prefetcher", runtime)

    def run(code: str) -> list[float]:
        torch.manual_seed(0)
        weight = torch.nn.Parameter(torch.randn(3))
        batches = [{"x": torch.randn(4, 3), "nested": {"y": torch.randn(4)}} for _ in range(3)]

        def model(batch):
            return ((batch["x"] @ weight - batch["nested"]["y"]) ** 2).mean()

        namespace: dict = {}
        exec(compile(code, "recipe.py", "exec"), namespace)
        optimizer = torch.optim.SGD([weight], lr=0.1)
        return namespace["Recipe"](model, batches, optimizer, torch.device("cpu")).train()

    assert run(result.source) == run(source)


LOADER = """\
import torch


def batches(rows, device):
    pinned = torch.empty(8, dtype=torch.long, pin_memory=torch.cuda.is_available())
    staged = torch.empty(8, dtype=torch.long, device=device)
    for row in rows:
        pinned.copy_(row)
        staged.copy_(pinned, non_blocking={non_blocking})
        yield staged
"""
AHEAD = """\
from loader import batches


def train(model, rows, optimizer, device):
    loader = batches(rows, device)
    x = next(loader)
    for step in range(10):
        model(x).sum().backward()
        x = next(loader)  # the next batch while the GPU runs this step
        optimizer.step()
"""


@pytest.mark.parametrize(("non_blocking", "already"), [("True", True), ("False", False)])
def test_a_loop_that_draws_its_next_batch_after_backward_from_an_async_loader_prefetches_already(
    tmp_path, non_blocking, already
):
    (tmp_path / "loader.py").write_text(LOADER.format(non_blocking=non_blocking))
    (tmp_path / "train.py").write_text(AHEAD)
    done = [(s.path, s.line) for s in get("prefetcher").find(tmp_path) if s.already]
    assert done == ([("train.py", 9)] if already else [])
