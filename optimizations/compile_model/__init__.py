"""The ``compile_model`` optimization; its rule is in ``rule.py``."""
