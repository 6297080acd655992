"""experiments/calibration/startup.py: a program's start-up sampled until its model's N-th training forward."""

from __future__ import annotations

import json
import sys

import torch

from experiments.calibration import startup

PROGRAM = """\
import time

import torch


def load_everything():
    time.sleep(0.3)
    return torch.nn.Linear(4, 1)


model = load_everything()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    print("step", step, flush=True)
    with torch.no_grad():
        model(torch.ones(2, 4))  # an evaluation forward does not count
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
"""


def test_the_sampler_stops_at_the_wanted_training_forward_and_names_what_took_the_time(
    tmp_path, capsys, monkeypatch
):
    script = tmp_path / "train.py"
    script.write_text(PROGRAM)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # the program is run as python would run it
    monkeypatch.setattr(sys, "path", list(sys.path))
    out = tmp_path / "startup.json"
    assert startup.main(["--out", str(out), "--forwards", "2", "--", "python", str(script)]) == 0
    report = json.loads(out.read_text())
    assert report["outcome"] == "training forward 2 began"
    printed = capsys.readouterr().out
    assert printed.count("step ") == 2  # stopped inside the second step, before its backward
    loading = [s for name, s in report["cumulative_s"].items() if name.endswith("(load_everything)")]
    assert loading and 0.2 < loading[0] < 2.0  # the 0.3 s sleep, weighted by time between samples
    assert report["wall_s"] >= loading[0]
    hooks = torch.nn.modules.module._global_forward_pre_hooks
    assert not hooks  # the stopping hook is gone again
