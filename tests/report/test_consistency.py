"""The report says what the commands say: one store with two builds and two engines, the
report's verdicts against `harness compare --json`, its picks against `harness recommend --json`,
its history against `harness history --json`, its engine verdicts against `compare` between the
engines."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from analysis.factory import START, cell, noisy, trial, write
from click.testing import CliRunner

from harness.cli import HarnessGroup
from harness.cli.analysis import COMMANDS
from harness.records import TrialRecord
from harness.report import ReportOptions, build_report_data
from harness.report.html import render_report
from harness.report.model import ReportData

PY = "llama-cpp-python"
GIB = 1 << 30


def _side(c: Any, serial: str, centre: float, rng: np.random.Generator, day: int,
          **extra: Any) -> list[TrialRecord]:
    when = START + timedelta(days=day)
    return [trial(c, serial=serial, rep=i, run_id=f"{c.build}-{day}", started_at=when,
                  tg_tps=v, pp_tps=v * 20, peak_pss_bytes=int(GIB * rng.lognormal(0, 0.01)),
                  **extra)
            for i, v in enumerate(noisy(rng, centre, 8))]


def _write_store(root: Path) -> None:
    """SER1, SER2 x configs Q4_K_M, Q8_0 with builds b1 and b2 (b2 8% slower on Q4_K_M);
    llama-cpp-python (build device-python) on Q4_K_M only, 30% slower; b2 of Q8_0 was killed
    once on SER2."""
    rng = np.random.default_rng(3)
    records: list[TrialRecord] = []
    for serial in ("SER1", "SER2"):
        for quant, slower in (("Q4_K_M", 0.92), ("Q8_0", 1.0)):
            records += _side(cell(build="b1", quant=quant), serial, 20.0, rng, 0)
            records += _side(cell(build="b2", quant=quant), serial, 20.0 * slower, rng, 1)
        records += _side(cell(build="device-python", engine=PY), serial, 14.0, rng, 2)
    records.append(trial(cell(build="b2", quant="Q8_0"), serial="SER2", rep=9, run_id="oom",
                         outcome="oom_killed", tg_tps=None, pp_tps=None,
                         started_at=START + timedelta(days=1)))
    for day in sorted({r.started_at for r in records}):
        write(root, [r for r in records if r.started_at == day], run_id=f"d{day:%d}", when=day)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))  # no quality scores anywhere
    root = tmp_path / "results"
    _write_store(root)
    return root


def _cli(*args: str) -> Any:
    group = HarnessGroup("harness")
    for command in COMMANDS:
        group.add_command(command)
    result = CliRunner().invoke(group, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _verdicts(doc: dict[str, Any]) -> dict[tuple[str, str, str], tuple[str, float]]:
    return {(c["device"], c["config_id"], c["metric"]): (c["verdict"], c["ratio"])
            for c in doc["cells"]}


def test_report_verdicts_picks_and_history_equal_the_commands(store: Path) -> None:
    data: ReportData = build_report_data(ReportOptions(store))
    section = data.comparison
    assert (section.baseline, section.baseline_engine) == ("b1", "llama-bench")
    assert (section.candidate, section.candidate_engine) == ("b2", "llama-bench")
    doc = _cli("compare", "--results", str(store), "--baseline", "b1", "--candidate", "b2",
               "--json")
    assert (doc["baseline_engine"], doc["candidate_engine"]) == ("llama-bench", "llama-bench")
    report = {(r.serial, r.config_id, r.metric): (r.verdict, r.ratio) for r in section.rows}
    assert report == _verdicts(doc) and len(report) == 2 * 2 * 3
    assert sum(v == "regression" for v, _ in report.values()) >= 2  # b2 on Q4_K_M, both phones
    assert [m for m, _ in section.counts] == doc["metrics"]
    for metric, counts in section.counts:
        for verdict, n in counts.items():
            assert n == sum(c["metric"] == metric and c["verdict"] == verdict
                            for c in doc["cells"])

    assert [d.serial for d in data.recommendations] == ["SER1", "SER2"]
    for device in data.recommendations:
        picks = _cli("recommend", "--results", str(store), "--device", device.serial, "--json")
        assert [json.loads(json.dumps(asdict(r.pick))) for r in device.items] == picks["picks"]
        assert device.memory_source == picks["memory_source"]
        assert device.rejected == len(picks["rejected"])
        best = device.items[0].pick
        assert (best.build_id, best.engine) == ("b1", "llama-bench") and best.peak_bytes
    sides = {(p.pick.build_id, p.pick.engine) for d in data.recommendations for p in d.items}
    assert ("device-python", PY) in sides  # the other engine is a candidate of its own

    history = _cli("history", "--results", str(store), "--json")
    assert data.history.series_checked == len(history["series"]) == 2 * 2 + 2
    assert sorted({s["engine"] for s in history["series"]}) == ["llama-bench", PY]


def test_engine_section_verdicts_equal_compare_between_the_engines(store: Path) -> None:
    data = build_report_data(ReportOptions(store))
    engines = data.engines
    assert engines.present and engines.engines == ("llama-bench", PY)
    assert engines.sides == ("b1 [llama-bench]", "b2 [llama-bench]",
                             f"device-python [{PY}]")
    assert engines.comparisons == (f"device-python [{PY}] vs b1 [llama-bench]",
                                   f"device-python [{PY}] vs b2 [llama-bench]")
    assert [r.config for r in engines.rows] == [engines.rows[0].config] * 2  # Q4_K_M only
    doc = _cli("compare", "--results", str(store), "--baseline", "b2", "--candidate-engine", PY,
               "--json")
    assert (doc["candidate"], doc["candidate_engine"]) == ("device-python", PY)
    want = _verdicts(doc)
    for row, serial in zip(engines.rows, ("SER1", "SER2"), strict=True):
        for metric, got in zip(engines.metrics, row.verdicts[1], strict=True):
            key = (serial, doc["cells"][0]["config_id"], metric)
            assert got is not None and (got[1], got[0]) == want[key]
        tg = row.verdicts[1][engines.metrics.index("tg_tps")]
        assert tg is not None and tg[1] == "regression" and tg[0] < 0.8
        b1, b2, python = row.figures
        assert b1 and b2 and python and python[0] and b1[0] and python[0] < 0.8 * b1[0]
    html = render_report(data)
    section = html[html.index('<section id="engines">'):html.index('<section id="history">')]
    assert "<h2>Engines</h2>" in section and f"device-python [{PY}] vs b2 [llama-bench]" in section
    assert section.count("regression") >= 4 and 'href="#engines"' in html
