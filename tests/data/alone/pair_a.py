"""Run by tests/test_alone.py in a nested pytest -n 2: each test logs when it ran."""

import os
import time

import pytest


def _log(name: str) -> None:
    with open(os.environ["ALONE_LOG"], "a") as log:
        log.write(f"{name} start {time.monotonic()}\n")
    time.sleep(1.0)
    with open(os.environ["ALONE_LOG"], "a") as log:
        log.write(f"{name} end {time.monotonic()}\n")


@pytest.mark.alone
def test_alone() -> None:
    _log("alone")


def test_shared_a() -> None:
    _log("a")
