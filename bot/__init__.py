"""perfbot: apply a tiered performance plan to a training repository, one measured commit per change."""
