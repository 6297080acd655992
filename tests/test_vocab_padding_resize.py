"""``resize_token_embeddings(len(tokenizer))`` gets ``pad_to_multiple_of=64``, unless the repository defines a
method of that name itself (a wrapper whose signature may not take the keyword)."""

from __future__ import annotations

from pathlib import Path

from git_repos import make_repo

from optimizations.registry import registry

LAUNCH = """\
from models import ValueHeadModel


def build(tokenizer):
    policy = ValueHeadModel()
    policy.resize_token_embeddings(len(tokenizer))
    return policy
"""
WRAPPER = """\
class ValueHeadModel:
    def resize_token_embeddings(self, vocab_size):
        self.pretrained_model.resize_token_embeddings(vocab_size)
"""


def test_the_resize_of_a_hugging_face_model_is_padded(tmp_path: Path) -> None:
    make_repo(tmp_path, {"launch.py": LAUNCH.replace("from models import ValueHeadModel\n", "")})
    change = registry()["vocab_padding"].dry_run(tmp_path)
    assert "resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64)" in change.files["launch.py"]


def test_a_repository_that_defines_the_method_is_refused(tmp_path: Path) -> None:
    make_repo(tmp_path, {"launch.py": LAUNCH, "models.py": WRAPPER})
    change = registry()["vocab_padding"].dry_run(tmp_path)
    assert not change.files
    assert {(s.path, s.line) for s in change.sites} == {("launch.py", 6), ("models.py", 3)}
    assert all("defines resize_token_embeddings itself (models.py:2)" in s.reason for s in change.sites)
