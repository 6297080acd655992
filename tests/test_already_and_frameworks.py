"""An already-optimized from-scratch repository reports each optimization as already done, with true reasons; a
framework-driven loop gets its framework's precision setting as the site, never an autocast inside it; and a
vendored library's own training loop that the program never calls is no site."""

from __future__ import annotations

import textwrap

import pytest

from optimizations.program.reachability import Program
from optimizations.program.repository import RepoContext
from optimizations.registry import get

# A GPT-style script that already runs TF32, bf16 autocast (float16 where bf16 is missing, with the scaler that
# needs) and fused AdamW: every choice made through module-level names, as such scripts do.
OPTIMIZED_TRAIN = """\
import contextlib
import torch
from net import TinyNet

torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
precision = "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float16"
steps = 10
device = "cuda"
kind = "cuda" if "cuda" in device else "cpu"
cast_to = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[precision]
amp = contextlib.nullcontext() if kind == "cpu" else torch.amp.autocast(device_type=kind, dtype=cast_to)

net = TinyNet().to(device)
scaler = torch.cuda.amp.GradScaler(enabled=(precision == "float16"))
opt = net.make_optimizer(3e-4, kind)
for step in range(steps):
    batch = torch.randn(4, 16, device=device)
    with amp:
        out = net(batch)
        loss = out.square().mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
"""

OPTIMIZED_NET = """\
import inspect
import torch


class TinyNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(16, 16)

    def forward(self, x):
        return self.layer(x)

    def make_optimizer(self, lr, kind):
        groups = [{"params": [p for p in self.parameters() if p.dim() >= 2], "weight_decay": 0.1}]
        can_fuse = "fused" in inspect.signature(torch.optim.AdamW).parameters
        options = dict(fused=True) if can_fuse and kind == "cuda" else dict()
        return torch.optim.AdamW(groups, lr=lr, **options)
"""


def _repo(tmp_path, files: dict[str, str]):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    return tmp_path


def _sites(optimization: str, root):
    return get(optimization).find(root)


def test_already_optimized_script_is_already_done_everywhere(tmp_path):
    root = _repo(tmp_path, {"train.py": OPTIMIZED_TRAIN, "net.py": OPTIMIZED_NET})
    expected = {
        "tf32": ("train.py", 5, "TF32 on (`torch.backends.cuda.matmul.allow_tf32 = True`)"),
        "bf16_autocast": (
            "train.py",
            19,
            "autocast to bfloat16 (`with amp:`; dtype `cast_to` is bfloat16 or float16)",
        ),
        "fused_adamw": ("net.py", 17, "fused (`fused=True` through `**options`)"),
    }
    for optimization, (path, line, message) in expected.items():
        sites = _sites(optimization, root)
        assert [(s.path, s.line, s.already) for s in sites] == [(path, line, True)], (optimization, sites)
        assert message in sites[0].message
        assert not get(optimization).dry_run(root).files


def test_a_scaler_that_can_scale_blocks_bf16_and_says_where(tmp_path):
    train = OPTIMIZED_TRAIN.replace(
        "    with amp:\n        out = net(batch)\n        loss", "    out = net(batch)\n    loss"
    )
    root = _repo(
        tmp_path, {"train.py": train.replace("        loss = out", "    loss = out"), "net.py": OPTIMIZED_NET}
    )
    (site,) = _sites("bf16_autocast", root)
    assert site.refused and "GradScaler at line 15" in site.reason


def test_a_scaler_that_is_never_enabled_is_no_reason(tmp_path):
    train = """\
    import torch

    scaler = torch.cuda.amp.GradScaler(enabled=False)


    def train(model, loader, opt):
        for x in loader:
            loss = model(x).mean()
            scaler.scale(loss).backward()
            scaler.step(opt)
    """
    root = _repo(tmp_path, {"train.py": train})
    (site,) = _sites("bf16_autocast", root)
    assert site.applicable


def test_float16_autocast_is_refused_with_its_dtype(tmp_path):
    train = OPTIMIZED_TRAIN.replace(
        '"bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else ', ""
    )
    root = _repo(tmp_path, {"train.py": train, "net.py": OPTIMIZED_NET})
    (site,) = _sites("bf16_autocast", root)
    assert site.refused and "already autocasts at line 19 (`amp`, to float16)" in site.reason


def test_fused_adamw_beside_a_splat_without_it(tmp_path):
    net = OPTIMIZED_NET.replace(
        'dict(fused=True) if can_fuse and kind == "cuda" else dict()', "dict(betas=(0.9, 0.95))"
    )
    root = _repo(tmp_path, {"train.py": OPTIMIZED_TRAIN, "net.py": net})
    change = get("fused_adamw").dry_run(root)
    assert [s.applicable for s in change.sites] == [True]
    assert "**options, fused=fused_optimizer_supported(groups))" in change.files["net.py"]


ACCELERATE_LOOP = """\
import torch
from accelerate import Accelerator


def main():
    accelerator = Accelerator({setting})
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = [torch.randn(4, 8) for _ in range(3)]
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        loss = model(batch).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    main()
"""


def test_accelerate_gets_mixed_precision_not_an_autocast(tmp_path):
    root = _repo(tmp_path, {"train.py": ACCELERATE_LOOP.format(setting="gradient_accumulation_steps=2")})
    change = get("bf16_autocast").dry_run(root)
    (site,) = change.sites
    assert site.applicable and site.line == 6
    edited = change.files["train.py"]
    assert (
        "Accelerator(gradient_accumulation_steps=2, mixed_precision=bf16_unless_launched_otherwise())"
        in edited
    )
    assert "autocast" not in edited
    compile(edited, "train.py", "exec")
    (root / "train.py").write_text(edited)  # perfbot's own setting, read again: already done
    (again,) = get("bf16_autocast").find(root)
    assert again.already and "unless the launch chose one" in again.message


@pytest.mark.parametrize(
    ("launched", "supported", "expected"),
    [
        (None, True, "bf16"),
        ("no", True, "bf16"),
        ("fp8", True, None),
        ("FP16", True, None),
        (None, False, None),
    ],
)
def test_accelerate_keeps_the_precision_its_launch_chose(monkeypatch, launched, supported, expected):
    from optimizations.runtime import precision

    monkeypatch.setattr(precision, "bf16_supported", lambda: supported)
    if launched is None:
        monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    else:
        monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", launched)
    assert precision.bf16_unless_launched_otherwise() == expected


@pytest.mark.parametrize(
    ("setting", "already", "reason"),
    [
        ('mixed_precision="bf16"', True, ""),
        ('mixed_precision="fp16"', False, 'mixed_precision="fp16"` at line 6: float16 mixed precision'),
        ("mixed_precision=args.precision", False, "comes from the run's arguments"),
        ('mixed_precision="no"', False, 'mixed_precision="no"` is set explicitly at line 6'),
    ],
)
def test_accelerate_setting_already_chosen(tmp_path, setting, already, reason):
    root = _repo(tmp_path, {"train.py": ACCELERATE_LOOP.format(setting=setting)})
    (site,) = _sites("bf16_autocast", root)
    assert site.already is already
    assert reason in site.reason


def test_accelerate_launch_config_owns_the_setting(tmp_path):
    files = {
        "train.py": ACCELERATE_LOOP.format(setting=""),
        "configs/accelerate.yaml": "compute_environment: LOCAL_MACHINE\n# precision below\nmixed_precision: fp16\n",
    }
    (site,) = _sites("bf16_autocast", _repo(tmp_path, files))
    assert site.refused
    assert (
        "config of the repository sets it at configs/accelerate.yaml:3 (`mixed_precision: fp16`)"
        in site.reason
    )
    (tmp_path / "run.sh").write_text("accelerate launch --mixed_precision=fp16 train.py\n")
    (site,) = _sites("bf16_autocast", tmp_path)
    assert (
        "launch command at run.sh:1 sets it (`accelerate launch --mixed_precision=fp16 train.py`)"
        in site.reason
    )


def test_a_launch_config_beside_another_example_does_not_own_this_one(tmp_path):
    """huggingface/peft's examples: the DeepSpeed launch config in `examples/causal_language_modeling/` was taken
    to own the precision of every example in the repository."""
    config = "compute_environment: LOCAL_MACHINE\nmixed_precision: fp16\n"
    files = {
        "examples/glora/train.py": ACCELERATE_LOOP.format(setting=""),
        "examples/clm/accelerate_config.yaml": config,
    }
    (site,) = _sites("bf16_autocast", _repo(tmp_path, files))
    assert site.applicable and not site.refused
    (tmp_path / "examples/glora/run.sh").write_text(
        "accelerate launch --config_file ../clm/accelerate_config.yaml train.py\n"
    )
    (site,) = _sites("bf16_autocast", tmp_path)
    assert site.refused and "examples/clm/accelerate_config.yaml:2" in site.reason


def test_framework_backward_without_its_setup_in_the_file_is_not_wrapped(tmp_path):
    loop = """\
    def fit(accelerator, model, loader, optimizer):
        for batch in loader:
            loss = model(batch).mean()
            accelerator.backward(loss)
            optimizer.step()
    """
    (site,) = _sites("bf16_autocast", _repo(tmp_path, {"loop.py": loop}))
    assert site.refused and "`accelerator.backward(loss)` at line 4" in site.reason


LIGHTNING = """\
import lightning as L
from lightning.fabric import Fabric


def run(module, data):
    trainer = L.Trainer(max_epochs=1{trainer})
    trainer.fit(module, data)
    fabric = Fabric(accelerator="cuda"{fabric})
    fabric.launch()
"""


def test_lightning_trainer_and_fabric_get_bf16_mixed(tmp_path):
    root = _repo(tmp_path, {"fit.py": LIGHTNING.format(trainer="", fabric="")})
    change = get("bf16_autocast").dry_run(root)
    assert [(s.line, s.applicable) for s in change.sites] == [(6, True), (8, True)]
    edited = change.files["fit.py"]
    assert 'L.Trainer(max_epochs=1, precision=("bf16-mixed" if bf16_supported() else "32-true"))' in edited
    assert 'Fabric(accelerator="cuda", precision=("bf16-mixed" if bf16_supported() else "32-true"))' in edited


def test_lightning_precision_already_set(tmp_path):
    source = LIGHTNING.format(trainer=', precision="bf16-mixed"', fabric=", precision=16")
    sites = _sites("bf16_autocast", _repo(tmp_path, {"fit.py": source}))
    assert [(s.line, s.already) for s in sites] == [(6, True), (8, False)]
    assert "`precision=16` at line 8: float16 mixed precision" in sites[1].reason


DEEPSPEED = """\
import deepspeed


def main(model):
    ds_config = {config}
    engine, optimizer, _, _ = deepspeed.initialize(model=model, config=ds_config)
    for batch in range(3):
        loss = engine(batch)
        engine.backward(loss)
        engine.step()


if __name__ == "__main__":
    main(None)
"""


def test_deepspeed_dict_config_gets_a_bf16_section(tmp_path):
    root = _repo(
        tmp_path,
        {"ds.py": DEEPSPEED.format(config='{"train_batch_size": 8, "zero_optimization": {"stage": 2}}')},
    )
    change = get("bf16_autocast").dry_run(root)
    (site,) = change.sites
    assert site.applicable and site.line == 5
    edited = change.files["ds.py"]
    assert '"zero_optimization": {"stage": 2}, "bf16": {"enabled": bf16_supported()}}' in edited
    assert "autocast" not in edited


def test_deepspeed_dict_call_config_gets_a_bf16_keyword(tmp_path):
    root = _repo(tmp_path, {"ds.py": DEEPSPEED.format(config="dict(train_batch_size=8)")})
    change = get("bf16_autocast").dry_run(root)
    (site,) = change.sites
    assert site.applicable and site.line == 5
    assert 'dict(train_batch_size=8, bf16={"enabled": bf16_supported()})' in change.files["ds.py"]


def test_deepspeed_fp16_config_and_json_config(tmp_path):
    root = _repo(tmp_path, {"ds.py": DEEPSPEED.format(config='{"fp16": {"enabled": True}}')})
    (site,) = _sites("bf16_autocast", root)
    assert site.refused and "enables fp16 at line 5" in site.reason

    json_root = tmp_path / "json"
    files = {
        "ds.py": DEEPSPEED.format(config='"ds_config.json"'),
        "ds_config.json": '{"bf16": {"enabled": true}}',
    }
    (site,) = _sites("bf16_autocast", _repo(json_root, files))
    assert site.already and site.path == "ds_config.json"


VENDORED_TRAINER = """\
import torch


def train(model, loader, optimizer):
    torch.backends.cuda.matmul.allow_tf32 = False
    for x in loader:
        loss = model(x).mean()
        loss.backward()
        optimizer.step()
"""

PROGRAM = """\
import torch
from accelerate import Accelerator
from third_party.somelib.layers import Block


def unused_loop(model, loader, optimizer):
    for x in loader:
        model(x).mean().backward()
        optimizer.step()


def main():
    accelerator = Accelerator()
    model = Block()
    optimizer = torch.optim.AdamW(model.parameters())
    model, optimizer = accelerator.prepare(model, optimizer)
    for x in range(3):
        accelerator.backward(model(x).mean())
        optimizer.step()


if __name__ == "__main__":
    main()
"""


def _vendored_repo(tmp_path):
    return _repo(
        tmp_path,
        {
            "run.py": PROGRAM,
            "third_party/somelib/setup.py": "from setuptools import setup\n\nsetup(name='somelib')\n",
            "third_party/somelib/__init__.py": "",
            "third_party/somelib/layers.py": "import torch\n\nBlock = torch.nn.Identity\n",
            "third_party/somelib/trainer.py": VENDORED_TRAINER,
            "third_party/somelib/cli.py": "from trainer import train\n\nif __name__ == '__main__':\n    train(None, [], None)\n",
        },
    )


def test_vendored_library_loop_the_program_never_calls_is_no_site(tmp_path):
    root = _vendored_repo(tmp_path)
    program = Program(RepoContext(root))
    assert program.entry_points == ["run.py"]
    assert program.runs("third_party/somelib/layers.py")
    assert not program.runs("third_party/somelib/trainer.py")
    assert program.runs("run.py", "main") and not program.runs("run.py", "unused_loop")
    for optimization in ("bf16_autocast", "tf32", "fused_adamw", "sync_free_logging", "prefetcher"):
        paths = {s.path for s in _sites(optimization, root)}
        assert not paths & {"third_party/somelib/trainer.py"}, optimization
    (bf16,) = _sites("bf16_autocast", root)
    assert (bf16.path, bf16.line, bf16.applicable) == ("run.py", 13, True)
    tf32 = _sites("tf32", root)
    assert [(s.path, s.applicable) for s in tf32] == [("run.py", True)]


def test_a_launch_script_makes_an_entry_point(tmp_path):
    root = _vendored_repo(tmp_path)
    (root / "scripts").mkdir()
    (root / "scripts" / "pretrain.sh").write_text(
        "#!/bin/sh\npython third_party/somelib/cli.py --lr 1  # go\n"
    )
    program = Program(RepoContext(root))
    assert program.entry_points == ["run.py", "third_party/somelib/cli.py"]
    assert program.runs("third_party/somelib/trainer.py", "train")
    assert "third_party/somelib/trainer.py" in {s.path for s in _sites("tf32", root) if s.refused}


REFERENCE_SFT = """\
from transformers import AutoModelForCausalLM
from trl import SFTConfig


def main():
    model = AutoModelForCausalLM.from_pretrained("org/model")
    return model, SFTConfig(output_dir="out")


if __name__ == "__main__":
    main()
"""


def test_a_vendored_codebase_is_edited_only_where_the_program_runs_it(tmp_path):
    root = _vendored_repo(tmp_path)
    (root / "external" / "recipes").mkdir(parents=True)
    (root / "external" / "recipes" / "sft.py").write_text(REFERENCE_SFT)
    (root / "ours").mkdir()
    (root / "ours" / "sft.py").write_text(REFERENCE_SFT)
    (root / "packages" / "trainer").mkdir(
        parents=True
    )  # a workspace member: a project file, not vendored code
    (root / "packages" / "trainer" / "pyproject.toml").write_text('[project]\nname = "trainer"\n')
    (root / "packages" / "trainer" / "sft.py").write_text(REFERENCE_SFT)
    ours = {"ours/sft.py", "packages/trainer/sft.py"}
    for optimization in ("dataloader_workers", "fa2"):
        assert {s.path for s in _sites(optimization, root)} == ours, optimization
    assert get("dataloader_workers").dry_run(root).files.keys() == ours

    (root / "run_reference.sh").write_text("#!/bin/sh\npython external/recipes/sft.py\n")
    for optimization in ("dataloader_workers", "fa2"):
        assert {s.path for s in _sites(optimization, root)} == {*ours, "external/recipes/sft.py"}


def test_scripts_kept_in_a_snapshot_folder_are_edited_only_where_a_launch_runs_them(tmp_path):
    # KellerJordan/modded-nanogpt: run.sh launches train_gpt.py; records/<track>/<date>_<name>/ keep each
    # record's script as it ran, with a main guard and config YAMLs of their own
    record = "records/track_1/2024-10-09_SOAP/train_gpt2.py"
    root = _repo(
        tmp_path,
        {
            "run.py": PROGRAM,
            "run.sh": "torchrun --standalone --nproc_per_node=8 run.py\n",
            record: PROGRAM,
            "legacy/snli/train.py": PROGRAM,
            "records/track_1/2024-10-09_SOAP/optimizer/adamw.yaml": "optim:\n  _target_: torch.optim.AdamW\n",
            "records/track_1/2024-10-09_SOAP/build.py": "from hydra.utils import instantiate\n\ninstantiate(cfg)\n",
            "records/track_1/2024-10-09_SOAP/run.sh": "#!/bin/sh\npython train_gpt2.py\n",
        },
    )
    program = Program(RepoContext(root))
    assert program.entry_points == ["run.py"]
    for optimization in ("bf16_autocast", "tf32", "fused_adamw"):
        assert {s.path for s in _sites(optimization, root)} == {"run.py"}, optimization
    assert get("tf32").dry_run(root).files.keys() == {"run.py", "_perfbot_gpu_flags.py"}
    edited = get("fused_adamw").dry_run(root).files.keys()
    assert edited == {"run.py", "_perfbot_gpu_flags.py"}  # the record's optimizer config is not edited either
    (root / "reproduce.sh").write_text(f"#!/bin/sh\npython {record}\n")  # a launch file runs the record
    assert {s.path for s in _sites("tf32", root)} == {"run.py", record}


def test_a_deepspeed_optimizer_block_written_in_code_is_fused_already(tmp_path):
    strategy = """\
    import deepspeed


    def setup(model, loader, lr, offload):
        optim = {"type": "AdamW", "params": {"lr": lr, "betas": [0.9, 0.95]}}
        config = {"zero_optimization": {"stage": 2}, "optimizer": optim}
        engine, _, _, _ = deepspeed.initialize(model=model, config=config)
        for batch in loader:
            engine.backward(engine(batch))
            engine.step()
    """
    root = _repo(tmp_path, {"train.py": strategy})
    assert [(s.line, s.already) for s in _sites("fused_adamw", root)] == [(5, True)]
    torch_adam = strategy.replace('"betas": [0.9, 0.95]', '"torch_adam": True')
    assert _sites("fused_adamw", _repo(tmp_path, {"train.py": torch_adam})) == []


def test_an_option_default_of_a_dotted_flag_reports_the_setting_done(tmp_path):
    cli = """\
    import argparse

    import torch
    from transformers import AutoModelForCausalLM


    def train(args):
        model = AutoModelForCausalLM.from_pretrained(args.model, attn_implementation=args.ds.attn)
        optimizer = torch.optim.AdamW(model.parameters(), fused=True)
        for batch in range(3):
            model(batch).loss.backward()
            optimizer.step()


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--ds.attn_implementation", default="flash_attention_2")
        train(parser.parse_args())
    """
    root = _repo(tmp_path, {"train.py": cli})
    done = {s.line: s.message for s in _sites("fa2", root) if s.already}
    assert "--ds.attn_implementation default 'flash_attention_2'" in done[17]


def test_an_adam_update_the_program_compiles_itself_is_fused_already(tmp_path):
    optim = """\
    import torch


    @torch.compile(fullgraph=True)
    def adamw_step_fused(p, grad, exp_avg, exp_avg_sq, lr):
        exp_avg.lerp_(grad, 0.1)
        exp_avg_sq.lerp_(grad.square(), 0.001)
        p.add_(exp_avg / (exp_avg_sq.sqrt() + 1e-8), alpha=-lr)


    def train(model, loader, states):
        for batch in loader:
            model(batch).backward()
            for p, (m, v) in zip(model.parameters(), states):
                adamw_step_fused(p, p.grad, m, v, 1e-3)
    """
    root = _repo(tmp_path, {"train.py": optim})
    assert [(s.line, s.already) for s in _sites("fused_adamw", root)] == [(5, True)]
    uncompiled = optim.replace("@torch.compile(fullgraph=True)", "@torch.no_grad()")
    assert _sites("fused_adamw", _repo(tmp_path, {"train.py": uncompiled})) == []


def test_attention_picked_by_a_probing_function_of_the_program_is_already_chosen(tmp_path):
    from optimizations.fa2.examples_kept import KEPT

    (example,) = [e for e in KEPT if e.name == "already_picked_at_run_time_by_a_function_of_the_program"]
    root = _repo(tmp_path, {"train.py": example.before, **example.files})
    (site,) = _sites("fa2", root)
    assert site.already and "attention.detect_implementation()" in site.message
    unprobed = example.files["lib/attention.py"].replace(
        "transformers.utils.is_flash_attn_2_available()", "True"
    )
    (site,) = _sites("fa2", _repo(tmp_path, {"lib/attention.py": unprobed}))
    assert not site.already and "does not guess" in site.reason


@pytest.mark.parametrize(("gate", "already"), [("if trainer.iter_num % 10 == 0:", True), ("if True:", False)])
def test_a_step_callback_that_reads_the_loss_only_periodically_is_already_sync_free(tmp_path, gate, already):
    """minGPT's projects: the trainer keeps the loss a tensor and the on_batch_end callback reads it every 10
    iterations."""
    script = f"""\
    from mingpt.trainer import Trainer


    def main(config, model, data):
        trainer = Trainer(config, model, data)

        def batch_end_callback(trainer):
            {gate}
                print(f"iter {{trainer.iter_num}}: train loss {{trainer.loss.item():.5f}}")

        trainer.set_callback("on_batch_end", batch_end_callback)
        trainer.run()
    """
    root = _repo(tmp_path, {"chargpt.py": script})
    done = [(s.line, s.already) for s in _sites("sync_free_logging", root) if s.already]
    assert done == ([(9, True)] if already else [])
