"""What a repository declares it installs, read from its requirement files, and the dataloader settings left out
where a transformers release it still allows would reject them (lm-sys/FastChat declares ``transformers>=4.31.0``;
``dataloader_persistent_workers`` came in 4.36.0, ``dataloader_prefetch_factor`` in 4.38.0)."""

from __future__ import annotations

import pytest

from optimizations.program.repository import RepoContext, Site
from optimizations.program.requirements import admits_older, declares_dependency, excludes
from optimizations.registry import registry
from tests.git_repos import make_repo


def _repo(tmp_path, files: dict[str, str]) -> RepoContext:
    make_repo(tmp_path / "r", files)
    return RepoContext(tmp_path / "r")


@pytest.mark.parametrize(
    ("path", "text", "admitted"),
    [
        ("requirements.txt", "torch\ntransformers>=4.31.0\n", "requirements.txt:2: transformers>=4.31.0"),
        ("requirements.txt", "transformers >= 4.40, < 5  # pinned\n", None),
        ("requirements.txt", "transformers\n", None),  # an installation gets the newest release
        ("requirements.txt", "transformers<4.30\n", "requirements.txt:1: transformers<4.30"),
        ("requirements.txt", "transformers==4.28.1\n", "requirements.txt:1: transformers==4.28.1"),
        ("requirements.txt", "transformers~=4.36.0\n", None),
        ("requirements.txt", "Transformers>4.35,<5\n", "requirements.txt:1: transformers>4.35,<5"),
        ("requirements.txt", "sentence-transformers>=2.0\n", None),  # another distribution
        (  # huggingface/trl: a comment beside an extra requires nothing
            "pyproject.toml",
            'dependencies = ["transformers>=4.56.2"]\nkernels = [\n    "transformers[hub-kernels]",  # transformers < 5.1.0\n]\n',
            None,
        ),
        (
            "pyproject.toml",
            '[project]\ndependencies = ["torch", "transformers[torch]>=4.31"]\n',
            "pyproject.toml:2: transformers>=4.31",
        ),
        (
            "setup.py",
            'setup(install_requires=["transformers>=4.31.0", "peft"])\n',
            "setup.py:1: transformers>=4.31.0",
        ),
    ],
)
def test_a_requirement_admits_an_older_release_through_a_lower_or_only_an_upper_bound(
    tmp_path, path, text, admitted
):
    ctx = _repo(tmp_path, {path: text, "train.py": ""})
    assert admits_older(ctx, "transformers", "4.36.0") == admitted
    assert (declares_dependency(ctx, "transformers") is None) == ("sentence" in text)


@pytest.mark.parametrize(
    ("text", "excluded"),
    [
        ("transformers==4.31.0\n", "exp_requirements.txt:1: transformers==4.31.0"),  # jiaweizzhao/GaLore
        ("transformers<4.36\n", "exp_requirements.txt:1: transformers<4.36"),
        ("transformers>=4.28.1\n", None),  # tatsu-lab/stanford_alpaca: installs the newest
        ("transformers>=4.28,<5\n", None),
        ("transformers\n", None),
    ],
)
def test_a_requirement_excludes_a_release_only_through_a_pin_or_upper_bound_below_it(
    tmp_path, text, excluded
):
    ctx = _repo(tmp_path, {"exp_requirements.txt": text, "train.py": ""})
    assert excludes(ctx, "transformers", "4.36.0") == excluded


def test_a_distribution_is_found_however_its_name_is_spelled(tmp_path):
    ctx = _repo(tmp_path, {"requirements-gpu.txt": "Liger_Kernel==0.3.1\n", "train.py": ""})
    assert declares_dependency(ctx, "liger-kernel") == "requirements-gpu.txt"
    assert admits_older(ctx, "liger-kernel", "0.4") == "requirements-gpu.txt:1: liger-kernel==0.3.1"
    assert declares_dependency(ctx, "liger") is None


PARSER_SCRIPT = """\
from transformers import HfArgumentParser, TrainingArguments


def train():
    (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
    return args


if __name__ == "__main__":
    train()
"""


@pytest.mark.parametrize(
    ("declared", "flags"),
    [
        (
            "transformers>=4.31.0",
            " --dataloader_num_workers 4 --dataloader_pin_memory True",
        ),
        (
            "transformers>=4.40",
            " --dataloader_num_workers 4 --dataloader_pin_memory True --dataloader_persistent_workers True",
        ),
    ],
)
def test_launch_flags_leave_out_what_an_allowed_transformers_lacks(tmp_path, declared, flags):
    ctx = _repo(
        tmp_path,
        {
            "pyproject.toml": f'[project]\nname = "t"\ndependencies = ["{declared}"]\n',
            "train.py": PARSER_SCRIPT,
            "scripts/train.sh": "deepspeed train.py --output_dir out --bf16 True\n",
        },
    )
    result = registry()["dataloader_workers"].transform_source(PARSER_SCRIPT, "train.py", ctx)
    assert [site.applicable for site in result.sites] == [True]
    assert ctx.edits["scripts/train.sh"] == f"deepspeed train.py --output_dir out --bf16 True{flags}\n"


def test_a_config_call_says_which_settings_it_left_out_and_why(tmp_path):
    source = (
        "from transformers import TrainingArguments\n\n\n"
        "def main():\n    return TrainingArguments(output_dir='out')\n"
    )
    ctx = _repo(tmp_path, {"requirements.txt": "transformers>=4.31.0\n", "train.py": source})
    result = registry()["dataloader_workers"].transform_source(source, "train.py", ctx)
    assert (
        "dataloader_persistent_workers" not in result.source
        and "dataloader_prefetch_factor" not in result.source
    )
    assert "dataloader_pin_memory=torch.cuda.is_available()" in result.source
    (site,) = result.sites
    assert site.message == (
        "TrainingArguments(...): dataloader_num_workers=DATALOADER_WORKERS, pinned memory (left out, as "
        "requirements.txt:1: transformers>=4.31.0 allows older releases: dataloader_persistent_workers, new in 4.36.0; "
        "dataloader_prefetch_factor, new in 4.38.0)"
    )


def test_subjects_say_what_the_sites_did():
    workers, prefetcher = registry()["dataloader_workers"], registry()["prefetcher"]

    def sites(*messages: str) -> list[Site]:
        return [Site("train.py", line, "x", message) for line, message in enumerate(messages, start=1)]

    full = (
        "TrainingArguments(...): dataloader_num_workers=DATALOADER_WORKERS, pinned memory, persistent workers"
    )
    flags = "launch flag --dataloader_num_workers 4, dataloader_pin_memory true, dataloader_persistent_workers true"
    left_out = "TrainingArguments(...): dataloader_num_workers=W, pinned memory (left out, ...: dataloader_persistent_workers)"
    pinned = "DataLoader(...): pin_memory=torch.cuda.is_available() (num_workers from `self.num_workers` left as set)"
    assert workers.subject(sites(full, flags)) == workers.title
    assert workers.subject(sites(full, left_out)) == "dataloader workers with pinned memory"
    assert (
        workers.subject(sites(pinned, pinned))
        == "pinned memory for data loaders whose worker count the program sets"
    )
    trainer = (
        'SFTConfig(...): accelerator_config={"non_blocking": True} (pinned batches copied without blocking)'
    )
    assert prefetcher.subject(sites(trainer)) == "Trainer batches copied to the GPU without blocking"
    assert prefetcher.subject(sites(trainer, "for batch in loader: ... (CudaPrefetcher)")) == prefetcher.title
