"""The ``vocab_padding`` optimization; its rule is in ``rule.py``."""
