"""The sustained-performance, energy and validity sections: shown only with such data, numbers
as the store holds them, an invalid energy reading shown as its reason, store text escaped."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.report import ReportOptions, build_report_data
from harness.report.html import render_report
from harness.report.model import ReportData
from harness.store import read_table
from harness.testing.synthstore import SynthSpec, SynthSummary, write_synthetic_store

CHARGING = 'charging: <script>alert("usb")</script> & more'
GATE = "tg_tps <b>2,400</b> tok/s above the plausible 500"
SPEC = SynthSpec(devices=3, nights=3, reps=3, sustained_configs=2, energy=True, validity=True,
                 invalid_rate=0.05, charging_reason=CHARGING, invalid_reason=GATE)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SynthSummary]:
    root = tmp_path_factory.mktemp("workloads") / "results"
    return root, write_synthetic_store(root, SPEC)


@pytest.fixture(scope="module")
def data(store: tuple[Path, SynthSummary]) -> ReportData:
    return build_report_data(ReportOptions(store[0]))


@pytest.fixture(scope="module")
def html(data: ReportData) -> str:
    return render_report(data)


@pytest.fixture(scope="module")
def trials(store: tuple[Path, SynthSummary]) -> pd.DataFrame:
    return read_table(store[0], "trials")


def _section(html: str, name: str) -> str:
    start = html.index(f'<section id="{name}">')
    return html[start:html.index("</section>", start)]


def test_the_three_sections_are_shown_with_their_links(html: str) -> None:
    for name, heading in (("sustained", "Sustained performance"), ("energy", "Energy per token"),
                          ("validity", "Validity")):
        assert f"<h2>{heading}</h2>" in _section(html, name)
        assert f'href="#{name}"' in html


def test_a_store_without_such_data_has_none_of_them(report_data: ReportData,
                                                    report_html: str) -> None:
    assert not (report_data.sustained.present or report_data.energy.present
                or report_data.validity.present)
    for name in ("sustained", "energy", "validity"):
        assert f'id="{name}"' not in report_html and f'href="#{name}"' not in report_html


def test_synthetic_store_writes_what_its_spec_says(store: tuple[Path, SynthSummary],
                                                   trials: pd.DataFrame) -> None:
    summary = store[1]
    assert summary.trials == SPEC.trials == len(trials) == 3 * 12 * 3 * 3 + 3 * 2 * 3
    assert summary.sustained == SPEC.sustained_trials == int((trials["sustained_s"] > 0).sum())
    assert summary.invalid == int((trials["valid"] == False).sum()) > 0  # noqa: E712
    assert summary.energy_invalid == int((trials["energy_valid"] == False).sum()) > 0  # noqa: E712
    samples = read_table(store[0], "samples")
    series = samples[samples["tg_tps"].notna()]
    assert len(series) == SPEC.sustained_trials * SPEC.sustained_points
    ok = set(trials.loc[trials["outcome"] == "ok", "trial_id"])
    assert (samples["power_w"].notna() == samples["trial_id"].isin(ok)).all()


def test_sustained_table_equals_the_store(data: ReportData, trials: pd.DataFrame) -> None:
    sustained = trials[(trials["sustained_s"] > 0) & (trials["outcome"] == "ok")
                       & (trials["valid"] != False)]  # noqa: E712
    devices = data.sustained.devices
    assert len(devices) == 3 and all(len(d.rows) == 2 * len(SPEC.builds) for d in devices)
    rows = {(d.device.split(" · ")[-1], r.config, r.build): r for d in devices for r in d.rows}
    for (serial, build), group in sustained.groupby(["device_serial", "build_id"]):
        for config_id, cell in group.groupby("config_id"):
            matching = [r for (s, c, b), r in rows.items()
                        if s == serial and b == build and "sustained120s" in c
                        and r.trials == len(cell)
                        and r.sustained_tg_tps == pytest.approx(
                            float(np.median(cell["sustained_tg_tps"])))]
            assert len(matching) == 1, (serial, build, config_id)
            row = matching[0]
            assert row.steady_state_ratio == pytest.approx(
                float(np.median(cell["steady_state_ratio"])))
            throttled = cell["time_to_throttle_s"].dropna()
            assert row.throttled_trials == len(throttled)
            assert row.time_to_throttle_s == (pytest.approx(float(np.median(throttled)))
                                              if len(throttled) else None)
            assert row.max_thermal_status == int(cell["max_thermal_status"].max())
    assert any(r.throttled_trials for r in rows.values())
    assert any(not r.throttled_trials for r in rows.values())  # the slow phone never throttles


def test_sustained_section_plots_each_device_and_formats_its_table(data: ReportData,
                                                                   html: str) -> None:
    section = _section(html, "sustained")
    assert section.count("<svg") == len(data.sustained.devices) == 3
    assert "seconds since launch" in section
    first = data.sustained.devices[0].rows[0]
    assert f"{first.sustained_tg_tps:.2f}" in section
    assert f"{first.steady_state_ratio:.0%}" in section
    assert "3 (severe)" in section and "never" in section
    lines = data.sustained.devices[0].lines
    assert lines and len(lines[0].t_s) == SPEC.sustained_points
    assert lines[0].t_s[0] == pytest.approx(SPEC.sustained_s / SPEC.sustained_points + 5.0)


def test_energy_rows_equal_the_store_and_invalid_ones_show_only_the_reason(
        data: ReportData, html: str, trials: pd.DataFrame) -> None:
    rows = data.energy.rows
    measured = trials[trials["energy_valid"].notna() & (trials["valid"] != False)  # noqa: E712
                      & ~(trials["throttled"] & ~(trials["sustained_s"] > 0))]
    assert sum(r.measured for r in rows) == len(measured)
    invalid = [r for r in rows if not r.ok]
    assert invalid and all(r.device.endswith("SYN0000") for r in invalid)
    for r in invalid:
        assert (r.tg_j_per_token, r.pp_j_per_token, r.idle_power_w) == (None, None, None)
        assert r.reason == f"{CHARGING} ({r.measured} of {r.measured} trials)"
    valid = [r for r in rows if r.ok]
    assert valid and any(r.reason for r in valid)  # some with a coarse reading among them
    section = _section(html, "energy")
    escaped = 'charging: &lt;script&gt;alert(&#34;usb&#34;)&lt;/script&gt; &amp; more'
    table_rows = re.findall(r"<tr>.*?</tr>", section, re.S)
    charging_rows = [t for t in table_rows if escaped in t]
    assert len(charging_rows) == len(invalid)
    for t in charging_rows:
        cells = re.findall(r'<td class="n">([^<]*)</td>', t)
        assert cells == [f"0 of {cells[0].split()[-1]}"]  # the trial count only, no figure
        assert "no valid reading" in t and 'colspan="3"' in t
    best = valid[0]
    assert f"{best.tg_j_per_token:.3f}" in section and f"{best.idle_power_w:.2f}" in section
    assert "current_now uA, negative while discharging; voltage_now uV" in section


def test_energy_figures_are_medians_of_the_valid_readings(data: ReportData,
                                                          trials: pd.DataFrame) -> None:
    sustained = trials[(trials["sustained_s"] > 0) & trials["energy_valid"].fillna(False)
                       & (trials["valid"] != False)]  # noqa: E712
    serial, config_id, build = sustained.iloc[0][["device_serial", "config_id", "build_id"]]
    cell = sustained[(sustained["device_serial"] == serial) & (sustained["config_id"] == config_id)
                     & (sustained["build_id"] == build)]
    rows = [r for r in data.energy.rows if r.device.endswith(serial) and r.build == build
            and "sustained120s" in r.config
            and r.tg_j_per_token == pytest.approx(float(np.median(cell["tg_j_per_token"])))]
    assert len(rows) >= 1


def test_validity_counts_and_reasons_are_escaped(data: ReportData, html: str,
                                                 store: tuple[Path, SynthSummary],
                                                 trials: pd.DataFrame) -> None:
    validity = data.validity
    assert validity.checked == int((trials["outcome"] == "ok").sum())
    assert validity.invalid == store[1].invalid == sum(r.invalid for r in validity.rows)
    assert all(r.reasons == ((GATE, r.invalid),) for r in validity.rows)
    section = _section(html, "validity")
    assert f"{validity.invalid} of {validity.checked} ok trials failed" in section
    assert "tg_tps &lt;b&gt;2,400&lt;/b&gt; tok/s" in section
    assert "<b>" not in html and "<script" not in html.lower()


def test_all_passed_when_no_trial_failed_a_gate(tmp_path: Path) -> None:
    spec = SynthSpec(devices=1, nights=1, reps=2, validity=True, invalid_rate=0.0)
    write_synthetic_store(tmp_path / "r", spec)
    data = build_report_data(ReportOptions(tmp_path / "r"))
    assert data.validity.present and data.validity.invalid == 0
    assert not data.sustained.present and not data.energy.present
    html = render_report(data)
    ok = data.validity.checked
    assert f"All {ok} ok trials passed the validity gates." in _section(html, "validity")
    assert 'id="sustained"' not in html and 'id="energy"' not in html
