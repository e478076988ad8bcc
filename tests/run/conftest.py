"""Fixtures shared by the run tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def sim_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, adb_server: object
             ) -> Iterator[Path]:
    """`--devices sim:N` keeps its phones under HARNESS_HOME, here a temporary one; the phones
    are stopped afterwards, also when the test fails."""
    home = tmp_path / "harness-home"
    monkeypatch.setenv("HARNESS_HOME", str(home))
    yield home
    from harness.virtual.control import stop_phones

    stop_phones(home=home / "sim")
