"""The ``per_layer_stepper`` optimization; its rule is in ``rule.py``."""
