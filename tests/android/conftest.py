"""Fixtures that read Android text samples (helpers live in android_samples.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from android_samples import OWN, drop_source_header


@pytest.fixture
def shared_sample(shared_android_fixtures: Path) -> Callable[[str], str]:
    def read(name: str) -> str:
        return drop_source_header((shared_android_fixtures / name).read_text())

    return read


@pytest.fixture
def own_sample() -> Callable[[str], str]:
    def read(name: str) -> str:
        return (OWN / name).read_text()

    return read
