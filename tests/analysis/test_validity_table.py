"""The output check's states over the ok trials, as the report's summary and validity show them."""

from __future__ import annotations

from pathlib import Path

from harness.analysis.validity_table import output_checks, validity
from harness.store import read_table

from .factory import cell, trial, write


def test_output_checks_counts_each_state_and_names_why_not_checked(tmp_path: Path) -> None:
    c = cell()
    write(tmp_path, [
        trial(c, rep=0, output_check="match"), trial(c, rep=1, output_check="match"),
        trial(c, rep=2, output_check="mismatch", valid=False,
              invalid_reason="output mismatch against x: 2 of 16"),
        trial(c, rep=3, output_check="error", output_check_detail="harness-generate exited 1"),
        trial(c, rep=4, output_check="not_checked", output_check_detail="output_check is off"),
        trial(c, rep=5),  # a trial stored before the check: unchecked, with no reason stored
        trial(c, rep=6, outcome="crashed", tg_tps=None, output_check="error"),  # not ok: out
    ])
    trials = read_table(tmp_path, "trials")
    found = output_checks(trials)
    assert (found.checked, found.mismatch, found.error, found.unchecked) == (2, 1, 1, 2)
    assert found.total == 6 and found.stored == 5  # the trial from before the check: none
    assert set(found.reasons) == {("error", "harness-generate exited 1", 1),
                                  ("unchecked", "output_check is off", 1),
                                  ("unchecked", "no output check stored", 1)}
    assert validity(trials).output == found
    assert validity(trials).present
