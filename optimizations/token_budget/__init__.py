"""The ``token_budget`` optimization; its rule is in ``rule.py``."""
