"""The nightly alert document: the pure builder on hand-made frames, then `harness nightly`."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import Result

from harness.analysis.ab import BuildComparison, compare_builds
from harness.analysis.alerts import AlertDocument, build_alerts, md, table
from harness.analysis.nightly import on_alert_command, run_on_alert, write_alerts
from harness.analysis.trend import Change, NightPoint, Series
from harness.cli import analysis as cli
from harness.records import TrialRecord
from harness.store import write_part

from .factory import START, cell, noisy, run_analysis, trial

TONIGHT = "2026-03-03"
DAY = timedelta(days=1)


def frame(records: Sequence[TrialRecord]) -> pd.DataFrame:
    return pd.DataFrame([dataclasses.asdict(r) for r in records])


def night_of(run_id: str, days: int, serial: str = "SER1", build: str = "b1", reps: int = 3,
             **overrides: object) -> list[TrialRecord]:
    c = cell(build=build, **{k: v for k, v in overrides.items() if k in ("quant", "n_ctx")})
    extra = {k: v for k, v in overrides.items() if k not in ("quant", "n_ctx")}
    return [trial(c, run_id=run_id, serial=serial, rep=i, started_at=START + days * DAY,
                  **extra) for i in range(reps)]


def alerts(trials: pd.DataFrame, run_id: str = "tonight", *,
           comparisons: Sequence[tuple[str, BuildComparison]] = (),
           history: Sequence[Series] = (), previous: Sequence[Series] = (),
           lookback: int = 7) -> AlertDocument:
    return build_alerts(run_id=run_id, night=TONIGHT, trials=trials, comparisons=comparisons,
                        history=history, previous_history=previous, lookback_nights=lookback)


# --- the builder, one category at a time ---------------------------------------------------

def test_an_unchanged_night_lists_nothing() -> None:
    trials = frame([*night_of("r1", 1), *night_of("tonight", 2)])
    doc = alerts(trials)
    assert doc.listed == 0 and set(doc.counts().values()) == {0}
    assert doc.to_markdown() == (f"# Nightly alerts {TONIGHT} (run tonight)\n\n"
                                 "Nothing to report tonight.\n")
    assert doc.to_json()["listed"] == 0 and doc.to_json()["regressions"] == []


def _ab_frame() -> pd.DataFrame:
    rng = np.random.default_rng(2)
    records = []
    for quant, factor in (("Q4_K_M", 0.9), ("Q8_0", 1.1)):
        for build, f in (("base", 1.0), ("cand", factor)):
            records += [trial(cell(build=build, quant=quant), run_id="tonight", rep=i, tg_tps=v,
                              started_at=START + 2 * DAY)
                        for i, v in enumerate(noisy(rng, 20.0 * f, 8))]
    return frame(records)


def test_regressions_and_improvements_carry_the_comparisons_evidence() -> None:
    trials = _ab_frame()
    result = compare_builds(trials, "base", "cand", ("tg_tps",))
    doc = alerts(trials, comparisons=[("cand vs baseline base", result)])
    (regression,) = doc.regressions
    (improvement,) = doc.improvements
    assert (regression.device, regression.metric, regression.verdict) == (
        "SER1", "tg_tps", "regression")
    assert "Q4_K_M" in regression.label and "Q8_0" in improvement.label
    assert regression.ratio is not None and 0.85 < regression.ratio < 0.95
    assert regression.ci_low is not None and regression.ci_high is not None
    assert regression.ci_low < regression.ratio < regression.ci_high < 1.0
    assert (regression.n_baseline, regression.n_candidate) == (8, 8)
    assert regression.p_adjusted is not None and regression.p_adjusted < 0.05
    assert (regression.baseline, regression.candidate) == ("base [llama-bench]",
                                                           "cand [llama-bench]")
    assert regression.comparison == "cand vs baseline base"
    data = doc.to_json()
    assert data["counts"]["regressions"] == 1 and data["listed"] == 2
    assert data["regressions"][0]["n_candidate"] == 8
    text = doc.to_markdown()
    assert "## Regressions (1)" in text and "## Improvements (1)" in text
    assert "8/8" in text and "regression" in text


def _series(device: str, night_after: str, magnitude: float = -0.1) -> Series:
    points = tuple(NightPoint(f"2026-02-{d:02d}", 20.0, 5, "b") for d in range(20, 28))
    change = Change(index=4, night_before="2026-02-23", night_after=night_after,
                    build_before="n-3", build_after="n-4", before_mean=20.0,
                    after_mean=20.0 * (1 + magnitude), magnitude=magnitude, p_value=1e-5)
    return Series(device, "cfg", "tiny Q4_K_M", "tg_tps", points, (change,))


def test_only_change_points_first_detected_tonight_are_new() -> None:
    trials = frame([*night_of("r1", 1), *night_of("tonight", 2)])
    old, new = _series("SER1", "2026-02-20"), _series("SER2", "2026-02-24")
    doc = alerts(trials, history=[old, new], previous=[old])
    (change,) = doc.change_points
    assert (change.device, change.change.night_after, change.change.build_after) == (
        "SER2", "2026-02-24", "n-4")
    assert change.change.magnitude == pytest.approx(-0.1)
    assert doc.to_json()["change_points"][0]["p_value"] == pytest.approx(1e-5)
    assert "## New change points (1)" in doc.to_markdown()
    assert "1 listed: 1 new change points." in doc.to_markdown()


def test_a_cell_that_was_ok_and_failed_tonight_is_a_new_failure() -> None:
    trials = frame([
        *night_of("r1", 1), *night_of("r1", 1, quant="Q8_0"),
        *night_of("r1", 1, quant="Q5_K_M", outcome="crashed"),  # failed before: not new
        *night_of("r1", 1, n_ctx=4096),
        *night_of("tonight", 2, outcome="oom_killed", error="lmkd killed pid 42"),
        *night_of("tonight", 2, quant="Q8_0"),
        *night_of("tonight", 2, quant="Q5_K_M", outcome="crashed"),
        *night_of("tonight", 2, n_ctx=4096, outcome="skipped_infeasible", reps=1),  # a plan
    ])
    doc = alerts(trials)
    (failure,) = doc.failures
    assert (failure.device, failure.engine, failure.builds) == ("SER1", "llama-bench", ("b1",))
    assert failure.outcomes == {"oom_killed": 3} and failure.trials == 3
    assert failure.error == "lmkd killed pid 42"
    assert (failure.last_ok_run, failure.last_ok_night) == ("r1", "2026-03-02")
    assert "Q4_K_M" in failure.label
    assert doc.to_json()["failures"][0]["builds"] == ["b1"]
    assert "oom\\_killed 3" in doc.to_markdown()


def test_a_phone_or_a_cell_seen_lately_but_not_tonight_is_missing() -> None:
    trials = frame([
        *night_of("r1", 1), *night_of("r1", 1, quant="Q8_0"),
        *night_of("r1", 1, serial="SER2"),
        *night_of("old", -20, serial="SER3"),  # outside the 7-night window
        *night_of("tonight", 2),
    ])
    doc = alerts(trials)
    (phone,) = doc.missing_devices
    assert (phone.device, phone.device_model, phone.cells, phone.last_run, phone.last_night) == (
        "SER2", "Pixel Test", 1, "r1", "2026-03-02")
    (missing,) = doc.missing_cells
    assert (missing.device, missing.engine, missing.last_night) == ("SER1", "llama-bench",
                                                                    "2026-03-02")
    assert "Q8_0" in missing.label
    assert {d.device for d in alerts(trials, lookback=30).missing_devices} == {"SER2", "SER3"}
    text = doc.to_markdown()
    assert "## Missing phones (1)" in text and "## Missing cells (1)" in text


# --- Markdown escaping ---------------------------------------------------------------------

def _columns(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def test_markdown_escapes_pipes_backticks_and_newlines_from_data() -> None:
    assert md("a|b `c`\nd_e") == "a\\|b \\`c\\` d\\_e"
    lines = table(("device", "error"), [["SER|1", "boom `x`\nsecond | line"]])
    assert len(lines) == 3 and all(_columns(line) == 3 for line in lines[::2])
    trials = frame([*night_of("r1", 1, serial="S|1"),
                    *night_of("tonight", 2, serial="S|1", outcome="crashed",
                              error="SIGSEGV | in `ggml`\n  at frame 2")])
    text = alerts(trials).to_markdown()
    rows = [line for line in text.splitlines() if line.startswith("| S")]
    assert rows == [rows[0]] and _columns(rows[0]) == 9
    assert "S\\|1" in rows[0] and "SIGSEGV \\| in \\`ggml\\` at frame 2" in rows[0]


# --- the edge: writing and the command -----------------------------------------------------

def test_the_document_is_written_as_json_and_markdown_beside_it(tmp_path: Path) -> None:
    doc = AlertDocument("tonight", TONIGHT)
    json_path, md_path = write_alerts(doc, tmp_path / "a" / "alerts.json")
    assert md_path == tmp_path / "a" / "alerts.md"
    assert json.loads(json_path.read_text())["night"] == TONIGHT
    assert md_path.read_text() == doc.to_markdown()


def test_on_alert_substitutes_braces_or_appends_the_path() -> None:
    path = Path("/tmp/a b/alerts.json")
    assert on_alert_command("notify {} --now", path) == "notify '/tmp/a b/alerts.json' --now"
    assert on_alert_command("notify", path) == "notify '/tmp/a b/alerts.json'"


def test_on_alert_failure_and_timeout_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    assert run_on_alert("true", path, 10) is None
    failed = run_on_alert("echo first >&2; echo nope >&2; exit 3", path, 10)
    assert failed is not None and "exited 3: nope" in failed and "\n" not in failed
    slow = run_on_alert("sleep 30; #", path, 0.3)
    assert slow is not None and "timed out after 0.3s" in slow


# --- `harness nightly` ---------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class FakeSummary:
    run_id: str


def _fake_nights(monkeypatch: pytest.MonkeyPatch) -> None:
    """Night 1: nightly-1 on SER1 and SER2, as fast as release; night 2: nightly-2 10% slower,
    and SER2 produced nothing."""
    rng = np.random.default_rng(5)
    nights = iter([("nightly-1", 1.0, ("SER1", "SER2")), ("nightly-2", 0.9, ("SER1",))])

    def fake_run(matrix_path: Path, root: Path) -> FakeSummary:
        build, factor, serials = next(nights)
        run_id = f"run-{build}"
        day = START + timedelta(days=int(build[-1]))
        records = [trial(cell(build=name), run_id=run_id, serial=serial, rep=i, tg_tps=v,
                         started_at=day)
                   for serial in serials for name, f in (("release", 1.0), (build, factor))
                   for i, v in enumerate(noisy(rng, 20.0 * f, 8))]
        write_part(root, "trials", records, run_id, when=day)
        return FakeSummary(run_id)

    monkeypatch.setattr(cli, "make_runner", lambda devices, profile: fake_run)
    monkeypatch.setattr(cli, "report_step", lambda: None)


def _nightly(tmp_path: Path, *extra: str) -> Result:
    matrix = tmp_path / "m.yaml"
    matrix.write_text("name: fake\n")
    return run_analysis(
        "nightly", str(matrix), "--baseline", "release", "--results", str(tmp_path / "results"),
        "--reports", str(tmp_path / "reports"), "--metric", "tg_tps", "--gate", "tg_tps:-3%",
        *extra)


def test_a_regressed_build_and_a_missing_phone_are_alerted_and_on_alert_runs_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nights(monkeypatch)
    log = tmp_path / "calls.log"
    on_alert = ["--on-alert", f"echo >> {shlex.quote(str(log))}"]
    first = _nightly(tmp_path, *on_alert)
    assert first.exit_code == 0, first.output
    quiet = tmp_path / "reports" / "nightly-2026-03-02-alerts.json"
    assert json.loads(quiet.read_text())["listed"] == 0
    assert "Nothing to report tonight." in quiet.with_suffix(".md").read_text()
    assert not log.exists()  # nothing listed: the command did not run
    second = _nightly(tmp_path, *on_alert, "--json")
    assert second.exit_code == 1, second.output  # the gate failed, as without alerts
    path = tmp_path / "reports" / "nightly-2026-03-03-alerts.json"
    assert json.loads(second.stdout)["alerts"]["path"] == str(path)
    assert log.read_text().splitlines() == [str(path)]
    doc = json.loads(path.read_text())
    assert {(r["device"], r["candidate"]) for r in doc["regressions"]} == {
        ("SER1", "nightly-2 [llama-bench]"), ("SER1", "nightly-2@2026-03-03 [llama-bench]")}
    assert [d["device"] for d in doc["missing_devices"]] == ["SER2"]
    text = path.with_suffix(".md").read_text()
    assert "## Regressions (2)" in text and "## Missing phones (1)" in text
    assert "nightly-2 vs baseline release" in text


def test_a_failing_on_alert_is_one_stderr_line_and_keeps_the_exit_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nights(monkeypatch)
    alerts_file = tmp_path / "out" / "tonight.json"
    assert _nightly(tmp_path).exit_code == 0
    second = _nightly(tmp_path, "--alerts", str(alerts_file), "--on-alert", "exit 4 #")
    assert second.exit_code == 1, second.output
    assert second.stderr.splitlines() == [
        f"warning: --on-alert: {'exit 4 # ' + shlex.quote(str(alerts_file))!r} exited 4"]
    assert f"alerts: {alerts_file} (" in second.stdout
    assert alerts_file.with_suffix(".md").is_file()


def test_nightly_brings_the_dashboard_up_to_date_and_refuses_a_foreign_folder_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--site: each night's run ends with the dashboard rebuilt from the store, the night's
    alert document linked from its night page; a --site folder holding other files is one line
    and exit 2 before anything runs, and its files are kept."""
    _fake_nights(monkeypatch)
    site = tmp_path / "site"
    first = _nightly(tmp_path, "--site", str(site))
    assert first.exit_code == 0, first.output
    assert f"site: {site} (" in first.stdout
    second = _nightly(tmp_path, "--site", str(site), "--json")
    assert second.exit_code == 1, second.output  # the gate's exit code, as without --site
    built = json.loads(second.stdout)["site"]
    assert built["nights"] == 2 and built["written"] > 0
    night = (site / "nights" / "2026-03-03.html").read_text(encoding="utf-8")
    assert "alerts/nightly-2026-03-03-alerts.json" in night
    assert (site / "alerts" / "nightly-2026-03-03-alerts.json").is_file()
    foreign = tmp_path / "www"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine", encoding="utf-8")
    refused = _nightly(tmp_path, "--site", str(foreign))
    assert refused.exit_code == 2
    assert f"-o {foreign}: the folder holds files but no site.json" in refused.output
    assert [p.name for p in foreign.iterdir()] == ["keep.txt"]


def test_alerts_must_name_a_json_file(tmp_path: Path) -> None:
    result = _nightly(tmp_path, "--alerts", str(tmp_path / "a.md"))
    assert result.exit_code == 2
    assert "name a .json file" in result.output


def test_a_cell_whose_noise_doubled_tonight_is_listed_under_noise_grew() -> None:
    def spread(run_id: str, days: int, cv: float) -> list[TrialRecord]:
        z = np.linspace(-1.6, 1.6, 10)  # the same spread every night, scaled by cv
        return [trial(cell(), run_id=run_id, rep=i, tg_tps=20.0 * float(np.exp(cv * v)),
                      started_at=START + days * DAY) for i, v in enumerate(z)]

    history = [r for d in range(2) for r in spread(f"r{d}", d, 0.02)]
    quiet = alerts(frame([*history, *spread("tonight", 2, 0.02)]))
    assert quiet.noise_grew == () and quiet.to_json()["noise_grew"] == []
    doc = alerts(frame([*history, *spread("tonight", 2, 0.04)]))
    data = doc.to_json()
    assert data["schema_version"] == 2 and data["counts"]["noise_grew"] == 1
    (grown,) = data["noise_grew"]
    assert (grown["device"], grown["metric"], grown["history_nights"]) == ("SER1", "tg_tps", 2)
    assert grown["ratio"] == pytest.approx(2.0, rel=0.05)
    assert "## Noise grew (1)" in doc.to_markdown()
