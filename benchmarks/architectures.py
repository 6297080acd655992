"""Architecture configs for models a run names, at a chosen size.

:func:`architecture` gives the ``AutoConfig.for_model`` arguments that :mod:`benchmarks.offline_models` builds a
model from: at ``"tiny"`` a CPU-sized model of the id's family, at any other size (``"gpu"``) the published shape
of the model, for the ids of a small table.
"""

from __future__ import annotations

import re
from typing import Any

# (a part of the lowercased id, model type, whether the family ties its input and output embeddings)
_FAMILIES: tuple[tuple[str, str, bool], ...] = (
    ("qwen3", "qwen3", True),
    ("qwen2", "qwen2", True),
    ("gemma", "gemma", True),
    ("mistral", "mistral", False),
    ("llama", "llama", False),
    ("gpt2", "gpt2", True),
)

_TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 512,
    "max_position_embeddings": 4096,
}
# GPT-2 names its fields its own way and has no grouped-query attention.
_TINY_GPT2 = {"n_embd": 64, "n_inner": 128, "n_layer": 2, "n_head": 4, "vocab_size": 512, "n_positions": 4096}


def _decoder(
    model_type: str,
    hidden: int,
    intermediate: int,
    layers: int,
    heads: int,
    kv_heads: int,
    vocab: int,
    rope_theta: float,
    positions: int,
    tie: bool,
    eps: float,
    dtype: str = "bfloat16",
    **extra: Any,
) -> dict[str, Any]:
    return {
        "model_type": model_type,
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "vocab_size": vocab,
        "rope_theta": rope_theta,
        "max_position_embeddings": positions,
        "tie_word_embeddings": tie,
        "rms_norm_eps": eps,
        "dtype": dtype,
        **extra,
    }


_LLAMA3_8B: dict[str, Any] = dict(
    hidden=4096,
    intermediate=14336,
    layers=32,
    heads=32,
    kv_heads=8,
    vocab=128256,
    rope_theta=500000.0,
    eps=1e-5,
)
_LLAMA31_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
_MISTRAL_7B: dict[str, Any] = dict(
    hidden=4096, intermediate=14336, layers=32, heads=32, kv_heads=8, tie=False, eps=1e-5
)

# The published config.json of each model, by a pattern of the lowercased name after the owner.
_PUBLISHED: dict[str, dict[str, Any]] = {
    r"qwen2\.5-0\.5b(-instruct)?": _decoder("qwen2", 896, 4864, 24, 14, 2, 151936, 1e6, 32768, True, 1e-6),
    r"qwen2\.5-1\.5b": _decoder("qwen2", 1536, 8960, 28, 12, 2, 151936, 1e6, 131072, True, 1e-6),
    r"qwen2\.5-1\.5b-instruct": _decoder("qwen2", 1536, 8960, 28, 12, 2, 151936, 1e6, 32768, True, 1e-6),
    r"qwen2\.5-7b": _decoder("qwen2", 3584, 18944, 28, 28, 4, 152064, 1e6, 131072, False, 1e-6),
    r"qwen2\.5-7b-instruct": _decoder("qwen2", 3584, 18944, 28, 28, 4, 152064, 1e6, 32768, False, 1e-6),
    r"llama-2-7b(-chat)?(-hf)?": _decoder(
        "llama", 4096, 11008, 32, 32, 32, 32000, 10000.0, 4096, False, 1e-5, dtype="float16"
    ),
    r"meta-llama-3-8b(-instruct)?": _decoder("llama", **_LLAMA3_8B, positions=8192, tie=False),
    r"(meta-)?llama-3\.1-8b(-instruct)?": _decoder(
        "llama", **_LLAMA3_8B, positions=131072, tie=False, rope_scaling=_LLAMA31_ROPE
    ),
    r"mistral-7b(-instruct)?-v0\.1": _decoder(
        "mistral", **_MISTRAL_7B, vocab=32000, rope_theta=10000.0, positions=32768, sliding_window=4096
    ),
    r"mistral-7b(-instruct)?-v0\.3": _decoder(
        "mistral", **_MISTRAL_7B, vocab=32768, rope_theta=1e6, positions=32768, sliding_window=None
    ),
    r"tinyllama-1\.1b.*": _decoder("llama", 2048, 5632, 22, 32, 4, 32000, 10000.0, 2048, False, 1e-5),
    r"gpt2": {
        "model_type": "gpt2",
        "n_embd": 768,
        "n_layer": 12,
        "n_head": 12,
        "vocab_size": 50257,
        "n_positions": 1024,
        "layer_norm_epsilon": 1e-5,
        "tie_word_embeddings": True,
    },
}


def _family(model_id: str) -> tuple[str, bool] | None:
    """The model type of ``model_id``'s family and whether it ties embeddings, or None for an unknown family."""
    lowered = model_id.lower()
    return next(((model_type, tie) for pattern, model_type, tie in _FAMILIES if pattern in lowered), None)


def _published(model_id: str) -> dict[str, Any] | None:
    name = model_id.lower().rsplit("/", 1)[-1]
    return next((dict(shape) for pattern, shape in _PUBLISHED.items() if re.fullmatch(pattern, name)), None)


def architecture(model_id: str, size: str) -> dict[str, Any] | None:
    """The config arguments of ``model_id`` at ``size``, or None when it is not known.

    ``"tiny"``: a 2-layer, 64-wide model of the id's family (qwen2, qwen3, llama, mistral, gemma, gpt2), tying its
    embeddings as the published model (else its family) does. Any other size: the published shape of the model,
    for Qwen2.5 0.5B/1.5B/7B, Llama 2 7B, Llama 3 and 3.1 8B, Mistral 7B v0.1 and v0.3, TinyLlama 1.1B and GPT-2.
    """
    family = _family(model_id)
    published = _published(model_id)
    if size != "tiny":
        return published
    if family is None:
        return None
    model_type, tie = family
    if model_type == "gpt2":
        return {"model_type": model_type, **_TINY_GPT2, "tie_word_embeddings": tie}
    if published is not None:
        tie = published["tie_word_embeddings"]
    return {"model_type": model_type, **_TINY, "tie_word_embeddings": tie}
