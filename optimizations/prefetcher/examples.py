"""The before/after examples of ``prefetcher``: loops it prefetches, Trainer configs it makes non-blocking, and
the ones it leaves alone."""

from optimizations.registry import Example

EXAMPLES = (
    Example(
        "loop_over_dataloader",
        before="""\
import torch
from torch.utils.data import DataLoader


def train(model, dataset, optimizer, device):
    loader = DataLoader(dataset, batch_size=64, shuffle=True)
    for batch in loader:
        images = batch["images"].to(device)
        labels = batch["labels"].to(device, non_blocking=True)
        loss = model(images, labels)
        loss.backward()
        optimizer.step()
""",
        after="""\
import torch
from torch.utils.data import DataLoader
from _perfbot_prefetcher import CudaPrefetcher, NumpyPinnedCollate


def train(model, dataset, optimizer, device):
    loader = DataLoader(dataset, batch_size=64, shuffle=True, pin_memory=torch.cuda.is_available(), collate_fn=NumpyPinnedCollate())
    for batch in CudaPrefetcher(loader, device):
        images = batch["images"]
        labels = batch["labels"]
        loss = model(images, labels)
        loss.backward()
        optimizer.step()
""",
    ),
    Example(
        "aliased_enumerate_dict_comprehension_multiline",
        before="""\
import torch.utils.data as tud


def train(model, dataset, optimizer, collate, args):
    loader = tud.DataLoader(
        dataset,  # tokenized examples
        batch_size=args.batch_size,
        collate_fn=collate,
    )
    for step, batch in enumerate(loader, start=1):
        batch = {key: value.to(args.device) for key, value in batch.items()}
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
""",
        after="""\
import torch.utils.data as tud
import torch
from _perfbot_prefetcher import CudaPrefetcher


def train(model, dataset, optimizer, collate, args):
    loader = tud.DataLoader(
        dataset,  # tokenized examples
        batch_size=args.batch_size,
        collate_fn=collate,
        pin_memory=torch.cuda.is_available(),
    )
    for step, batch in enumerate(CudaPrefetcher(loader, args.device), start=1):
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
""",
    ),
    Example(
        "tuple_batch_under_tqdm",
        before="""\
from tqdm.auto import tqdm


def train(model, loader, optimizer, device):
    for inputs, labels in tqdm(loader):
        inputs = inputs.to(device)
        labels = labels.to(device=device, non_blocking=True)
        loss = model(inputs, labels)
        loss.backward()
        optimizer.step()
""",
        after="""\
from tqdm.auto import tqdm
from _perfbot_prefetcher import CudaPrefetcher


def train(model, loader, optimizer, device):
    for inputs, labels in tqdm(CudaPrefetcher(loader, device)):
        loss = model(inputs, labels)
        loss.backward()
        optimizer.step()
""",
    ),
    Example(
        "library_batch_to_device_in_place",
        before="""\
from torchtune import utils


class Recipe:
    def __init__(self, model, loader, optimizer, device):
        self._model, self._loader, self._optimizer = model, loader, optimizer
        self._device = utils.get_device(device)

    def train(self):
        for step, batch in enumerate(self._loader):
            utils.batch_to_device(batch, self._device)
            tokens = (batch["labels"] != -100).sum()
            loss = self._model(**batch) / tokens
            loss.backward()
            self._optimizer.step()
""",
        after="""\
from torchtune import utils
from _perfbot_prefetcher import CudaPrefetcher


class Recipe:
    def __init__(self, model, loader, optimizer, device):
        self._model, self._loader, self._optimizer = model, loader, optimizer
        self._device = utils.get_device(device)

    def train(self):
        for step, batch in enumerate(CudaPrefetcher(self._loader, self._device)):
            tokens = (batch["labels"] != -100).sum()
            loss = self._model(**batch) / tokens
            loss.backward()
            self._optimizer.step()
""",
    ),
    Example(
        "trainer_config_only_a_repository_helper_reads",
        before="""\
from transformers import Seq2SeqTrainingArguments

from data import get_dataset


def infer(engine, template):
    training_args = Seq2SeqTrainingArguments(output_dir="dummy_dir")
    return engine.generate(get_dataset(template, training_args)["train"])
""",
        files={
            "data.py": """\
def get_dataset(template, training_args):
    with training_args.main_process_first(desc="load dataset"):
        return {"train": [template.format(i) for i in range(training_args.seed)]}
""",
        },
    ),
    Example(
        "trainer_config_a_library_builds_for_callers_without_one",
        before="""\
from trl import SFTConfig, SFTTrainer


class ChatTrainer(SFTTrainer):
    def __init__(self, model, train_dataset, *, args: SFTConfig | None = None):
        if args is None:
            name = model.config._name_or_path.split("/")[-1]
            args = SFTConfig(f"{name}-chat", packing=True)
        super().__init__(model=model, args=args, train_dataset=train_dataset)
""",
    ),
    Example(
        "trainer_config_non_blocking",
        before="""\
from transformers import TrainingArguments as TA


def build(out):
    return TA(
        output_dir=out,
        bf16=True,  # H100
    )
""",
        after="""\
from transformers import TrainingArguments as TA


def build(out):
    return TA(
        output_dir=out,
        bf16=True,  # H100
        accelerator_config={"non_blocking": True},
    )
""",
    ),
    Example(
        "already_prefetched",
        before="""\
from _perfbot_prefetcher import CudaPrefetcher


def train(model, loader, optimizer, device):
    for batch in CudaPrefetcher(loader, device):
        loss = model(batch["x"], batch["y"])
        loss.backward()
        optimizer.step()
""",
    ),
    Example(
        "refuses_batch_read_on_host",
        before="""\
def train(model, loader, optimizer, device):
    for batch in loader:
        lengths = batch["lengths"].tolist()
        inputs = batch["inputs"].to(device)
        loss = model(inputs, lengths)
        loss.backward()
        optimizer.step()
""",
        refusal="used on the host",
    ),
)
