"""The shape of a training program, as far as an optimization's measured win depends on it: a TRL trainer, a
transformers ``Trainer``, or a hand-written loop (``.backward()`` in a loop of the repository's own, Accelerate's
``accelerator.backward(loss)`` included).

A win measured on one shape is no claim for another (a from-scratch GPT loop's x1.98 from bf16 autocast says
nothing of a TRL LoRA run): :func:`program_shapes` tells which shapes a repository has, and an optimization's
``measured_on`` which shapes its expected win was measured on.
"""

from __future__ import annotations

import enum

from optimizations.program.repository import RepoContext, TransformError


class ProgramShape(enum.Enum):
    """What drives training; the value is how a sentence names it."""

    TRL_TRAINER = "a TRL trainer"
    HF_TRAINER = "a transformers Trainer"
    LOOP = "a hand-written loop"


# Words a file holding a trainer call or a training loop contains.
_WORDS = ("Trainer", "backward")


def program_shapes(repo: RepoContext) -> frozenset[ProgramShape]:
    """The shapes of the training programs in the repository's files in scope: a call of a TRL or transformers
    ``*Trainer`` class (or of a repository class derived from one), a loop that calls ``.backward()``."""
    import libcst as cst  # imported here: the registry reads ProgramShape without loading libcst

    from optimizations.program.classes import repository_classes
    from optimizations.program.hf import trainer_class
    from optimizations.program.names import scoped_names
    from optimizations.program.training_loops import training_loops

    shapes = set()
    for path in repo.python_files():
        text = repo.read(path)
        if not any(word in text for word in _WORDS):
            continue
        try:
            parsed = repo.sources.parse(path, text)
        except TransformError:
            continue
        names = scoped_names(parsed)
        for call in parsed.nodes(cst.Call):
            qualified = names.of(call.func)
            found = {q.name for q in qualified} | set(repository_classes(repo).ancestors(path, qualified))
            trainer = trainer_class(found)
            if trainer is not None:
                trl = any(n.startswith("trl.") and n.endswith(f".{trainer}") for n in found)
                shapes.add(ProgramShape.TRL_TRAINER if trl else ProgramShape.HF_TRAINER)
        if training_loops(parsed):
            shapes.add(ProgramShape.LOOP)
    return frozenset(shapes)
