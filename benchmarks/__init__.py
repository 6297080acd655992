"""The benchmark harness: launch wrapper, metrics, bench spec, runners, statistics and results."""
