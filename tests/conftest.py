"""Shared fixtures. Each area's fixtures live in tests/support/ and are listed here."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.testing.adbserver import AdbServer, private_adb_server

# leakcheck: the run fails if it leaves an adb server or a virtual-phone daemon alive
pytest_plugins = ["leakcheck", "fixtures_models", "fixtures_phones", "fixtures_builds"]

REPO = Path(__file__).resolve().parent.parent
# Tests give adb servers and phones a private HOME; the caches (builds, models, the virtual
# phone's exec rules) stay where this user keeps them, so they are made once per machine.
os.environ.setdefault("HARNESS_CACHE", str(Path.home() / ".cache" / "harness"))
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures" / "android"


@pytest.fixture
def adb_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AdbServer]:
    """A private adb server on its own port and HOME; the environment points at it."""
    with private_adb_server(tmp_path / "adb-home") as server:
        for key, value in server.env.items():
            monkeypatch.setenv(key, value)
        yield server


@pytest.fixture
def shared_android_fixtures() -> Path:
    """The reference samples in ../shared/fixtures/android (skip when absent)."""
    if not SHARED_FIXTURES.is_dir():
        pytest.skip("../shared/fixtures/android is not present")
    return SHARED_FIXTURES
