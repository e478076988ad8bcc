"""One answer to "how much memory does this phone have for us", for plan, run and recommend."""

from __future__ import annotations

import pandas as pd
from analysis.factory import trial

from harness.analysis.phonemem import resolve_device
from harness.budget import available_memory

GIB = 1 << 30


def test_the_order_is_given_then_the_phones_reading_then_the_profile_then_a_share_of_ram() -> None:
    every = dict(live=3 * GIB, live_from="S1", profile_mb=4096, profile="mid", ram_bytes=8 * GIB)
    assert available_memory(given=GIB, **every).bytes == GIB  # type: ignore[arg-type]
    found = available_memory(**every)  # type: ignore[arg-type]
    assert (found.bytes, found.source) == (3 * GIB, "available memory read from S1 (MemAvailable)")
    assert available_memory(profile_mb=4096, profile="mid", ram_bytes=8 * GIB).source == (
        "available memory from profile mid")
    share = available_memory(ram_bytes=8 * GIB)
    assert share.bytes == int(8 * GIB * 0.6)
    assert available_memory().bytes is None
    assert found.budget(GIB) == 2 * GIB


def test_recommend_uses_what_the_phone_reported_when_its_trials_started() -> None:
    rows = [trial(serial="S9", rep=i, start_mem_available_bytes=(3 + i) * GIB, device_model="x")
            for i in range(3)]
    trials = pd.DataFrame([r.__dict__ for r in rows])
    device = resolve_device(trials, "S9")
    assert device.available_bytes == 4 * GIB  # the median of 3, 4 and 5 GiB
    assert device.source == "available memory read from S9 when its trials started (MemAvailable)"
    assert resolve_device(trials, "S9", memory_bytes=GIB).available_bytes == GIB
