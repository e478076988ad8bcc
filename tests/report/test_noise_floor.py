"""The report quotes each cell's noise floor: a table per phone, and beside every verdict of the
Build comparison and What changed, with the figures of ``harness.analysis.noise``."""

from __future__ import annotations

import html as html_lib
import re
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from analysis.factory import START, cell, noisy, trial, write

from harness.analysis.frames import load_trials
from harness.analysis.noise import (
    DEFAULT_ALPHA,
    MIN_NIGHTS,
    min_detectable_change,
    noise_floors,
    recent_trials,
)
from harness.records import TrialRecord
from harness.report import ReportOptions, build_report_data
from harness.report.floors import floors
from harness.report.html import render_report
from harness.report.model import ReportData

DAY = timedelta(days=1)
NIGHTS = 5
REPS = 10
QUIET, NOISY, FRESH = "SERQUIET", "SERNOISY", "SERFRESH"
HOSTILE = "Pixel <script>alert(1)</script>"
# serial -> (robust CV of every metric, the candidate's tg_tps change)
PHONES = {QUIET: (0.01, -0.08), NOISY: (0.10, -0.02), FRESH: (0.01, -0.08)}


def _night(rng: np.random.Generator, day: int) -> list[TrialRecord]:
    records = []
    for serial, (cv, change) in PHONES.items():
        if serial == FRESH and day < NIGHTS - 1:
            continue  # a phone added on the last night: one night of history
        model = HOSTILE if serial == FRESH else "Pixel Test"
        for side, (build, factor) in enumerate((("base", 1.0), ("cand", 1.0 + change))):
            c = cell(build=build)
            tg = noisy(rng, 20.0 * factor, REPS, cv)
            pp = noisy(rng, 400.0, REPS, cv)
            for i in range(REPS):
                records.append(trial(
                    c, run_id=f"n{day}", serial=serial, rep=i, device_model=model,
                    started_at=START + day * DAY + timedelta(minutes=30 * side + i),
                    tg_tps=tg[i], pp_tps=pp[i]))
    return records


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("noise") / "results"
    rng = np.random.default_rng(17)
    for day in range(NIGHTS):
        write(root, _night(rng, day), run_id=f"n{day}", when=START + day * DAY)
    return root


@pytest.fixture(scope="module")
def data(store: Path) -> ReportData:
    return build_report_data(ReportOptions(store))


@pytest.fixture(scope="module")
def page(data: ReportData) -> str:
    return render_report(data)


def _text(fragment: str) -> str:
    """The visible text of an HTML fragment, entities decoded, whitespace collapsed."""
    return html_lib.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", fragment)))


def _section(page: str, name: str) -> str:
    start = page.index(f'<section id="{name}">')
    return page[start:page.index("</section>", start)]


def _expected(store: Path) -> dict[tuple[str, str], float]:
    """``harness noise``'s own CV per (serial, metric), over the same trials."""
    return {(f.device, f.metric): f.cv for f in noise_floors(load_trials(store))}


def test_the_table_quotes_noise_py_figures_per_phone(store: Path, data: ReportData) -> None:
    cvs = _expected(store)
    rows = {(p.serial, r.metric): r for p in data.noise.phones for r in p.rows}
    assert {s for s, _ in rows} == {QUIET, NOISY, FRESH}
    for serial in (QUIET, NOISY):
        for metric in ("tg_tps", "pp_tps", "peak_pss"):
            r = rows[(serial, metric)]
            assert r.enough and r.nights == NIGHTS and r.reps == REPS
            assert r.trials == NIGHTS * 2 * REPS  # both builds' samples of every night
            assert r.cv == pytest.approx(cvs[(serial, metric)], rel=1e-12)
            assert r.mdc == pytest.approx(min_detectable_change(r.cv or 0, REPS), rel=1e-12)
    quiet, loud = rows[(QUIET, "tg_tps")], rows[(NOISY, "tg_tps")]
    assert quiet.cv is not None and loud.cv is not None and loud.cv > 3 * quiet.cv
    assert loud.mdc is not None and quiet.mdc is not None and loud.mdc > 3 * quiet.mdc
    fresh = rows[(FRESH, "tg_tps")]
    assert not fresh.enough and fresh.nights == 1 < MIN_NIGHTS and fresh.mdc is None


def test_the_html_names_both_floors_noisy_above_quiet(data: ReportData, page: str) -> None:
    assert '<a href="#noise">Noise floor</a>' in page and "<h2>Noise floor</h2>" in page
    text = _text(_section(page, "noise"))
    rows = {(p.serial, r.metric): r for p in data.noise.phones for r in p.rows}
    shown = {}
    for serial in (QUIET, NOISY):
        r = rows[(serial, "tg_tps")]
        line = (f"{r.config} tg_tps {r.cv:.2%} {NIGHTS} {REPS} {r.mdc:.1%} "
                f"({r.mdc_95:.1%})")
        assert line in text, (line, text)
        shown[serial] = float(f"{r.mdc:.1%}".rstrip("%"))
    assert shown[NOISY] > shown[QUIET]
    # the phones' headings in label order, each with its own table
    assert text.index(f"Pixel Test · {NOISY}") < text.index(f"Pixel Test · {QUIET}")


def test_a_cell_with_one_night_says_it_lacks_history(data: ReportData, page: str) -> None:
    noise = _section(page, "noise")
    heading = "Pixel &lt;script&gt;alert(1)&lt;/script&gt; · SERFRESH"
    assert f"<h3>{heading}</h3>" in noise
    fresh = _text(noise[noise.index(heading):])
    assert f"tg_tps fewer than {MIN_NIGHTS} nights (1 so far) {REPS} –" in fresh
    row = next(r for r in data.comparison.rows if r.serial == FRESH and r.metric == "tg_tps")
    assert row.floor is not None and not row.floor.enough
    assert row.floor.text == "no noise floor yet: fewer than 3 nights of history (1 so far)"
    assert row.floor.text in _text(_section(page, "comparison"))


def test_each_verdict_carries_its_floor_at_the_reps_compared(store: Path, data: ReportData,
                                                             page: str) -> None:
    cvs = _expected(store)
    comparison = _text(_section(page, "comparison"))
    for serial in (QUIET, NOISY):
        row = next(r for r in data.comparison.rows if r.serial == serial and r.metric == "tg_tps")
        assert row.floor is not None and row.floor.enough
        assert (row.n_baseline, row.n_candidate) == (NIGHTS * REPS, NIGHTS * REPS)
        mdc = min_detectable_change(cvs[(serial, "tg_tps")], row.n_baseline,
                                    n_other=row.n_candidate, alpha=DEFAULT_ALPHA)
        assert row.floor.mdc == pytest.approx(mdc, rel=1e-12)
        want = (f"this cell cannot see changes below {mdc:.1%} with {NIGHTS * REPS} repetitions "
                f"(80% power, alpha 0.05; robust CV {cvs[(serial, 'tg_tps')]:.1%} over "
                f"{NIGHTS} nights)")
        assert want in comparison
    quiet = next(r for r in data.comparison.rows if r.serial == QUIET and r.metric == "tg_tps")
    assert quiet.verdict == "regression" and not quiet.floor.blind  # type: ignore[union-attr]


def test_no_verdict_beside_a_floor_above_the_band_says_it_could_not_see(
        data: ReportData, page: str) -> None:
    blind = [r for r in data.comparison.rows if r.floor is not None and r.floor.blind]
    assert blind and all(r.verdict == "unstable" for r in blind)
    assert all(r.floor is not None and (r.floor.mdc or 0) > 0.03 for r in blind)
    loud = next(r for r in data.comparison.rows if r.serial == NOISY and r.metric == "tg_tps")
    assert loud in blind, (loud.verdict, loud.floor)
    comparison = _section(page, "comparison")
    assert comparison.count('class="floor blind"') == len(blind)
    assert "no verdict, and it could not have seen a ±3% change" in _text(comparison)
    # the quiet phone's cells saw well below the band: none of them is blind
    assert not any(r.serial == QUIET for r in blind)
    changes = _text(_section(page, "changes"))
    assert (f"{len(blind)} compared cell(s) reached no verdict and could not have seen a ±3% "
            "change") in changes


def test_what_changed_quotes_the_floor_beside_each_regression(data: ReportData,
                                                              page: str) -> None:
    items = [m for p in data.changes.phones for m in p.regressions]
    assert items and all(m.floor is not None for m in items)
    changes = _text(_section(page, "changes"))
    for m in items:
        assert m.floor is not None
        assert f"{m.config} · {m.floor.text}" in changes


def test_store_strings_stay_escaped(page: str) -> None:
    assert "<script" not in page.lower()
    for name in ("noise", "comparison", "changes"):
        assert "Pixel &lt;script&gt;alert(1)&lt;/script&gt;" in _section(page, name)


def test_json_list_of_floors(store: Path, data: ReportData) -> None:
    entries = data.noise.to_json()
    cvs = _expected(store)
    by = {(e["device"], e["metric"]): e for e in entries}
    assert by[(NOISY, "tg_tps")]["cv"] == pytest.approx(cvs[(NOISY, "tg_tps")])
    assert by[(NOISY, "tg_tps")]["enough_history"] is True
    assert by[(FRESH, "tg_tps")]["cv"] is None and by[(FRESH, "tg_tps")]["nights"] == 1
    assert by[(FRESH, "tg_tps")]["device_label"] == f"{HOSTILE} · {FRESH}"
    assert {e["reps"] for e in entries} == {REPS}


def test_recent_trials_keeps_the_floors(store: Path) -> None:
    """The report reads only each cell's recent nights; the floors are those of all trials."""
    frame = load_trials(store)
    extra = frame.assign(started_at=frame["started_at"] - 30 * DAY,  # an older month's runs
                         run_id=frame["run_id"].astype(str) + "-older",
                         tg_tps=frame["tg_tps"] * 3.0)
    both = pd.concat([extra, frame], ignore_index=True)
    assert floors(both, nights_back=NIGHTS) == {
        (f.device, f.config_id, f.engine, f.metric): f
        for f in noise_floors(both, nights_back=NIGHTS)}
    kept = recent_trials(both, 2)
    quiet = kept[kept["device_serial"] == QUIET]
    assert quiet["started_at"].min() >= START + (NIGHTS - 2) * DAY
    # the phone with one recent night keeps its older one too: its two most recent nights
    fresh = kept[kept["device_serial"] == FRESH]["started_at"].dt.date.unique()
    assert len(fresh) == 2 and min(fresh) < START.date()
