"""`harness nightly` writes its dated report through harness.report, not by re-entering click."""

from __future__ import annotations

from pathlib import Path

from analysis.factory import cell, sample_trials, write

from harness.cli.analysis import report_step


def test_the_nightly_report_step_writes_the_runs_report(tmp_path: Path) -> None:
    results = tmp_path / "results"
    write(results, sample_trials(cell(), [20.0, 21.0, 19.5], run_id="night1"), run_id="night1")
    write(results, sample_trials(cell(quant="Q8_0"), [15.0, 15.5], run_id="other"),
          run_id="other")
    step = report_step()
    assert step is not None
    out = tmp_path / "reports" / "2026-12-02.html"
    assert step(results, "night1", out) == out
    html = out.read_text()
    assert "<html" in html and "Q4_K_M" in html
    assert "Q8_0" not in html  # only that run's trials
