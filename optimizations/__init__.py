"""Registered optimizations: one module per optimization, discovered through ``bot.optimizations`` entry points."""
