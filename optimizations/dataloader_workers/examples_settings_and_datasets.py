"""Examples of ``dataloader_workers`` where the program already decides: a worker count it sets or passes in,
a dataset workers would replay or cannot touch, a config no trainer reads or that an old transformers allows,
settings hidden in a splat, a loader built at import time."""

from optimizations.registry import Example

SETTINGS_AND_DATASETS = (
    Example(
        "already_uses_workers",
        before="""\
import torch


def loader(ds):
    return torch.utils.data.DataLoader(ds, batch_size=8, num_workers=8, pin_memory=True)
""",
    ),
    Example(
        "a_count_passed_in_is_not_already_workers",
        before="""\
from torch.utils.data import DataLoader


def loader(ds, num_workers=0):
    return DataLoader(ds, batch_size=8, num_workers=num_workers, pin_memory=True)
""",
        refusal="num_workers comes from `num_workers` (line 5); raise its default where that value is defined",
    ),
    Example(
        "pins_memory_when_workers_come_from_a_variable",
        before="""\
from torch.utils.data import DataLoader


def loader(ds, num_workers):
    return DataLoader(ds, batch_size=8, shuffle=True, num_workers=num_workers)
""",
        after="""\
from torch.utils.data import DataLoader
import torch


def loader(ds, num_workers):
    return DataLoader(ds, batch_size=8, shuffle=True, num_workers=num_workers, pin_memory=torch.cuda.is_available())
""",
    ),
    Example(
        "refuses_iterable_dataset",
        before="""\
import torch
from torch.utils.data import IterableDataset


class Stream(IterableDataset):
    def __iter__(self):
        yield from range(10)


def main():
    loader = torch.utils.data.DataLoader(Stream(), batch_size=2)
    return list(loader)
""",
        refusal="IterableDataset",
    ),
    Example(
        "refuses_a_library_stream",
        before="""\
from datasets import load_dataset
from torch.utils.data import DataLoader
from torchtext.datasets import Multi30k


def loaders(collate):
    train_iterator = Multi30k(split="train", language_pair=("de", "en"))
    web = load_dataset("allenai/c4", "en", split="train", streaming=True)
    return DataLoader(train_iterator, batch_size=8, collate_fn=collate), DataLoader(web, batch_size=8)
""",
        refusal="IterableDataset",
    ),
    Example(
        "refuses_iterable_dataset_of_another_module",
        before="""\
from torch.utils.data import DataLoader

from data.streams import TokenStream


def main():
    stream = TokenStream("corpus.txt")
    return list(DataLoader(stream, batch_size=2))
""",
        files={
            "data/__init__.py": "",
            "data/streams.py": """\
import torch.utils.data


class LineStream(torch.utils.data.IterableDataset):
    def __init__(self, path):
        self.path = path


class TokenStream(LineStream):
    def __iter__(self):
        yield from open(self.path)
""",
        },
        refusal="IterableDataset",
    ),
    Example(
        "no_site_config_only_a_repository_helper_reads",
        before="""\
from transformers import TrainingArguments

from data.loading import load_prompts


def main():
    args = TrainingArguments(output_dir="unused")
    prompts = load_prompts("prompts.jsonl", training_args=args)
    print(dict(args=len(prompts), seed=args.seed))
""",
        files={
            "data/__init__.py": "",
            "data/loading.py": """\
import json


def load_prompts(path, training_args):
    with training_args.main_process_first(desc="load"):
        return _read(path, training_args)


def _read(path, args):
    return [json.loads(line) for line in open(path)][: args.seed]
""",
        },
    ),
    Example(
        "loader_built_inside_a_trainer_class",
        before="""\
from torch.utils.data import DataLoader
from transformers import Trainer


class RolloutTrainer(Trainer):
    def rollout_loader(self, prompts):
        return DataLoader(prompts, batch_size=self.args.per_device_train_batch_size, shuffle=True)
""",
        refusal="built by the trainer class `RolloutTrainer`",
    ),
    Example(
        "library_default_for_callers_without_a_config",
        before="""\
from transformers import Trainer, TrainingArguments


class MyTrainer(Trainer):
    def __init__(self, model, args=None, train_dataset=None):
        if args is None:
            args = TrainingArguments(f"{type(model).__name__}-trained")
        super().__init__(model=model, args=args, train_dataset=train_dataset)
""",
    ),
    Example(
        "config_of_a_repository_that_still_allows_transformers_4_31",
        before="""\
from transformers import Trainer, TrainingArguments


def main(model, data):
    args = TrainingArguments(output_dir="out")
    Trainer(model=model, args=args, train_dataset=data).train()
""",
        after="""\
from transformers import Trainer, TrainingArguments
import os
import torch

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


def main(model, data):
    args = TrainingArguments(output_dir="out", dataloader_num_workers=DATALOADER_WORKERS, dataloader_pin_memory=torch.cuda.is_available())
    Trainer(model=model, args=args, train_dataset=data).train()
""",
        files={"requirements.txt": "torch\ntransformers>=4.31.0\n"},
    ),
    Example(
        "config_a_repository_helper_hands_to_a_trainer",
        before="""\
from transformers import TrainingArguments

from recipes import build_trainer


def main(model, data):
    args = TrainingArguments(output_dir="out")
    build_trainer(model, args, data).train()
""",
        after="""\
from transformers import TrainingArguments

from recipes import build_trainer
import os
import torch

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


def main(model, data):
    args = TrainingArguments(output_dir="out", dataloader_num_workers=DATALOADER_WORKERS, dataloader_pin_memory=torch.cuda.is_available(), dataloader_persistent_workers=DATALOADER_WORKERS > 0, dataloader_prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None))
    build_trainer(model, args, data).train()
""",
        files={
            "recipes.py": """\
from transformers import Trainer


def build_trainer(model, training_args, dataset):
    return Trainer(model=model, args=training_args, train_dataset=dataset)
""",
        },
    ),
    Example(
        "refuses_hidden_kwargs",
        before="""\
from trl import DPOConfig


def build(overrides):
    return DPOConfig(output_dir="out", **overrides)
""",
        refusal="**overrides",
    ),
    Example(
        "refuses_import_time_loader",
        before="""\
import torch

loader = torch.utils.data.DataLoader(list(range(10)), batch_size=2)
""",
        refusal="import time",
    ),
)
