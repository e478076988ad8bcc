"""Fixtures for the synthetic GGUF test models (owned by the test-models area).

They use the shared cache ($HARNESS_CACHE, default ~/.cache/harness), so only the first test
session on a machine quantises; later sessions find the files at once. llama-cpp-python is a
declared dependency, so its absence fails the tests that need a ladder rather than skipping them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.artifacts.testmodels import ensure_ladder


@pytest.fixture(scope="session")
def tiny_ladder() -> dict[str, Path]:
    """quant -> GGUF path of the tiny synthetic model (F16 .. Q2_K), a few MB each."""
    return ensure_ladder("tiny")


@pytest.fixture(scope="session")
def bench_ladder() -> dict[str, Path]:
    """quant -> GGUF path of the bench-size synthetic model (tens of millions of parameters)."""
    return ensure_ladder("bench")
