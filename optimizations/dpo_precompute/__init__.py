"""The ``dpo_precompute`` optimization; its rule is in ``rule.py``."""
