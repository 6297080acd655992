"""The ``torch_norm_gelu`` optimization; its rule is in ``rule.py``."""
