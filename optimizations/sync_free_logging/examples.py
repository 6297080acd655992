"""The before/after examples of ``sync_free_logging``: the three shapes of a per-step loss read it rewrites,
and the reads it leaves alone."""

from optimizations.registry import Example

EXAMPLES = (
    Example(
        "running_loss_accumulator",
        before="""\
def train(model, loader, optimizer, log_every):
    running_loss = 0.0
    for step, batch in enumerate(loader):
        loss = model(batch).mean()
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
        if step % log_every == 0:
            print(f"step {step} loss {running_loss / log_every:.4f}")
            running_loss = 0.0
    return running_loss
""",
        after="""\
def train(model, loader, optimizer, log_every):
    running_loss = 0.0
    for step, batch in enumerate(loader):
        loss = model(batch).mean()
        loss.backward()
        optimizer.step()
        running_loss += loss.detach().double()
        if step % log_every == 0:
            print(f"step {step} loss {float(running_loss) / log_every:.4f}")
            running_loss = 0.0
    return float(running_loss)
""",
    ),
    Example(
        "history_list_scaled_loss_multiline_log",
        before="""\
import logging as log_lib

logger = log_lib.getLogger(__name__)


def train(model, loader, optimizer, scaler, log_every=10):
    history = []
    for step, (inputs, labels) in enumerate(loader):
        loss = model(inputs, labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        history.append(float(loss.detach()))  # one value per step
        if step % log_every == 0:
            logger.info(
                "step %d loss %.4f",  # the latest step
                step,
                history[-1],
            )
    return sum(history) / len(history)
""",
        after="""\
import logging as log_lib

logger = log_lib.getLogger(__name__)


def train(model, loader, optimizer, scaler, log_every=10):
    history = []
    for step, (inputs, labels) in enumerate(loader):
        loss = model(inputs, labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        history.append(loss.detach())  # one value per step
        if step % log_every == 0:
            logger.info(
                "step %d loss %.4f",  # the latest step
                step,
                float(history[-1]),
            )
    history = [float(value) for value in history]
    return sum(history) / len(history)
""",
    ),
    Example(
        "last_value_read_at_the_end",
        before="""\
def train(model, loader, optimizer):
    for batch in loader:
        loss = model(batch)
        loss.backward()
        optimizer.step()
        last = loss.item()
    print(f"final loss {last:.3f}")
""",
        after="""\
def train(model, loader, optimizer):
    for batch in loader:
        loss = model(batch)
        loss.backward()
        optimizer.step()
        last = loss.detach()
    print(f"final loss {float(last):.3f}")
""",
    ),
    Example(
        "proposal_metrics_copied_to_the_host_every_step",
        before="""\
def batch_metrics(policy, batch):
    loss, rewards = policy(batch)
    return loss, {"rewards": rewards.cpu().numpy().tolist()}


def train(policy, loader, optimizer, history):
    for step, batch in enumerate(loader):
        loss, metrics = batch_metrics(policy, batch)
        loss.backward()
        optimizer.step()
        history.append(metrics)
""",
        proposal="outside the logging condition",
    ),
    Example(
        "proposal_trainer_subclass_metrics_on_the_host",
        before="""\
from transformers import Trainer


class PreferenceTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False):
        loss, chosen = model(**inputs)
        self.store_metrics({"rewards/chosen": chosen.mean().cpu()})
        return loss
""",
        proposal="outside the logging condition",
    ),
    Example(
        "already_read_where_the_step_loop_logs",
        before="""\
def train(model, get_batch, optimizer, steps, accumulation, log_interval):
    for step in range(steps):
        for micro_step in range(accumulation):
            loss = model(get_batch()) / accumulation
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % log_interval == 0:
            print(f"step {step}: loss {loss.item() * accumulation:.4f}")
""",
    ),
    Example(
        "already_reads_only_when_logging",
        before="""\
def train(model, loader, optimizer, log_every):
    for step, batch in enumerate(loader):
        loss = model(batch)
        loss.backward()
        optimizer.step()
        if step % log_every == 0:
            print(step, loss.item())
""",
    ),
    Example(
        "refuses_progress_bar_every_step",
        before="""\
from tqdm import tqdm


def train(model, loader, optimizer):
    progress = tqdm(loader)
    for batch in progress:
        loss = model(batch)
        loss.backward()
        optimizer.step()
        progress.set_postfix(loss=loss.item())
""",
        refusal="outside the loop's logging condition; move it under the `if` that logs",
    ),
    Example(
        "refuses_value_used_every_step",
        before="""\
import math


def train(model, loader, optimizer):
    for batch in loader:
        loss = model(batch)
        loss.backward()
        value = loss.item()
        if not math.isfinite(value):
            raise RuntimeError("loss diverged")
        optimizer.step()
""",
        refusal="is read every step",
    ),
)
