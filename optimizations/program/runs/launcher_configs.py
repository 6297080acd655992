"""The configs a launcher reads: an ``accelerate config`` YAML and a DeepSpeed JSON (or one built in code).

| file | what it sets |
| --- | --- |
| accelerate YAML (``--config_file``) | ``mixed_precision``, ``distributed_type`` (``DEEPSPEED``, ``FSDP``, ``MULTI_GPU``), ``deepspeed_config.zero_stage``, ``offload_optimizer_device``, ``deepspeed_config_file``, ``dynamo_config`` |
| DeepSpeed JSON (``--deepspeed``, ``deepspeed_config_file``) | ``bf16.enabled``/``fp16.enabled`` (``auto``: the Trainer's flag), ``zero_optimization.stage``, ``offload_optimizer.device``, an ``optimizer`` block, which wins over the Trainer's ``optim`` |
"""

from __future__ import annotations

import json
import posixpath

import yaml

from optimizations.program.repository import RepoContext
from optimizations.program.runs.settings import BF16_WEIGHTS, FP16, Setting, reading
from optimizations.program.yaml_settings import composed_documents

DEEPSPEED_LAUNCHERS = ("deepspeed",)


def _line_of(text: str, needle: str) -> int:
    """The first line of ``text`` holding ``needle`` (1 when none does: the file itself)."""
    index = text.find(needle)
    return 1 if index < 0 else text.count("\n", 0, index) + 1


def accelerate_config(repo: RepoContext, path: str) -> tuple[list[Setting], str | None]:
    """The settings of an ``accelerate config`` YAML, and the DeepSpeed config file it names (if any)."""
    try:
        text = repo.read(path)
    except (OSError, UnicodeDecodeError):
        return [], None
    documents = composed_documents(text)
    data = yaml.safe_load(text) if documents else None
    if not isinstance(data, dict):
        return [], None
    found = []
    if (precision := data.get("mixed_precision")) is not None:
        read = reading("mixed_precision", precision)
        if read is not None:
            where = f"{path}:{_line_of(text, 'mixed_precision')}"
            found.append(Setting(read[0], read[1], where, f"mixed_precision: {precision}"))
    kind = str(data.get("distributed_type", ""))
    deepspeed = data.get("deepspeed_config") or {}
    if kind and kind not in ("NO", "no"):
        shown = {"DEEPSPEED": "DeepSpeed", "FSDP": "FSDP", "MULTI_GPU": "DDP"}.get(kind, kind)
        if shown == "DeepSpeed" and isinstance(deepspeed, dict) and "zero_stage" in deepspeed:
            shown += f" ZeRO-{deepspeed['zero_stage']}"
        found.append(Setting("distribution", shown, f"{path}:{_line_of(text, 'distributed_type')}", kind))
    named = None
    if isinstance(deepspeed, dict):
        if str(deepspeed.get("offload_optimizer_device", "none")).lower() == "cpu":
            where = f"{path}:{_line_of(text, 'offload_optimizer_device')}"
            found.append(
                Setting(
                    "optimizer", "DeepSpeedCPUAdam (ZeRO offload)", where, "offload_optimizer_device: cpu"
                )
            )
        if isinstance(deepspeed.get("deepspeed_config_file"), str):
            named = posixpath.normpath(deepspeed["deepspeed_config_file"])
    dynamo = data.get("dynamo_config") or {}
    if isinstance(dynamo, dict) and str(dynamo.get("dynamo_backend", "NO")).upper() not in ("NO", "NONE"):
        where = f"{path}:{_line_of(text, 'dynamo_backend')}"
        found.append(Setting("compile", "on", where, f"dynamo_backend: {dynamo['dynamo_backend']}"))
    return found, named


def deepspeed_config(repo: RepoContext, path: str, trainer_precision: str | None = None) -> list[Setting]:
    """The settings of a DeepSpeed JSON config; ``"auto"`` precision takes ``trainer_precision``."""
    try:
        text = repo.read(path)
        data = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError):
        return []
    return deepspeed_settings(data, path, text, trainer_precision) if isinstance(data, dict) else []


def deepspeed_settings(
    data: dict[str, object], path: str, text: str, trainer_precision: str | None = None
) -> list[Setting]:
    """The settings of a DeepSpeed config's contents (a JSON file's, or a dict literal's in code)."""
    found = []
    for key, precision in (("bf16", BF16_WEIGHTS), ("fp16", FP16)):
        block = data.get(key)
        enabled = block.get("enabled") if isinstance(block, dict) else None
        if enabled is True or (enabled == "auto" and trainer_precision == precision.split(" ")[0]):
            where = f"{path}:{_line_of(text, json.dumps(key))}"
            found.append(
                Setting("mixed_precision", precision, where, f'"{key}": {{"enabled": {json.dumps(enabled)}}}')
            )
    zero = data.get("zero_optimization")
    stage = zero.get("stage") if isinstance(zero, dict) else None
    if stage is not None:
        where = f"{path}:{_line_of(text, 'stage')}"
        found.append(Setting("distribution", f"DeepSpeed ZeRO-{stage}", where, f'"stage": {stage}'))
    offload = zero.get("offload_optimizer") if isinstance(zero, dict) else None
    optimizer = data.get("optimizer")
    if isinstance(optimizer, dict) and "type" in optimizer:
        kind = str(optimizer["type"])
        params = optimizer.get("params")
        torch_adam = isinstance(params, dict) and params.get("torch_adam") is True
        # DeepSpeed builds its fused CUDA Adam for an Adam/AdamW block unless told to use torch's.
        fused = kind.lower() in ("adam", "adamw") and not torch_adam
        shown = f"DeepSpeed FusedAdam ({kind})" if fused else f"DeepSpeed {kind} (config block)"
        where = f"{path}:{_line_of(text, json.dumps('optimizer'))}"
        found.append(Setting("optimizer", shown, where, f'"type": "{kind}"'))
    if isinstance(offload, dict) and str(offload.get("device", "none")).lower() == "cpu":
        where = f"{path}:{_line_of(text, 'offload_optimizer')}"
        found.append(
            Setting(
                "optimizer",
                "DeepSpeedCPUAdam (ZeRO offload)",
                where,
                '"offload_optimizer": {"device": "cpu"}',
            )
        )
    return found
