"""A small synthetic store shared by the report tests, with hostile device names."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.report import ReportOptions, build_report_data
from harness.report.model import ReportData
from harness.testing.synthstore import SynthSpec, SynthSummary, write_synthetic_store

HOSTILE = ("<b>x</b>", "Pixel <script>alert(1)</script>", "Galaxy $x$ & S23")
SPEC = SynthSpec(devices=3, nights=12, reps=3, device_names=HOSTILE)


@pytest.fixture(scope="session")
def synth_spec() -> SynthSpec:
    return SPEC


@pytest.fixture(scope="session")
def synth_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SynthSummary]:
    root = tmp_path_factory.mktemp("synth") / "results"
    return root, write_synthetic_store(root, SPEC)


@pytest.fixture(scope="session")
def report_data(synth_store: tuple[Path, SynthSummary]) -> ReportData:
    return build_report_data(ReportOptions(synth_store[0]))


@pytest.fixture(scope="session")
def report_html(report_data: ReportData) -> str:
    from harness.report.html import render_report

    return render_report(report_data)
