"""The ``prefetcher`` optimization; its rule is in ``rule.py``."""
