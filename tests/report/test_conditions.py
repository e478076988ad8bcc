"""The report shows, beside each config, how it ran: applied affinity, threads, pre-flight state."""

from __future__ import annotations

from pathlib import Path

import pytest
from analysis.factory import cell, trial, write

from harness.records import TrialRecord
from harness.report import ReportOptions, build_report_data
from harness.report.html import render_report
from harness.report.model import ReportData

PRE = dict(screen_on=True, stay_awake=False, charging=False, charge_source="none",
           battery_saver=False, doze_state="ACTIVE", cooldown_source="sysfs",
           memory_model="cgroup")


def _store(root: Path) -> list[TrialRecord]:
    pinned = cell(affinity="0x2", threads=2)
    loose = cell(threads=2)
    records = [
        trial(pinned, rep=0, affinity="0x2", applied_affinity="1", affinity_applied=True,
              threads_seen=2, **PRE),
        trial(pinned, rep=1, affinity="0x2", applied_affinity="0-1", affinity_applied=False,
              threads_seen=2, tg_tps=31.0,
              config_not_applied="affinity 0x2 (CPUs 1) requested, threads ran on CPUs 0-1",
              **{**PRE, "screen_on": False}),
        trial(loose, rep=0, applied_affinity="0-1", threads_seen=2,
              **{**PRE, "charge_source": "<usb>"}),
        trial(loose, rep=1, serial="SER2", outcome="precondition_failed", tg_tps=None,
              pp_tps=None, error="phone SER2: battery saver is on; the matrix requires "
                                 "battery_saver: false", **{**PRE, "battery_saver": True}),
    ]
    write(root, records)
    return records


@pytest.fixture
def data(tmp_path: Path) -> ReportData:
    _store(tmp_path)
    return build_report_data(ReportOptions(tmp_path))


def test_each_config_shows_its_applied_affinity_threads_and_preflight_state(
        data: ReportData) -> None:
    conditions = data.conditions
    assert conditions.recorded and conditions.total == 3
    first = conditions.rows[0]  # the flagged config comes first
    assert (first.flagged, first.trials, first.affinity) == (1, 2, "0x2")
    assert first.applied_affinity in ("0-1 1 · 1 1", "1 1 · 0-1 1")
    assert first.screen_on in ("off 1 · on 1", "on 1 · off 1")
    assert (first.threads, first.threads_seen, first.cooldown_source) == ("2", "2", "sysfs")
    assert first.memory_model == "cgroup"  # a virtual phone's memory model, never silent
    saver = next(r for r in conditions.rows if r.device.endswith("SER2"))
    assert (saver.battery_saver, saver.charging, saver.doze_state) == ("on", "not charging",
                                                                       "ACTIVE")


def test_a_flagged_trial_is_not_a_good_trial(data: ReportData) -> None:
    # the heatmaps hold only good trials: the flagged 31 tok/s never shows up
    values = [v for m in data.heatmaps if m.metric == "tg_tps" for row in m.values
              for v in row if v is not None]
    assert values and 31.0 not in values


def test_the_conditions_table_is_rendered_and_escaped(data: ReportData) -> None:
    html = render_report(data)
    section = html[html.index('id="conditions"'):html.index('id="throughput"')]
    assert "<h2>Run conditions</h2>" in section
    assert "&lt;usb&gt;" in section and "<usb>" not in section
    assert "not charging" in section and "sysfs" in section
    assert "precondition_failed" in html


def test_an_old_store_says_it_has_no_preflight_data(tmp_path: Path) -> None:
    write(tmp_path, [trial(cell())])
    data = build_report_data(ReportOptions(tmp_path))
    assert not data.conditions.recorded
    assert "stored before schema 3" in render_report(data)
