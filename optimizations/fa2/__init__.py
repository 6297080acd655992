"""The ``fa2`` optimization; its rule is in ``rule.py``."""
