"""The ``steady_bookkeeping`` optimization; its rule is in ``rule.py``."""
