"""The ``packed_pairs`` optimization; its rule is in ``rule.py``."""
