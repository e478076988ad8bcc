"""Benchmarks of the harness itself (issue 9); run with `python -m bench.run` or `nox -s bench`."""
