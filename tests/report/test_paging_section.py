"""The report's "Paging and storage" section: the figures of analysis.paging_table, escaped."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from analysis.factory import cell, trial, write

from harness.analysis.paging_table import paging_table
from harness.report import ReportOptions, build_report_data
from harness.report.html import render_report
from harness.store import read_table

MiB = 2**20
FILE = 151 * MiB


def _store(root: Path) -> None:
    mapped = cell(model="bench", quant="F16", n_ctx=256)
    read = cell(model="bench", quant="F16", n_ctx=256, mmap=False)
    cold = cell(model="bench", quant="Q8_0", n_ctx=256, cache="cold")
    warm = cell(model="bench", quant="Q8_0", n_ctx=256, cache="warm")
    records = []
    for rep, (tg, per_token) in enumerate(((0.80, 118 * MiB), (0.76, 124 * MiB),
                                           (0.78, 121 * MiB))):
        records.append(trial(mapped, rep=rep, serial="<b>SER</b>", tg_tps=tg,
                             model_file_bytes=FILE, vm_hwm_bytes=120 * MiB, paging=True,
                             read_bytes_per_token=float(per_token), major_faults_per_token=210.0,
                             storage_read_mb_s=100.0, load_ms=2900.0, cache_resident_bytes=0,
                             predicted_paging_tg_tps=0.79, load_mode="mmap"))
    records += [trial(read, rep=rep, serial="<b>SER</b>", outcome="oom_killed", tg_tps=None,
                      model_file_bytes=FILE, load_mode="none", storage_read_mb_s=100.0)
                for rep in range(2)]
    records += [trial(c, rep=rep, serial="<b>SER</b>", model_file_bytes=80 * MiB,
                      cache_resident_bytes=resident, load_ms=load, paging=False,
                      read_bytes_per_token=0.0, storage_read_mb_s=100.0, load_mode="mmap",
                      cache=c.cache)
                for c, resident, load in ((cold, 0, 910.0), (warm, 80 * MiB, 150.0))
                for rep in range(2)]
    write(root, records)


def test_paging_rows_set_measured_figures_against_independent_ones(tmp_path: Path) -> None:
    """tg against the plan's prediction (made before the trial), the measured read rate against
    the storage's speed: no figure against one derived from itself."""
    _store(tmp_path)
    rows = {(r.quant, r.load_mode, r.cache): r for r in paging_table(read_table(tmp_path,
                                                                                "trials"))}
    paged = rows[("F16", "mmap", "")]
    assert (paged.ok, paged.paging, paged.killed) == (3, 3, 0)
    assert paged.read_bytes_per_token == 121 * MiB and paged.tg_tps == pytest.approx(0.78)
    assert not hasattr(paged, "storage_bound_tg_tps")
    # the median read per token at the median tg: 121 MiB x 0.78 tok/s, in MB/s
    assert paged.read_mb_s == pytest.approx(121 * MiB * 0.78 / 1e6)
    assert paged.resident_share == pytest.approx(120 / 151)
    assert paged.predicted_tg_tps == pytest.approx(0.79)
    killed = rows[("F16", "none", "")]
    assert (killed.ok, killed.killed, killed.paging) == (0, 2, 0)
    cold, warm = rows[("Q8_0", "mmap", "cold")], rows[("Q8_0", "mmap", "warm")]
    assert (cold.cache_share, warm.cache_share) == (0.0, 1.0)
    assert (cold.load_ms, warm.load_ms) == (910.0, 150.0)


def test_the_section_shows_them_escaped_and_only_when_there_is_something(
        tmp_path: Path) -> None:
    _store(tmp_path / "r")
    data = build_report_data(ReportOptions(tmp_path / "r"))
    assert data.paging.present and len(data.paging.rows) == 4
    html = render_report(data)
    start = html.index('<section id="paging">')
    section = html[start:html.index("</section>", start)]
    assert '<a href="#paging">Paging and storage</a>' in html
    assert "&lt;b&gt;SER&lt;/b&gt;" in section and "<b>SER</b>" not in html
    rows = re.findall(r"<tr><td>.*?</tr>", section, re.S)
    assert len(rows) == 4
    paged = next(r for r in rows if "<td>mmap</td><td>as found</td>" in r)
    assert ">121.0<" in paged and ">0.78<" in paged and ">0.79<" in paged
    assert any("(2 killed)" in r and "<td>none</td>" in r for r in rows)
    plain = tmp_path / "plain"
    write(plain, [trial(cell(), rep=i) for i in range(2)])
    quiet = build_report_data(ReportOptions(plain))
    assert not quiet.paging.present and '<section id="paging">' not in render_report(quiet)


def test_trials_whose_swap_ins_decide_the_label_show_as_unknown_with_the_figures(
        tmp_path: Path) -> None:
    """paging null with its reason (paging_unknown): the row is shown, the reason escaped."""
    mapped = cell(model="bench", quant="F16", n_ctx=256)
    why = "the engine read 50.0 MB <per token> & the phone swapped in 49.0 MB"
    write(tmp_path, [trial(mapped, rep=rep, paging=None, paging_unknown=why,
                           model_file_bytes=FILE, read_bytes_per_token=50e6,
                           swap_in_bytes_per_token=49e6, load_mode="mmap")
                     for rep in range(2)])
    (row,) = paging_table(read_table(tmp_path, "trials"))
    assert (row.ok, row.paging, row.unknown, row.unknown_reason) == (2, 0, 2, why)
    html = render_report(build_report_data(ReportOptions(tmp_path)))
    start = html.index('<section id="paging">')
    section = html[start:html.index("</section>", start)]
    assert ("0 (2 unknown: the engine read 50.0 MB &lt;per token&gt; &amp; the phone swapped "
            "in 49.0 MB)") in section
