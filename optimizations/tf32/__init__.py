"""The ``tf32`` optimization; its rule is in ``rule.py``."""
