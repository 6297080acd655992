"""compile_model follows a model passed in as a parameter to the calls of the training function, in its own
file and in the files that import it; a model already compiled is already done; modules that differ refuse."""

from __future__ import annotations

from optimizations.program.repository import RepoContext
from optimizations.registry import registry

TRAINING = """\
import torch


def loss_of(net, inputs, targets):
    return torch.nn.functional.mse_loss(net(inputs), targets)


def train(net, loader, opt, steps):
    history = []
    for inputs, targets in loader:
        opt.zero_grad()
        loss = loss_of(net, inputs, targets)
        loss.backward()
        opt.step()
        history.append(loss.item())
    return history
"""


def _apply(tmp_path, files: dict[str, str], path: str = "training.py"):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return registry()["compile_model"].transform_source(files[path], path, RepoContext(tmp_path))


def test_the_module_a_script_passes_in_is_compiled_at_the_top_of_the_function(tmp_path):
    script = """\
import torch

from training import train as fit


def main(make, loader):
    regressor = make()
    optimizer = torch.optim.SGD(regressor.parameters(), lr=0.1)
    fit(regressor, loader, optimizer, steps=10)
"""
    result = _apply(tmp_path, {"training.py": TRAINING, "run.py": script})
    assert "    compile_model(net)\n    history = []" in result.source
    assert [s.applicable for s in result.sites] == [True]
    compile(result.source, "training.py", "exec")


def test_a_model_compiled_by_the_caller_in_the_same_file_is_already_done(tmp_path):
    source = (
        TRAINING
        + """

def main(make, loader):
    model = torch.compile(make())
    train(model, loader, torch.optim.SGD(model.parameters(), lr=0.1), steps=3)
"""
    )
    result = _apply(tmp_path, {"training.py": source})
    assert result.source == source
    line = source.splitlines().index("    model = torch.compile(make())") + 1
    assert [(s.already, s.line) for s in result.sites] == [(True, line)]


def test_without_callers_the_parameter_used_as_a_module_is_the_model(tmp_path):
    source = TRAINING.replace("    history = []\n", "    net.train()\n    history = []\n")
    result = _apply(tmp_path, {"training.py": source})
    assert "    compile_model(net)\n    net.train()" in result.source


def test_without_callers_or_module_use_the_refusal_says_why(tmp_path):
    result = _apply(tmp_path, {"training.py": TRAINING})
    assert result.source == TRAINING
    (site,) = result.sites
    assert (
        site.refused
        and "no call of train() (defined at line 8) passes it the module its optimizer steps" in site.reason
    )
    assert TRAINING.splitlines()[site.line - 1].strip().startswith("for inputs, targets in loader")


def test_callers_that_train_different_parameters_refuse(tmp_path):
    training = """\
def distil(student, teacher, loader, opt):
    for x in loader:
        loss = (student(x) - teacher(x)).pow(2).mean()
        loss.backward()
        opt.step()
"""
    script = """\
import torch

from training import distil


def main(small, large, loader):
    distil(small, large, loader, torch.optim.SGD(small.parameters(), lr=0.1))
    distil(small, large, loader, torch.optim.SGD(large.parameters(), lr=0.1))
"""
    result = _apply(tmp_path, {"training.py": training, "run.py": script})
    (site,) = result.sites
    assert site.refused and "several modules reach the loop" in site.reason
    assert (
        "`student` gets `small` of main() in run.py" in site.reason
        and "`teacher` gets `large`" in site.reason
    )


def test_a_second_pass_reports_the_compiled_model_as_already_done(tmp_path):
    source = TRAINING.replace("    history = []\n", "    net.train()\n    history = []\n")
    once = _apply(tmp_path, {"training.py": source}).source
    again = _apply(tmp_path, {"training.py": once})
    assert again.source == once
    assert [(s.already, "compile_model(net)" in s.message) for s in again.sites] == [(True, True)]


def test_an_optimizer_built_in_either_branch_and_wrapped_still_names_its_module(tmp_path):
    """litgpt's finetune scripts: the optimizer comes from one of two factories over `model.parameters()`, then
    `fabric.setup_optimizers` wraps it; the module is still the one whose parameters built it."""
    script = """\
import torch

from training import train as fit


def main(make, loader, fabric, low_memory):
    regressor = make()
    if low_memory:
        optimizer = torch.optim.SGD(regressor.parameters(), lr=0.1)
    else:
        optimizer = torch.optim.AdamW(regressor.parameters(), lr=0.1)
    optimizer = fabric.setup_optimizers(optimizer)
    fit(regressor, loader, optimizer, steps=10)
"""
    result = _apply(tmp_path, {"training.py": TRAINING, "run.py": script})
    assert "    compile_model(net)\n    history = []" in result.source
