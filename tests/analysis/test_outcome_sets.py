"""One set of failure outcomes: the report's "What changed" and the nightly alert call the same
trials failures, and every outcome is exactly one of ok, failed or never attempted."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from analysis.factory import START, cell, trial, write
from harness.analysis import alerts, changes
from harness.records import FAILED, NOT_ATTEMPTED, OUTCOMES
from harness.store import read_table


def test_every_outcome_is_ok_failed_or_not_attempted_and_only_one() -> None:
    assert sorted(("ok", *FAILED, *NOT_ATTEMPTED)) == sorted(OUTCOMES)
    assert len({"ok", *FAILED, *NOT_ATTEMPTED}) == len(OUTCOMES)


def test_what_changed_and_the_alert_agree_on_every_outcome(tmp_path: Path) -> None:
    """One phone per outcome: ok last night, that outcome tonight."""
    night = START + timedelta(days=1)
    records = []
    for i, outcome in enumerate(o for o in OUTCOMES if o != "ok"):
        serial = f"SER{i}"
        records.append(trial(cell(), serial=serial, run_id="n1", started_at=START))
        records.append(trial(cell(), serial=serial, run_id="n2", started_at=night,
                             outcome=outcome, tg_tps=None, pp_tps=None, error=f"{outcome}!"))
    write(tmp_path, [r for r in records if r.run_id == "n1"], run_id="n1", when=START)
    write(tmp_path, [r for r in records if r.run_id == "n2"], run_id="n2", when=night)
    frame = read_table(tmp_path, "trials")

    in_report = {f.outcome for f in changes.new_failures(frame)}
    in_alert = {o for f in alerts.new_failures(frame, "n2") for o in f.outcomes}
    assert in_report == in_alert == set(FAILED)
