"""The ``ddp_static_graph`` optimization; its rule is in ``rule.py``."""
