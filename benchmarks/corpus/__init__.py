"""The scored corpus: perfbot on public training repositories it has not seen, scored against what a careful
engineer would change there (`repos/*.toml`, read by hand before perfbot ran). `python -m benchmarks.corpus`."""
