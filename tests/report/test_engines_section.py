"""The report's engine section: shown only with two engines or more, every store string escaped."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from analysis.factory import cell, noisy, trial, write

from harness.report import ReportOptions, build_report_data
from harness.report.html import render_report
from harness.report.model import ReportData

HOSTILE = "engines/<script>alert(1)</script>.yaml"


def test_two_engines_get_a_section_with_names_escaped(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    rng = np.random.default_rng(2)
    bench, other = cell(build="rel"), cell(build="rel<b>", engine=HOSTILE)
    write(tmp_path / "r", [
        *[trial(bench, rep=i, tg_tps=v, device_model="<i>phone</i>")
          for i, v in enumerate(noisy(rng, 30.0, 5))],
        *[trial(other, rep=i, tg_tps=v, run_id="x", engine=HOSTILE, device_model="<i>phone</i>")
          for i, v in enumerate(noisy(rng, 10.0, 5))],
    ])
    data: ReportData = build_report_data(ReportOptions(tmp_path / "r"))
    assert data.engines.present and len(data.engines.rows) == 1
    html = render_report(data)
    section = html[html.index('<section id="engines">'):html.index('<section id="history">')]
    assert "<script" not in html.lower() and "<b>" not in html and "<i>phone" not in html
    assert "engines/&lt;script&gt;alert(1)&lt;/script&gt;.yaml" in section
    assert "rel&lt;b&gt; [engines/&lt;script&gt;" in section
    assert "&lt;i&gt;phone&lt;/i&gt; · SER1" in section
    assert "-66" in section  # the other engine's tg change against rel
    assert 'class="n regression"' in section


def test_one_engine_has_no_engine_section(report_data: ReportData, report_html: str) -> None:
    assert not report_data.engines.present
    assert 'id="engines"' not in report_html and 'href="#engines"' not in report_html
