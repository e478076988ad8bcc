"""Shared fixtures. Each area's fixtures live in tests/support/ and are listed here."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.device.adb import adb_version
from harness.interrupt import interruptible
from harness.testing.adbserver import AdbServer, adb_clients, private_adb_server

# leakcheck: the run fails if it leaves an adb server or a virtual-phone daemon alive
pytest_plugins = ["alone", "leakcheck", "fixtures_models", "fixtures_phones", "fixtures_builds"]

REPO = Path(__file__).resolve().parent.parent
# Tests give adb servers and phones a private HOME; the caches (builds, models, the virtual
# phone's exec rules) stay where this user keeps them, so they are made once per machine.
os.environ.setdefault("HARNESS_CACHE", str(Path.home() / ".cache" / "harness"))
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures" / "android"


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM (a CI time limit, a killed job) stops the session as Ctrl-C does: pytest tears
    every fixture down, so the phones, adb servers and builds the tests started are stopped."""
    stack = contextlib.ExitStack()
    stack.enter_context(interruptible())
    config.add_cleanup(stack.close)


def pytest_report_header(config: pytest.Config) -> str:
    """Which adb clients the ``each_adb_client`` tests run against, at the top of every run."""
    clients = adb_clients()
    named = ", ".join(f"{'bundled' if i == 0 else 'on PATH'} {c} ({adb_version(c)})"
                      for i, c in enumerate(clients))
    more = "" if len(clients) > 1 else " only (no other adb on PATH: install Debian's adb)"
    return f"each_adb_client tests run against: {named}{more}"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests marked ``each_adb_client`` run once per adb this machine has: the wheel's, and
    Debian's 29.0.6 (or any other) when one is on PATH (``./dev test`` installs it)."""
    if "adb_server" in metafunc.fixturenames and \
            metafunc.definition.get_closest_marker("each_adb_client"):
        clients = adb_clients()
        ids = ["bundled-adb" if i == 0 else f"adb-{adb_version(c)}" for i, c in enumerate(clients)]
        metafunc.parametrize("adb_server", clients, ids=ids, indirect=True)


@pytest.fixture
def adb_server(request: pytest.FixtureRequest, tmp_path: Path,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[AdbServer]:
    """A private adb server on its own port and HOME; the environment points at it. The adb
    is the wheel's, or each one in turn for tests marked ``each_adb_client``."""
    binary = getattr(request, "param", None)
    with private_adb_server(tmp_path / "adb-home", binary) as server:
        for key, value in server.env.items():
            monkeypatch.setenv(key, value)
        yield server


@pytest.fixture
def shared_android_fixtures() -> Path:
    """The reference samples in ../shared/fixtures/android (skip when absent)."""
    if not SHARED_FIXTURES.is_dir():
        pytest.skip("../shared/fixtures/android is not present")
    return SHARED_FIXTURES
