"""Tiny models built from configs (random weights, no download) for the tests that train or compare them."""

from __future__ import annotations


def tiny_qwen2(vocab_size: int = 50, attention: str = "sdpa", hidden_size: int = 16):
    """A two-layer Qwen2 causal LM with grouped-query attention (2 heads, 1 key-value head); FlexAttention's
    GPU kernels need heads of 16 or more, a ``hidden_size`` of 32 or more."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        attn_implementation=attention,
    )
    return Qwen2ForCausalLM(config)
