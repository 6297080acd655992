"""Reads the YAML run configurations under ``configs/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CONFIG_ROOT = Path(__file__).resolve().parent / "configs"


def load_config(section: str, name: str = "default") -> dict[str, Any]:
    """The mapping in ``configs/<section>/<name>.yaml`` (for example ``load_config("dpo")``)."""
    with open(CONFIG_ROOT / section / f"{name}.yaml", encoding="utf-8") as handle:
        return yaml.safe_load(handle)
