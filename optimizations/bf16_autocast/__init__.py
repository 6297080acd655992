"""The ``bf16_autocast`` optimization; its rule is in ``rule.py``."""
