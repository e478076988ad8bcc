"""Validity gates end to end: a fake engine on a virtual phone prints impossible results.

The engine is a YAML engine whose build is a shell script printing canned jsonl (bench/validity.py
holds the kit: one case per cell, picked by n_ctx). Every impossible result is stored ``ok`` but
``valid=False`` with its gate's reason; the sane ones are ``valid=True``; only those count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from bench.validity import CASES, _rows, judge, write_kit
from harness import store
from harness.analysis.frames import usable
from harness.device import get_device
from harness.run.runner import RunOptions, execute

pytestmark = pytest.mark.slow


def test_every_injected_impossible_result_is_caught_and_sane_ones_pass(
    virtual_phones: Any, tmp_path: Path, tiny_ladder: dict[str, Path]
) -> None:
    matrix, builds = write_kit(tmp_path / "kit")
    (phone,) = virtual_phones(1)
    results = tmp_path / "results"
    summary = execute(matrix, [get_device(phone.serial)],
                      RunOptions(results=results, builds=builds))
    assert dict(summary.outcomes()) == {"ok": len(CASES)}  # impossible, yet every one ran
    found = judge(_rows(results))
    wrong = [t for t in found["trials"] if not t["right"]]
    assert not wrong, wrong
    assert (found["caught"], found["sane_passed"]) == (found["injected"], found["sane"]) == (8, 2)

    trials = store.read_table(results, "trials").set_index("n_ctx")
    fast = trials.loc[261, "invalid_reason"]
    assert "GB/s (measured: dd " in fast  # the bandwidth figure the gate used, and its source
    low = trials.loc[262]
    assert low["vm_hwm_bytes"] < 0.8 * low["model_file_bytes"] <= trials.loc[265, "vm_hwm_bytes"]
    assert trials.loc[264, "config_not_applied"] == "2 threads asked, at most 1 ran"
    # one reason per failing gate: the infinite rate is not also "faster than memory"
    assert trials.loc[257, "invalid_reason"] == "impossible rate: tg_tps=inf"
    assert pd.isna(trials.loc[256, "invalid_reason"])
    # only the valid trials count, for every command and the report (frames.usable_mask)
    kept = usable(store.read_table(results, "trials"))
    assert sorted(kept["n_ctx"]) == [c.n_ctx for c in CASES if c.reason is None]
