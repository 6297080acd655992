"""perfbot: apply a tiered performance plan to a training repository, one measured commit per change."""

__version__ = "0.1.0"
