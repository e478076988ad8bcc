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


@pytest.fixture(scope="session")
def moe_ladder() -> dict[str, Path]:
    """The synthetic mixture of experts (8 experts, 2 per token): F16, Q8_0, Q4_K_M."""
    return ensure_ladder("moe")


@pytest.fixture(scope="session")
def gemma_ladder() -> dict[str, Path]:
    """quant -> GGUF path of the real Gemma 3 270M ladder (F16 dequantised from PyPI's Q4_K_M,
    the rest requantised), about 2 GB in all, made once per machine (about a minute).

    The models extra is part of the test environment (noxfile), so a missing package fails the
    tests that need the real model rather than skipping them.
    """
    from harness.artifacts import realmodel

    if not realmodel.installed():
        pytest.fail(f"the real model is not installed: {realmodel.INSTALL_HINT}")
    return ensure_ladder("gemma3-270m")
