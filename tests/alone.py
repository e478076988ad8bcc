"""Tests that need the host's cores to themselves (a pytest plugin, marker ``alone``).

With two test processes (pytest-xdist), a virtual phone of one shares the host's two cores with
the other's. Most tests do not mind: the phones model Android's rules, not a CPU's speed, and
the suite passes beside a CPU-bound job (the phones' sessions run at nice -10). A test whose
assertion is the phone's heat does: the phone heats by the CPU time its processes get, so a
second process's phone on the same cores halves the heat of a 2-thread engine, and the sustained
test's hot configuration never reached its throttling threshold beside one (a run of issue 51).

Every test holds a shared lock for its duration; an ``alone`` test holds it exclusively, so it
runs while the other process runs none. A lock of intent taken first by either kind makes an
``alone`` test wait only for the tests already running, not for every test queued after them.
Without xdist there is nothing to share and nothing is locked.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "alone: runs while no other test process runs a test "
                                       "(its assertions need the host's cores)")


@pytest.fixture(autouse=True)
def _alone_or_shared(request: pytest.FixtureRequest,
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    root = tmp_path_factory.getbasetemp().parent  # every worker's basetemp is below it
    alone = request.node.get_closest_marker("alone") is not None
    with open(root / "alone.intent", "a") as intent, open(root / "alone.lock", "a") as lock:
        fcntl.flock(intent, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(intent, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            fcntl.flock(intent, fcntl.LOCK_UN)
