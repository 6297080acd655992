"""The ``dataloader_workers`` optimization; its rule is in ``rule.py``."""
