"""The vendored ``with_shared_cache`` (optimizations/dpo_precompute/helper.py), run for real: two CPU ranks under
``torchrun`` replay the cache sequence of TRL's ``DPOTrainer._precompute_ref_logps`` (the main process writes
the log-probs to a path taken from the dataset, a barrier, every rank reads that path) on an in-memory dataset,
without and with the helper. The transform that inserts it is covered by its examples in test_examples.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from datasets import Dataset

from optimizations.dpo_precompute.helper import with_shared_cache

REPO_ROOT = Path(__file__).resolve().parents[1]

RANKS = """
import json, os, sys
import torch.distributed as dist
from accelerate import PartialState
from datasets import Dataset
from optimizations.dpo_precompute.helper import with_shared_cache

# What DPOConfig sets up before the trainer is built; on CPU accelerate sees several processes only when asked.
state = PartialState(cpu=True)
assert state.num_processes == 2
rank = dist.get_rank()
rows = {"prompt": [f"p{i}" for i in range(6)], "chosen": ["a"] * 6, "rejected": ["b"] * 6}


def precompute(dataset):
    # TRL 1.16's _precompute_ref_logps: a cache path from the dataset, written by the main process, read by all
    cache_file = dataset._get_cache_file_path("reference-logps")
    if state.is_main_process:
        dataset.map(
            lambda batch, indices: {"ref_chosen_logps": [-float(i) for i in indices]},
            with_indices=True, batched=True, remove_columns=dataset.column_names, cache_file_name=cache_file,
        )
    state.wait_for_everyone()
    try:
        return {"cache_dir": os.path.dirname(cache_file), "logps": list(Dataset.from_file(cache_file)["ref_chosen_logps"])}
    except FileNotFoundError as error:
        return {"cache_dir": os.path.dirname(cache_file), "error": type(error).__name__}


plain = precompute(Dataset.from_dict(rows))
shared_dataset = with_shared_cache(Dataset.from_dict(rows))
shared = precompute(shared_dataset)
shared["rows"] = shared_dataset.to_dict()
with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as handle:
    json.dump({"plain": plain, "shared": shared, "expected_rows": rows}, handle)
"""


def test_in_memory_dataset_gets_one_cache_directory_for_every_rank(tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(RANKS)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "HF_DATASETS_CACHE": str(tmp_path / "hf-datasets"),
        "OMP_NUM_THREADS": "1",
        "TMPDIR": str(tmp_path),  # torchrun's torchelastic_* scratch stays in the test's directory
    }
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script),
         str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]

    # Without the helper: each rank's path is in its own temporary directory, and rank 1 cannot open rank 0's file
    assert ranks[0]["plain"]["cache_dir"] != ranks[1]["plain"]["cache_dir"]
    assert ranks[0]["plain"]["logps"] == [-float(i) for i in range(6)]
    assert ranks[1]["plain"]["error"] == "FileNotFoundError"

    # With it: one directory under the datasets cache, and every rank reads the main process's log-probs
    shared_dir = ranks[0]["shared"]["cache_dir"]
    assert ranks[1]["shared"]["cache_dir"] == shared_dir
    assert Path(shared_dir).parent == tmp_path / "hf-datasets" / "perfbot-shared"
    for rank in ranks:
        assert rank["shared"]["logps"] == [-float(i) for i in range(6)]
        assert rank["shared"]["rows"] == rank["expected_rows"]


def test_one_process_and_other_datasets_come_back_unchanged(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path))
    in_memory = Dataset.from_dict({"prompt": ["p"], "chosen": ["a"], "rejected": ["b"]})
    assert with_shared_cache(in_memory) is in_memory  # one process: TRL's own temporary file works
    assert with_shared_cache(None) is None
    rows = [{"prompt": "p"}]
    assert with_shared_cache(rows) is rows
    evals = {"a": in_memory, "b": None}
    assert with_shared_cache(evals) == evals
    assert not (tmp_path / "perfbot-shared").exists()
