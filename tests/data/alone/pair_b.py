"""Run by tests/test_alone.py in a nested pytest -n 2: each test logs when it ran."""

from test_pair_a import _log


def test_shared_b1() -> None:
    _log("b1")


def test_shared_b2() -> None:
    _log("b2")
