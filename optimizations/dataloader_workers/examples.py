"""The before/after examples of ``dataloader_workers``: configs and loaders it edits, and loaders it judges by
how the program reads them (only measured, or once per call of an evaluation).

The rest, in their original order after these, are in :mod:`.examples_settings_and_datasets`."""

from optimizations.registry import Example

from .examples_settings_and_datasets import SETTINGS_AND_DATASETS

EXAMPLES = (
    Example(
        "beside_a_splat_an_imported_helper_builds",
        before="""\
from transformers import TrainingArguments

from schedules import warmup_settings


def build(run):
    return TrainingArguments(output_dir=run.out, **warmup_settings(run))
""",
        after="""\
from transformers import TrainingArguments

from schedules import warmup_settings
import os
import torch

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


def build(run):
    return TrainingArguments(output_dir=run.out, **warmup_settings(run), dataloader_num_workers=DATALOADER_WORKERS, dataloader_pin_memory=torch.cuda.is_available(), dataloader_persistent_workers=DATALOADER_WORKERS > 0, dataloader_prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None))
""",
        files={
            "schedules.py": """\
def warmup_settings(run):
    settings = {}
    if run.warmup_steps:
        settings.update(warmup_steps=run.warmup_steps)
    else:
        settings["warmup_ratio"] = run.warmup_ratio
    return settings
"""
        },
    ),
    Example(
        "refuses_splat_of_unknown_keys",
        before="""\
from transformers import TrainingArguments


def build(run, extra):
    settings = {"output_dir": run.out}
    settings.update(extra)
    return TrainingArguments(**settings)
""",
        refusal="(train.py:4), whose keys are unknown: `extra` is a parameter of build()",
    ),
    Example(
        "sft_config",
        before="""\
from trl import SFTConfig


def build(out):
    return SFTConfig(output_dir=out, packing=False)
""",
        after="""\
from trl import SFTConfig
import os
import torch

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


def build(out):
    return SFTConfig(output_dir=out, packing=False, dataloader_num_workers=DATALOADER_WORKERS, dataloader_pin_memory=torch.cuda.is_available(), dataloader_persistent_workers=DATALOADER_WORKERS > 0, dataloader_prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None))
""",
    ),
    Example(
        "aliased_module_multiline_with_comments",
        before="""\
import os
import transformers as hf


def build(cfg):
    args = hf.TrainingArguments(
        output_dir=cfg.out,  # where checkpoints go
        dataloader_num_workers=0,
        bf16=True,  # H100
    )
    return args
""",
        after="""\
import os
import transformers as hf
import torch

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


def build(cfg):
    args = hf.TrainingArguments(
        output_dir=cfg.out,  # where checkpoints go
        dataloader_num_workers=DATALOADER_WORKERS,
        bf16=True,  # H100
        dataloader_pin_memory=torch.cuda.is_available(),
        dataloader_persistent_workers=DATALOADER_WORKERS > 0,
        dataloader_prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None),
    )
    return args
""",
    ),
    Example(
        "torch_dataloader_aliased",
        before="""\
from torch.utils.data import DataLoader as DL


def loader(ds):
    return DL(ds, batch_size=8, shuffle=True)
""",
        after="""\
from torch.utils.data import DataLoader as DL
import os
import torch

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


def loader(ds):
    return DL(ds, batch_size=8, shuffle=True, num_workers=DATALOADER_WORKERS, pin_memory=torch.cuda.is_available(), persistent_workers=DATALOADER_WORKERS > 0, prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None))
""",
    ),
    Example(
        "imports_after_a_statement",
        before="""\
import sys

sys.path.insert(0, ".")
import torch
from torch.utils.data import DataLoader


def loader(ds):
    return DataLoader(ds, batch_size=8)
""",
        after="""\
import sys
import os

sys.path.insert(0, ".")
import torch
from torch.utils.data import DataLoader

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


def loader(ds):
    return DataLoader(ds, batch_size=8, num_workers=DATALOADER_WORKERS, pin_memory=torch.cuda.is_available(), persistent_workers=DATALOADER_WORKERS > 0, prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None))
""",
    ),
    Example(
        "stateful_dataloader",
        before="""\
import torch
from torchdata.stateful_dataloader import StatefulDataLoader


class Recipe:
    def _setup_data(self, ds, sampler, batch_size, collate_fn):
        return StatefulDataLoader(
            dataset=ds,
            batch_size=batch_size,
            sampler=sampler,
            collate_fn=collate_fn,
            drop_last=True,
        )
""",
        after="""\
import torch
from torchdata.stateful_dataloader import StatefulDataLoader
import os

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


class Recipe:
    def _setup_data(self, ds, sampler, batch_size, collate_fn):
        return StatefulDataLoader(
            dataset=ds,
            batch_size=batch_size,
            sampler=sampler,
            collate_fn=collate_fn,
            drop_last=True,
            num_workers=DATALOADER_WORKERS,
            pin_memory=torch.cuda.is_available(),
            persistent_workers=DATALOADER_WORKERS > 0,
            prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None),
        )
""",
    ),
    Example(
        "loader_only_measured_for_a_step_count",
        before="""\
import math

from torch.utils.data import DataLoader


def total_steps(dataset, sampler, epochs):
    data_loader = DataLoader(dataset, batch_sampler=sampler)
    return math.floor(len(data_loader) * epochs)
""",
        refusal="the loader is only measured (`len(data_loader)` at line 8), never iterated",
    ),
    Example(
        "loader_measured_and_iterated",
        before="""\
import torch
from torch.utils.data import DataLoader


def train(model, dataset, optimizer):
    loader = DataLoader(dataset, batch_size=8)
    print(f"{len(loader)} steps")
    for batch in loader:
        model(batch).backward()
        optimizer.step()
""",
        after="""\
import torch
from torch.utils.data import DataLoader
import os

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


def train(model, dataset, optimizer):
    loader = DataLoader(dataset, batch_size=8, num_workers=DATALOADER_WORKERS, pin_memory=torch.cuda.is_available(), persistent_workers=DATALOADER_WORKERS > 0, prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None))
    print(f"{len(loader)} steps")
    for batch in loader:
        model(batch).backward()
        optimizer.step()
""",
    ),
    Example(
        "evaluation_loader_built_per_call",
        before="""\
from torch.utils.data import DataLoader


def eval_split(model, dataset):
    loader = DataLoader(dataset, batch_size=100, num_workers=0)
    correct = 0
    for b, (x, y) in enumerate(loader):
        correct += (model(x).argmax(-1) == y).sum().item()
    return correct / len(dataset)


def on_batch_end(trainer):
    if trainer.iter_num % 500 == 0:
        print(eval_split(trainer.model, trainer.test_dataset))
""",
        refusal="`eval_split()`, which evaluates and is called from `on_batch_end()`",
    ),
    Example(
        "loader_iterated_without_gradients",
        before="""\
import torch
from torch.utils.data import DataLoader


def score(model, dataset):
    loader = DataLoader(dataset, batch_size=64)
    scores = []
    with torch.no_grad():
        for batch in loader:
            scores.append(model(batch))
    return scores


class Sweep:
    def run(self, model, dataset):
        return [self.score(model, dataset) for _ in range(3)]

    def score(self, model, dataset):
        return score(model, dataset)
""",
        refusal="the loader is built at every call of `score()`",
    ),
    Example(
        "evaluation_script_entry_point",
        before="""\
import fire
import torch
from torch.utils.data import DataLoader


def calculate_ppl(model, dataset):
    loader = DataLoader(dataset, batch_size=4)
    with torch.no_grad():
        for batch in loader:
            print(model(batch).loss.exp())


if __name__ == "__main__":
    fire.Fire(calculate_ppl)
""",
        after="""\
import fire
import torch
from torch.utils.data import DataLoader
import os

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


def calculate_ppl(model, dataset):
    loader = DataLoader(dataset, batch_size=4, num_workers=DATALOADER_WORKERS, pin_memory=torch.cuda.is_available(), persistent_workers=DATALOADER_WORKERS > 0, prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None))
    with torch.no_grad():
        for batch in loader:
            print(model(batch).loss.exp())


if __name__ == "__main__":
    fire.Fire(calculate_ppl)
""",
    ),
    Example(
        "loop_trains_through_a_helper",
        before="""\
from torch.utils.data import DataLoader


def fit(model, dataset, step):
    loader = DataLoader(dataset, batch_size=8)
    for batch in loader:
        step(model, batch)


def fit_validated(model, dataset, optimizer):
    loader = DataLoader(dataset, batch_size=8)
    for batch in loader:
        model(batch).backward()
        optimizer.step()


def main(model, dataset, optimizer, step):
    fit(model, dataset, step)
    fit_validated(model, dataset, optimizer)
""",
        after="""\
from torch.utils.data import DataLoader
import os
import torch

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


def fit(model, dataset, step):
    loader = DataLoader(dataset, batch_size=8, num_workers=DATALOADER_WORKERS, pin_memory=torch.cuda.is_available(), persistent_workers=DATALOADER_WORKERS > 0, prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None))
    for batch in loader:
        step(model, batch)


def fit_validated(model, dataset, optimizer):
    loader = DataLoader(dataset, batch_size=8, num_workers=DATALOADER_WORKERS, pin_memory=torch.cuda.is_available(), persistent_workers=DATALOADER_WORKERS > 0, prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None))
    for batch in loader:
        model(batch).backward()
        optimizer.step()


def main(model, dataset, optimizer, step):
    fit(model, dataset, step)
    fit_validated(model, dataset, optimizer)
""",
    ),
    Example(
        "arguments_on_a_line_of_their_own",
        before="""\
from torch.utils.data import DataLoader


def train(model, dataset, optimizer):
    loader = DataLoader(
        dataset, shuffle=True, batch_size=8
    )
    for batch in loader:
        model(batch).backward()
        optimizer.step()
""",
        after="""\
from torch.utils.data import DataLoader
import os
import torch

# perfbot: data-loading worker processes; none on a one-core machine, where they only add overhead.
DATALOADER_WORKERS = min(4, (os.cpu_count() or 1) - 1)


def train(model, dataset, optimizer):
    loader = DataLoader(
        dataset, shuffle=True, batch_size=8, num_workers=DATALOADER_WORKERS, pin_memory=torch.cuda.is_available(), persistent_workers=DATALOADER_WORKERS > 0, prefetch_factor=(2 if DATALOADER_WORKERS > 0 else None)
    )
    for batch in loader:
        model(batch).backward()
        optimizer.step()
""",
    ),
    *SETTINGS_AND_DATASETS,
    Example(
        "kept_no_workers_with_a_reason",
        before="""\
from torch.utils.data import DataLoader


def main(dataset, model, optimizer):
    # no workers: the dataset holds an open LMDB handle that must not be forked
    loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=0)
    for batch in loader:
        model(batch).sum().backward()
        optimizer.step()


if __name__ == "__main__":
    main(None, None, None)
""",
        kept="must not be forked",
    ),
    Example(
        "kept_no_trainer_workers_with_a_reason",
        before="""\
from transformers import Trainer, TrainingArguments


def main(model, data):
    args = TrainingArguments(
        output_dir="out",
        dataloader_num_workers=0,  # workers deadlock with our tokenizer's threads
    )
    Trainer(model=model, args=args, train_dataset=data).train()
""",
        kept="workers deadlock",
    ),
    Example(
        "proposed_where_the_loop_replaces_each_batch",
        before="""\
import torch
from torch.utils.data import DataLoader


def get_dataloader(dataset):
    loader = DataLoader(dataset, batch_size=4, shuffle=True)
    return loader


def train(model, optimizer, dataset, data):
    loader = get_dataloader(dataset)
    for step, (inputs, targets) in enumerate(loader):
        inputs, targets = data.sample(4)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
""",
        proposal="replaces each batch of this loader before using it",
    ),
    Example(
        "proposed_where_a_generator_builds_the_batches_in_the_training_process",
        # eric-mitchell/direct-preference-optimization: the trainer iterates get_batch_iterator(...), which
        # tokenizes and collates every example itself.
        before="""\
from data import batches


class Trainer:
    def __init__(self, model, optimizer, tokenizer, texts):
        self.model, self.optimizer = model, optimizer
        self.train_iterator = batches(texts, tokenizer, batch_size=8)

    def train(self):
        for batch in self.train_iterator:
            self.model(**batch).loss.backward()
            self.optimizer.step()
""",
        files={
            "data.py": """\
def batches(texts, tokenizer, batch_size):
    for start in range(0, len(texts), batch_size):
        yield tokenizer(texts[start : start + batch_size], padding=True, return_tensors="pt")
""",
        },
        proposal="tokenizes and collates each batch in the training process",
    ),
)
