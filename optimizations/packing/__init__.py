"""The ``packing`` optimization; its rule is in ``rule.py``."""
