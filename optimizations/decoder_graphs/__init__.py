"""The ``decoder_graphs`` optimization; its rule is in ``rule.py``."""
