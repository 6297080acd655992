"""The corpus: perfbot on training programs it did not write, installed from the package registry."""
