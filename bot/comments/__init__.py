"""The comments the bot posts after a bench run, rendered from the results and the computed verdict: results
(:mod:`.results`), reviewer verdict (:mod:`.verdict`) and bottom line (:mod:`.note`), on the shared markdown
of :mod:`.markdown`."""
