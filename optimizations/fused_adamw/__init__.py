"""The ``fused_adamw`` optimization; its rule is in ``rule.py``."""
