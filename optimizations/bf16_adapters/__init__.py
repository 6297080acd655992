"""The ``bf16_adapters`` optimization; its rule is in ``rule.py``."""
