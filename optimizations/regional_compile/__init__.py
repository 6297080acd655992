"""The ``regional_compile`` optimization; its rule is in ``rule.py``."""
