"""The ``sync_free_logging`` optimization; its rule is in ``rule.py``."""
