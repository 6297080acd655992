"""The ``liger_guard`` optimization; its rule is in ``rule.py``."""
