"""The ``sdpa`` optimization; its rule is in ``rule.py``."""
