"""The effective run configuration: for each entry point, how it is launched and what each launch really uses.

A setting can come from a library default, a dataclass default, the code, a YAML recipe, a launch flag, a
launcher's own flags and config (``accelerate launch --mixed_precision bf16 --config_file zero3.yaml``), or a
DeepSpeed config; :func:`optimizations.program.runs.resolve.effective_runs` puts them in the order the program
reads them and keeps where each value came from (``path:line``).
"""
