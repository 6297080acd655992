# Vendored by perfbot from optimizations/dpo_precompute/helper.py; edit it there, not here.
# This module runs inside the target repository: it imports only the standard library, datasets and
# accelerate (lazily), never perfbot.
"""In-memory datasets given files every rank shares, for DPO's reference log-probs.

With ``precompute_ref_log_probs=True``, TRL's ``DPOTrainer`` (checked against TRL 1.16) has the main process write
the reference log-probs to an Arrow file beside the dataset's own cache files, and then every rank reads that
file. A dataset built in memory (``Dataset.from_dict``, ``from_list``, ``from_pandas``) has no cache files, so
each process names the file inside a temporary directory of its own: under ``torchrun`` or ``accelerate launch``
every rank but the main one fails with ``FileNotFoundError``. :func:`with_shared_cache` saves such a dataset once,
from the main process, under the ``datasets`` cache (``<HF_DATASETS_CACHE>/perfbot-shared/<fingerprint>``), and
hands every rank the memory-mapped copy, whose directory TRL then uses on all of them. Runs on several nodes need
that directory on a shared filesystem, as TRL's own cache does.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

SHARED_DIRECTORY = "perfbot-shared"


def with_shared_cache(dataset: Any) -> Any:
    """``dataset``, backed by files every process can open, if only in memory.

    A mapping of datasets (an eval ``DatasetDict``, say) is handled per entry. One process, a dataset that already
    has cache files, ``None`` and anything that is not a ``datasets.Dataset`` come back unchanged.
    """
    if isinstance(dataset, dict):
        return type(dataset)((name, with_shared_cache(part)) for name, part in dataset.items())
    try:
        from datasets import Dataset, load_from_disk
    except ImportError:
        return dataset
    if not isinstance(dataset, Dataset) or dataset.cache_files:
        return dataset
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list

    state = PartialState()
    if state.num_processes == 1:
        return dataset
    location = [str(_save(dataset)) if state.is_main_process else None]
    broadcast_object_list(location, from_process=0)  # the other ranks wait here until the files exist
    return load_from_disk(location[0])


def _save(dataset: Any) -> Path:
    """Save ``dataset`` under the datasets cache by its fingerprint, once."""
    from datasets import config

    root = Path(config.HF_DATASETS_CACHE) / SHARED_DIRECTORY
    target = root / dataset._fingerprint
    if (target / "state.json").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=root, prefix=".staging-"))
    dataset.save_to_disk(str(staging))
    try:
        os.rename(staging, target)  # atomic: a concurrent run sees the whole directory or none of it
    except OSError:  # another run saved the same data first
        shutil.rmtree(staging, ignore_errors=True)
    return target
