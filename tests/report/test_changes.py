"""The report leads with what changed: per phone, regressions and improvements (the build
comparison's), new failures and missing data; spread beside the throughput medians; history
plots that stay readable with few nights."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from analysis.factory import START, cell, trial, write

from harness.analysis.changes import what_changed
from harness.analysis.frames import load_trials, usable
from harness.report import ReportOptions, build_report_data
from harness.report.html import render_report
from harness.report.model import ChangeMark, HistorySeries, ReportData
from harness.report.plots import history_chart, history_figure
from harness.testing.synthstore import SynthSpec, write_synthetic_store

HOSTILE_QUANT = "Q8_0<img src=x onerror=alert(1)>"
HOSTILE_PHONE = "<i>gone</i> & $x$"
SPEC = SynthSpec(devices=3, nights=4, reps=3, absent_last_night=1, quants=("Q4_0", HOSTILE_QUANT),
                 device_names=("Pixel <script>alert(2)</script>", "Galaxy S23", HOSTILE_PHONE))


def _section(html: str) -> str:
    return html[html.index('<section id="changes">'):html.index('<section id="summary">')]


@pytest.fixture(scope="module")
def changed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ReportData]:
    root = tmp_path_factory.mktemp("changes") / "results"
    write_synthetic_store(root, SPEC)
    return root, build_report_data(ReportOptions(root))


def test_top_section_lists_regressions_and_the_missing_phone(
        changed: tuple[Path, ReportData]) -> None:
    data = changed[1]
    ch = data.changes
    assert ch.latest_night == "2026-01-08" and ch.previous_night == "2026-01-07"
    assert ch.compared == "b4101 [llama-bench] against b4100 [llama-bench]"
    by_device = {p.device.rsplit(" · ", 1)[1]: p for p in ch.phones}
    assert sorted(by_device) == ["SYN0000", "SYN0001", "SYN0002"]
    gone = by_device["SYN0002"]
    assert gone.absent and len(gone.missing) == SPEC.configs
    assert {m.last_night for m in gone.missing} == {"2026-01-07"}
    assert all(not p.missing and not p.absent for s, p in by_device.items() if s != "SYN0002")
    # the regressions are the build comparison's regressed cells, nothing recomputed
    for serial, phone in by_device.items():
        want = {(r.config, r.metric, r.ratio) for r in data.comparison.rows
                if r.serial == serial and r.verdict == "regression"}
        assert {(m.config, m.metric, m.ratio) for m in phone.regressions} == want
        improved = {(r.config, r.metric) for r in data.comparison.rows
                    if r.serial == serial and r.verdict == "improvement"}
        assert {(m.config, m.metric) for m in phone.improvements} == improved
    assert sum(len(p.regressions) for p in ch.phones) >= 6  # an 8% tg_tps drop everywhere

    html = render_report(data)
    top = _section(html)
    assert html.index('<section id="changes">') < html.index('<section id="summary">')
    assert '<a href="#changes">What changed</a>' in html and "<h2>What changed</h2>" in top
    assert top.count('href="#comparison">regression</a>') == sum(
        min(len(p.regressions), ch.shown) for p in ch.phones)
    assert 'class="missing" href="#devices">missing: no trial on 2026-01-08</a>' in top
    assert "last measured 2026-01-07, 8 config(s)" in top
    for anchor in ("comparison", "devices", "failures"):
        assert f'id="{anchor}"' in html  # every link of the top section lands somewhere


def test_top_section_escapes_store_strings(changed: tuple[Path, ReportData]) -> None:
    top = _section(render_report(changed[1]))
    assert "<img" not in top and "<script" not in top and "<i>" not in top
    assert "Q8_0&lt;img src=x onerror=alert(1)&gt;" in top  # a regressed config's label
    assert "&lt;i&gt;gone&lt;/i&gt; &amp; $x$" in top  # the missing phone
    assert "Pixel &lt;script&gt;alert(2)&lt;/script&gt;" in top


def test_nothing_changed_is_one_line(tmp_path: Path) -> None:
    root = tmp_path / "results"
    write_synthetic_store(root, SynthSpec(devices=2, nights=2, builds=("b1",),
                                          regressed_build=None, fail_rate=0.0,
                                          quants=("Q4_0",), kv_types=("f16",)))
    data = build_report_data(ReportOptions(root))
    assert data.changes.nothing_changed and not data.changes.phones
    top = _section(render_report(data))
    assert "<li" not in top and top.count("<p") == 1
    assert "Nothing changed on the latest night (2026-01-06): no regression or improvement" in top
    assert "no new failure, no missing data." in top


def test_new_failure_after_ok_trials(tmp_path: Path) -> None:
    """SER1's Q4_K_M was ok on day 0 and killed on day 1: a new failure; SER2's crashed on day
    0 and is ok since: not one; Q8_0 failed on both days without any ok: not one either."""
    root = tmp_path / "results"
    day1 = START + timedelta(days=1)
    q4, q8 = cell(quant="Q4_K_M"), cell(quant="Q8_0")
    failed = {"outcome": "oom_killed", "tg_tps": None, "pp_tps": None,
              "error": "killed by <lmkd>"}
    first = [trial(q4, serial=s, rep=i) for s in ("SER1", "SER2") for i in range(3)]
    first.append(trial(q4, serial="SER2", rep=3, outcome="crashed", tg_tps=None, pp_tps=None,
                       started_at=START + timedelta(minutes=5)))
    first.append(trial(q8, serial="SER1", rep=0, **failed))
    second = [trial(q4, serial="SER1", rep=0, run_id="run2", started_at=day1),
              trial(q4, serial="SER1", rep=1, run_id="run2", started_at=day1
                    + timedelta(minutes=1), **failed),
              trial(q4, serial="SER2", rep=0, run_id="run2", started_at=day1),
              trial(q8, serial="SER1", rep=0, run_id="run2", started_at=day1, **failed)]
    write(root, first)
    write(root, second, run_id="run2", when=day1)

    result = what_changed(load_trials(root), None)
    assert not result.compared and result.latest_night == "2026-03-02"
    ser1, ser2 = result.phones
    assert [(f.device, f.config_id, f.outcome) for f in ser1.new_failures] == [
        ("SER1", q4.config_id, "oom_killed")]
    assert ser1.new_failures[0].last_ok == day1 and not ser2.changed and not ser1.missing

    data = build_report_data(ReportOptions(root))
    top = _section(render_report(data))
    assert 'class="oom_killed" href="#failures">new failure: oom_killed</a>' in top
    assert "killed by &lt;lmkd&gt;" in top and "no build comparison" in top
    assert "No change on Pixel Test · SER2." in top


def test_spread_beside_the_median_is_the_stores_iqr(changed: tuple[Path, ReportData]) -> None:
    root, data = changed
    heat = next(m for m in data.heatmaps if m.metric == "tg_tps" and m.device.endswith("SYN0000")
                and m.kv == "f16")
    row, col = heat.rows.index("Q4_0"), heat.cols.index(2048)
    spread = heat.spread(row, col)
    assert spread is not None
    trials = usable(load_trials(root))
    mine = trials[(trials["device_serial"] == "SYN0000") & (trials["build_id"] == "b4101")
                  & (trials["quant"] == "Q4_0") & (trials["n_ctx"] == 2048)
                  & (trials["type_k"] == "f16") & (trials["sustained_s"].isna())]
    values = mine["tg_tps"].to_numpy(dtype=float)
    assert len(values) >= 2
    assert heat.values[row][col] == pytest.approx(float(np.median(values)))
    assert spread == pytest.approx(tuple(np.percentile(values, [25, 75])))
    html = render_report(data)
    shown = (f"{heat.values[row][col]:.1f} <span class=\"iqr\">(IQR {spread[0]:.1f}–"
             f"{spread[1]:.1f})</span>")
    assert shown in html


@pytest.mark.parametrize("nights", [2, 3])
def test_history_with_few_nights_has_a_tick_per_date(tmp_path: Path, nights: int) -> None:
    root = tmp_path / "results"
    # six reps a night: the first night's three forced failures leave three ok trials
    write_synthetic_store(root, SynthSpec(devices=1, nights=nights, quants=("Q4_0",),
                                          n_ctx=(512,), kv_types=("f16",), reps=6,
                                          throttle_rate=0.0))
    data = build_report_data(ReportOptions(root))
    series = data.history.series[0]
    dates = [f"2026-01-{5 + i:02d}" for i in range(nights)]
    assert list(series.nights) == dates and not series.change_indices
    ax = history_figure(series).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == dates
    _points, level = ax.get_lines()  # the medians and one fitted level across every night
    assert list(level.get_xdata()) == [0, nights - 1]
    assert ax.get_xlim() == (-0.5, nights - 0.5)
    svg = history_chart(series)
    assert all(d in svg for d in dates) and "00:00" not in svg and "12:00" not in svg
    html = render_report(data)
    assert html.count("<svg") >= 1 and "<h2>History</h2>" in html


def test_history_of_one_night_is_a_point_not_a_line() -> None:
    series = HistorySeries("phone <b>1</b>", "Q4_0", "tg_tps", ("2026-01-05",), (12.0,),
                           ("b1",), (), ())
    ax = history_figure(series).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2026-01-05"]
    assert len(ax.get_lines()) == 1  # the point; no level of no length
    assert "phone &lt;b&gt;1&lt;/b&gt;" in history_chart(series)


def test_history_of_many_nights_keeps_a_date_axis() -> None:
    nights = tuple(f"2026-01-{d:02d}" for d in range(1, 21))
    series = HistorySeries("p", "c", "tg_tps", nights, tuple([10.0] * 10 + [9.0] * 10),
                           ("a",) * 10 + ("b",) * 10, (ChangeMark(nights[10], -0.1, 1e-6, "a",
                                                                  "b"),), (10,))
    ax = history_figure(series).axes[0]
    low, high = ax.get_xlim()
    assert high - low >= 19  # days on a date axis, not category positions
    assert len(ax.get_lines()) == 1 + 2 + 1  # points, two levels, the change point
