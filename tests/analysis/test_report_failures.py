"""The report's "Failed trials" lists what ran and failed; a cell ruled out by design (an
unsupported GPU cell, an infeasible one) is counted apart, not as a failure (issue 48, item 9)."""

from __future__ import annotations

from pathlib import Path

from harness.report import ReportOptions, build_report_data
from harness.report.html import render_report
from harness.store import write_part

from .factory import START, cell, trial


def test_failures_are_what_failed_and_ruled_out_cells_are_counted_apart(tmp_path: Path) -> None:
    c = cell()
    records = [trial(c, rep=0), trial(c, rep=1, outcome="crashed", error="signal 11"),
               trial(cell(quant="Q8_0"), rep=0, outcome="unsupported",
                     error="llama-bench too old for -dev"),
               trial(cell(quant="Q8_0"), rep=1, outcome="skipped_infeasible",
                     error="predicted 9.1 GB > 6.0 GB available")]
    write_part(tmp_path, "trials", records, "run1", when=START)
    summary = build_report_data(ReportOptions(results=tmp_path)).summary
    assert summary.failures_total == 1 and [f.outcome for f in summary.failures] == ["crashed"]
    assert summary.not_attempted == 2
    html = render_report(build_report_data(ReportOptions(results=tmp_path)))
    assert "Failed trials (1)" in html
    assert "2 trial(s) not attempted by design" in html


def test_the_dashboards_failure_tables_name_configurations_by_label(tmp_path: Path) -> None:
    import dataclasses
    import re

    from harness.labels import config_label
    from harness.site import paths
    from harness.site.build import build_site

    store, site = tmp_path / "results", tmp_path / "site"
    failed = trial(cell(quant="Q8_0"), rep=0, outcome="crashed", error="signal 11")
    write_part(store, "trials", [trial(cell(), rep=0), failed], "run1", when=START)
    build_site(store, site, recommend=False)
    label = config_label(dataclasses.asdict(failed))
    night = (site / paths.night_page(f"{START:%Y-%m-%d}")).read_text()
    index = (site / "index.html").read_text()
    for page in (night, index):
        row = re.search(r"<td class=\"bad\">crashed</td>", page)
        assert row is not None
        cells = page[:row.start()].rsplit("<tr>", 1)[1]
        assert f">{label}<" in cells.replace("&lt;", "<").replace("&gt;", ">")
        assert f">{failed.config_id}<" not in cells  # the hash only as the tooltip
