"""Runtime helpers that transforms copy (vendor) into target repositories; each module stands alone."""
