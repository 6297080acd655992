"""One-off GPU studies, one package per study; run from the repository root, not part of the installed package."""
