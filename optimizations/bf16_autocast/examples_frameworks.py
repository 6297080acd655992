"""``bf16_autocast`` examples where a framework drives training: its precision setting is the site."""

from optimizations.registry import Example

# A framework call's role in its file: the reference of a precision comparison, a default for callers.
FRAMEWORK_CALL_ROLES = (
    Example(
        "refuses_the_reference_of_a_precision_comparison",
        before="""\
from accelerate import Accelerator


def train_baseline(model, data):
    accelerator = Accelerator()
    return run(accelerator, model, data)


def train_fp8(model, data):
    accelerator = Accelerator(mixed_precision="fp8")
    return run(accelerator, model, data)
""",
        refusal='the file builds another one with `mixed_precision="fp8"` at line 10',
    ),
    Example(
        "a_bf16_sibling_is_no_comparison",
        before="""\
from accelerate import Accelerator


def evaluate(model, data):
    accelerator = Accelerator()
    return run(accelerator, model, data)


def train(model, data):
    accelerator = Accelerator(mixed_precision="bf16")
    return run(accelerator, model, data)
""",
        after="""\
from accelerate import Accelerator
from _perfbot_precision import bf16_unless_launched_otherwise


def evaluate(model, data):
    accelerator = Accelerator(mixed_precision=bf16_unless_launched_otherwise())
    return run(accelerator, model, data)


def train(model, data):
    accelerator = Accelerator(mixed_precision="bf16")
    return run(accelerator, model, data)
""",
    ),
    Example(
        "refuses_a_default_for_callers_that_pass_none",
        before="""\
from accelerate import Accelerator


def get_training_utilities(model_name, accelerator=None):
    if accelerator is None:
        accelerator = Accelerator()
    return accelerator, load(model_name)
""",
        refusal="it is built only when the caller passes none",
    ),
)

# A precision setting given, picked by a helper or a parameter's default; calls that drive no training.
FRAMEWORK_SETTINGS = (
    Example(
        "already_bf16_where_a_helper_picks_it",
        before="""\
from typing import Optional

import lightning as L

from precision import default_precision


def setup(precision: Optional[str] = None) -> None:
    precision = precision or default_precision(training=True)
    fabric = L.Fabric(devices=1, precision=precision)
    fabric.launch()
""",
        files={
            "precision.py": """\
import torch


def default_precision(training: bool) -> str:
    if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bf16-mixed" if training else "bf16-true"
    return "32-true"
""",
        },
    ),
    Example(
        "precision_a_helper_reads_from_the_environment",
        before="""\
import lightning as L

from precision import default_precision


def setup() -> None:
    fabric = L.Fabric(devices=1, precision=default_precision())
    fabric.launch()
""",
        files={
            "precision.py": """\
import os


def default_precision() -> str:
    return "bf16-mixed" if os.environ.get("BF16") else "32-true"
""",
        },
        refusal="comes from the run's arguments",
    ),
    Example(
        "already_bf16_by_the_parameters_default",
        before="""\
import lightning as L


def setup(devices: int = 8, precision: str = "bf16-true") -> None:
    fabric = L.Fabric(devices=devices, precision=precision)
    fabric.launch()
""",
    ),
    Example(
        "precision_a_parameter_reassigns",
        before="""\
import lightning as L


def setup(precision: str = "bf16-true", quantize: bool = False) -> None:
    if quantize:
        precision = "32-true"
    fabric = L.Fabric(devices=1, precision=precision)
    fabric.launch()
""",
        refusal="comes from the run's arguments",
    ),
    Example(
        "precision_a_helper_picks_without_bf16",
        before="""\
import lightning as L

from precision import fallback_precision


def setup() -> None:
    fabric = L.Fabric(devices=1, precision=fallback_precision())
    fabric.launch()
""",
        files={
            "precision.py": """\
import torch


def fallback_precision() -> str:
    return "32-true" if torch.cuda.is_bf16_supported() else "16-mixed"
""",
        },
        refusal="comes from the run's arguments",
    ),
    Example(
        "accelerator_built_only_to_read_the_process_index",
        before="""\
import os

from accelerate import Accelerator
from transformers import AutoModelForCausalLM


def load(path):
    device_map = "auto"
    if int(os.environ.get("WORLD_SIZE", "0")) > 1:
        device_map = {"": Accelerator().process_index}
    return AutoModelForCausalLM.from_pretrained(path, device_map=device_map)
""",
        refusal="thrown away (only `Accelerator().process_index` is read from it)",
    ),
    Example(
        "accelerator_with_a_deepspeed_plugin",
        before="""\
from accelerate import Accelerator
from accelerate.utils import DeepSpeedPlugin


class Engine:
    def __init__(self, config_file, steps):
        plugin = DeepSpeedPlugin(hf_ds_config=config_file)
        self.accelerator = Accelerator(deepspeed_plugin=plugin, gradient_accumulation_steps=steps)

    def fit(self, model, optimizer, loader):
        model, optimizer, loader = self.accelerator.prepare(model, optimizer, loader)
        for batch in loader:
            self.accelerator.backward(model(**batch).loss)
            optimizer.step()
""",
        refusal="its DeepSpeed plugin (`plugin`) takes the precision from the DeepSpeed config",
    ),
    Example(
        "accelerator_built_only_to_set_up_shared_state",
        before="""\
from accelerate import Accelerator
from accelerate.state import AcceleratorState


def device_mesh():
    Accelerator()
    return AcceleratorState().device_mesh


def train(model, loader, optimizer, accelerator):
    mesh = device_mesh()
    for x, y in loader:
        loss = model(x, y, mesh)
        accelerator.backward(loss)
        optimizer.step()
""",
        refusal="the `Accelerator(...)` built here is thrown away",
    ),
    Example(
        "accelerate_mixed_precision",
        before="""\
from accelerate import Accelerator


def train(model, loader, optimizer):
    accelerator = Accelerator()
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        loss = model(x, y)
        accelerator.backward(loss)
        optimizer.step()
""",
        after="""\
from accelerate import Accelerator
from _perfbot_precision import bf16_unless_launched_otherwise


def train(model, loader, optimizer):
    accelerator = Accelerator(mixed_precision=bf16_unless_launched_otherwise())
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        loss = model(x, y)
        accelerator.backward(loss)
        optimizer.step()
""",
    ),
)
