"""The analysis commands through click: exit codes, exact lines, JSON and JUnit."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from harness.cli import analysis as cli
from harness.store import write_part

from .factory import START, ab_store, cell, noisy, run_analysis, trial, write

run = run_analysis


def test_compare_calls_a_slower_build_a_regression_and_fails_its_gate(tmp_path: Path) -> None:
    ab_store(tmp_path, drop=0.08)
    result = run("compare", "--results", str(tmp_path), "--baseline", "base", "--candidate",
                 "cand", "--metric", "tg_tps", "--gate", "tg_tps:-3%",
                 "--junit", str(tmp_path / "out.xml"))
    assert result.exit_code == 1, result.output
    assert "4 comparisons: 4 regression" in result.output.splitlines()
    assert "gates: 4 failed of 4 checks" in result.output.splitlines()
    assert result.output.count("FAIL tg_tps:-3% failed on SER") == 4
    root = ET.parse(tmp_path / "out.xml").getroot()
    assert (root.get("tests"), root.get("failures")) == ("4", "4")
    case = root.find("testsuite/testcase")
    assert case is not None and case.get("classname") == "harness.compare.SER1"
    assert case.find("failure") is not None


def test_an_aa_comparison_passes_the_gate(tmp_path: Path) -> None:
    ab_store(tmp_path, drop=0.0, seed=3)
    result = run("compare", "--results", str(tmp_path), "--baseline", "base", "--candidate",
                 "cand", "--gate", "tg_tps:-3%", "--gate", "peak_pss_bytes:+5%", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["passed"] is True and doc["metrics"] == ["tg_tps", "pp_tps", "peak_pss"]
    assert "regression" not in doc["verdicts"]
    assert len(doc["cells"]) == 12 and len(doc["gates"]) == 8
    assert {c["device"] for c in doc["cells"]} == {"SER1", "SER2"}


def test_junit_without_gates_has_no_failures(tmp_path: Path) -> None:
    ab_store(tmp_path, drop=0.08)
    result = run("compare", "--results", str(tmp_path), "--baseline", "base", "--candidate",
                 "cand", "--junit", str(tmp_path / "j.xml"))
    assert result.exit_code == 0
    root = ET.parse(tmp_path / "j.xml").getroot()
    assert (root.get("tests"), root.get("failures")) == ("12", "0")


@pytest.mark.parametrize(("args", "line"), [
    (["--gate", "tg_tps-3"], "Error: bad gate 'tg_tps-3': expected METRIC:-N%"),
    (["--metric", "speed"], "Error: unknown metric 'speed'"),
    (["--candidate", "nope"], "Error: --candidate 'nope': no trials of that build"),
])
def test_bad_input_exits_2_with_one_line(tmp_path: Path, args: list[str], line: str) -> None:
    ab_store(tmp_path, drop=0.0, reps=3)
    base = ["compare", "--results", str(tmp_path), "--baseline", "base", "--candidate", "cand"]
    result = run(*base, *args)
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert result.output.startswith(line)


def test_compare_on_a_folder_without_a_store_exits_2(tmp_path: Path) -> None:
    result = run("compare", "--results", str(tmp_path), "--baseline", "a", "--candidate", "b")
    assert result.exit_code == 2 and "no results store here" in result.output


def _history_store(root: Path, step_night: int | None, nights: int = 40) -> None:
    rng = np.random.default_rng(11)
    for night in range(nights):
        after = step_night is not None and night >= step_night
        build = f"n{night:02d}"
        c = cell(build=build)
        when = START + timedelta(days=night)
        values = noisy(rng, 20.0 * (0.93 if after else 1.0), 3)
        write(root, [trial(c, run_id=f"r{night}", rep=i, tg_tps=v, started_at=when)
                     for i, v in enumerate(values)], run_id=f"r{night}", when=when)


def test_history_reports_an_injected_step_once_with_its_builds(tmp_path: Path) -> None:
    _history_store(tmp_path, step_night=25)
    result = run("history", "--results", str(tmp_path), "--json")
    assert result.exit_code == 0, result.output
    (series,) = json.loads(result.output)["series"]
    assert len(series["nights"]) == 40
    (change,) = series["change_points"]
    assert (change["index"], change["build_before"], change["build_after"]) == (25, "n24", "n25")
    assert (change["night_before"], change["night_after"]) == ("2026-03-25", "2026-03-26")
    assert change["magnitude"] == pytest.approx(-0.07, abs=0.01)
    text = run("history", "--results", str(tmp_path))
    assert text.output.splitlines()[-1] == "1 series, 1 change points"


def test_history_of_a_flat_series_has_no_change_point(tmp_path: Path) -> None:
    _history_store(tmp_path, step_night=None)
    result = run("history", "--results", str(tmp_path), "--device", "SER1")
    assert result.output.splitlines() == ["1 series, 0 change points"]


def test_recommend_prints_picks_and_the_memory_source(tmp_path: Path) -> None:
    small, big = cell(quant="Q4_K_M"), cell(quant="Q8_0")
    write(tmp_path, [trial(small, tg_tps=30.0, peak_pss_bytes=1 << 30),
                     trial(big, tg_tps=20.0, peak_pss_bytes=3 << 30)])
    result = run("recommend", "--results", str(tmp_path), "--device", "SER1",
                 "--memory", "3.5GiB", "--reserve", "1GiB", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["memory_source"] == "available memory from --memory"
    assert [p["quant"] for p in doc["picks"]] == ["Q4_K_M"]
    assert doc["rejected"][0]["reason_code"] == "over_budget"
    estimated = run("recommend", "--results", str(tmp_path), "--device", "SER1")
    assert estimated.output.splitlines()[0] == (
        "SER1: available memory estimated as 60% of total RAM 8.0 GiB (pass --memory to set it)")
    tight = run("recommend", "--results", str(tmp_path), "--device", "SER1", "--memory", "1GiB")
    assert tight.output.splitlines()[-1].startswith("nothing fits; turn n_ctx first:")


def test_recommend_for_an_unknown_device_exits_2(tmp_path: Path) -> None:
    write(tmp_path, [trial()])
    result = run("recommend", "--results", str(tmp_path), "--device", "nokia-3310")
    assert result.exit_code == 2
    assert "neither a serial in the store (serials: SER1) nor a device profile" in result.output


def test_export_and_import_commands(tmp_path: Path) -> None:
    ab_store(tmp_path / "a", drop=0.0, reps=3, devices=("SER1",), quants=("Q8_0",))
    out = tmp_path / "x.jsonl"
    exported = run("export", "--results", str(tmp_path / "a"), "--format", "llama-bench-jsonl",
                   "-o", str(out))
    assert exported.output.endswith(f"wrote 12 llama-bench records to {out}\n")
    # base and cand share one commit: each gets a hash of its build id, printed
    assert exported.output.count("(a hash of the build id: commit abc1234 is shared") == 2
    imported = run("import", str(out), "--results", str(tmp_path / "b"), "--run-id", "imp1")
    assert imported.output == f"imported 6 trials into {tmp_path / 'b'} (run id imp1)\n"
    missing = run("import", str(tmp_path / "none.jsonl"), "--results", str(tmp_path / "b"))
    assert missing.exit_code == 2 and "none.jsonl: no such file" in missing.output


@dataclass(frozen=True)
class FakeSummary:
    run_id: str


def test_nightly_compares_with_baseline_and_previous_night_and_exits_by_gates(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results = tmp_path / "results"
    matrix = tmp_path / "m.yaml"
    matrix.write_text("name: fake\n")
    rng = np.random.default_rng(5)
    nights = iter([("nightly-1", 1.0), ("nightly-2", 0.9)])

    def fake_run(matrix_path: Path, root: Path) -> FakeSummary:
        build, factor = next(nights)
        run_id = f"run-{build}"
        day = START + timedelta(days=int(build[-1]))
        records = []
        for name, f in (("release", 1.0), (build, factor)):
            records += [trial(cell(build=name), run_id=run_id, rep=i, tg_tps=v, started_at=day)
                        for i, v in enumerate(noisy(rng, 20.0 * f, 8))]
        write_part(root, "trials", records, run_id, when=day)
        return FakeSummary(run_id)

    monkeypatch.setattr(cli, "make_runner", lambda devices, profile: fake_run)
    monkeypatch.setattr(cli, "report_step", lambda: None)
    args = ["nightly", str(matrix), "--baseline", "release", "--results", str(results),
            "--gate", "tg_tps:-3%", "--metric", "tg_tps", "--reports", str(tmp_path / "reports")]
    first = run(*args)
    assert first.exit_code == 0, first.output
    assert "note: no previous night in the store: nothing to compare tonight against" in (
        first.output.splitlines())
    second = run(*args, "--json")
    assert second.exit_code == 1, second.output
    doc = json.loads(second.output)
    assert [c["title"] for c in doc["comparisons"]] == [
        "nightly-2 vs baseline release", "nightly-2 vs previous night (nightly-1, 2026-03-02)"]
    assert all(not c["passed"] for c in doc["comparisons"])
    assert doc["notes"] == ["no `harness report` command installed: dated report skipped"]
    assert doc["night"] == "2026-03-03"


def test_every_command_has_an_example() -> None:
    for command in cli.COMMANDS:
        result = run(command.name or "", "--help")
        assert result.exit_code == 0 and "Example:" in result.output, command.name


PY = "llama-cpp-python"


def _engine_store(root: Path) -> None:
    """Builds base and cand of llama-bench, and llama-cpp-python (device-python) 30% slower."""
    ab_store(root, drop=0.0, reps=6, devices=("SER1",), quants=("Q4_K_M",))
    rng = np.random.default_rng(4)
    py = cell(build="device-python", engine=PY)
    write(root, [trial(py, run_id="py", rep=i, tg_tps=v) for i, v in
                 enumerate(noisy(rng, 14.0, 6))], run_id="py")


def test_compare_two_engines_names_both_sides(tmp_path: Path) -> None:
    _engine_store(tmp_path)
    result = run("compare", "--results", str(tmp_path), "--baseline", "base",
                 "--candidate-engine", PY, "--metric", "tg_tps", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert (doc["baseline"], doc["baseline_engine"]) == ("base", "llama-bench")
    assert (doc["candidate"], doc["candidate_engine"]) == ("device-python", PY)
    (one,) = doc["cells"]
    assert one["verdict"] == "regression" and one["ratio"] < 0.75
    table = run("compare", "--results", str(tmp_path), "--baseline", "base",
                "--candidate-engine", PY, "--metric", "tg_tps")
    assert f"device-python [{PY}] vs base [llama-bench]" in table.output
    assert "1 comparisons: 1 regression" in table.output.splitlines()


@pytest.mark.parametrize(("args", "line"), [
    (["--baseline-engine", "llama-bench", "--candidate-engine", PY],
     "Error: --baseline-engine 'llama-bench' has trials of several builds (base, cand): "
     "pass --baseline BUILD"),
    (["--baseline", "base", "--candidate-engine", "mlc"],
     f"Error: --candidate-engine 'mlc': no trials of that engine (engines: llama-bench, {PY})"),
    (["--baseline", "base"], "Error: name a side: pass --candidate BUILD or --candidate-engine "
                             "ENGINE"),
    (["--baseline", "base", "--candidate", "cand", "--candidate-engine", PY],
     f"Error: --candidate-engine '{PY}': build 'cand' has no trials of that engine "
     "(its engines: llama-bench)"),
])
def test_ambiguous_or_absent_sides_exit_2_with_one_line(tmp_path: Path, args: list[str],
                                                        line: str) -> None:
    _engine_store(tmp_path)
    result = run("compare", "--results", str(tmp_path), *args)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [line]


def test_a_build_run_by_two_engines_needs_the_engine_named(tmp_path: Path) -> None:
    ab_store(tmp_path, drop=0.0, reps=4, devices=("SER1",), quants=("Q4_K_M",))
    yaml_engine = "engines/x.yaml"
    write(tmp_path, [trial(cell(build="base", engine=yaml_engine), run_id="x", rep=i,
                           engine=yaml_engine) for i in range(4)], run_id="x")
    result = run("compare", "--results", str(tmp_path), "--baseline", "base", "--candidate",
                 "cand")
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"Error: --baseline 'base' has trials of several engines ({yaml_engine}, llama-bench): "
        "pass --baseline-engine ENGINE")
    named = run("compare", "--results", str(tmp_path), "--baseline", "base",
                "--baseline-engine", "llama-bench", "--candidate", "cand", "--json")
    assert named.exit_code == 0 and len(json.loads(named.output)["cells"]) == 3


def test_compare_help_shows_the_engine_example() -> None:
    result = run("compare", "--help")
    assert "harness compare --baseline-engine llama-bench --candidate-engine" in result.output
    assert "--candidate-engine ENGINE" in result.output


def test_recommend_table_names_build_and_engine_and_filters(tmp_path: Path) -> None:
    _engine_store(tmp_path)
    table = run("recommend", "--results", str(tmp_path), "--device", "SER1", "--memory", "8GiB")
    assert table.exit_code == 0, table.output
    assert "device-python" in table.output and PY in table.output
    assert "3 configs fit, 0 rejected" in table.output
    only = run("recommend", "--results", str(tmp_path), "--device", "SER1", "--engine", PY,
               "--json")
    assert [(p["build_id"], p["engine"]) for p in json.loads(only.output)["picks"]] == [
        ("device-python", PY)]
    builds = run("recommend", "--results", str(tmp_path), "--device", "SER1", "--build", "cand",
                 "--build", "base", "--json")
    assert {p["build_id"] for p in json.loads(builds.output)["picks"]} == {"base", "cand"}


def test_nightly_compares_each_engine_with_the_baselines_same_engine(tmp_path: Path) -> None:
    from harness.analysis.frames import Side
    from harness.analysis.nightly import run_nightly

    rng = np.random.default_rng(8)

    def fake_run(matrix_path: Path, root: Path) -> FakeSummary:
        records = []
        for build, engine, centre in (("release", "llama-bench", 20.0),
                                      ("nightly-1", "llama-bench", 20.0),
                                      ("nightly-1", "engines/x.yaml", 9.0),
                                      ("device-python", PY, 14.0)):
            records += [trial(cell(build=build, engine=engine), run_id="r1", rep=i, tg_tps=v,
                              engine=engine) for i, v in enumerate(noisy(rng, centre, 6))]
        write_part(root, "trials", records, "r1", when=START)
        return FakeSummary("r1")

    result = run_nightly(tmp_path / "m.yaml", baseline="release", results=tmp_path / "res",
                         run=fake_run, metrics=("tg_tps",))
    assert [c.title for c in result.comparisons] == ["nightly-1 vs baseline release"]
    (only,) = result.comparisons
    assert (only.result.baseline_side, only.result.candidate_side) == (
        Side("release"), Side("nightly-1"))
    assert result.notes[:2] == (
        f"device-python [{PY}]: baseline release has no trials of engine {PY}: not compared",
        "nightly-1 [engines/x.yaml]: baseline release has no trials of engine engines/x.yaml: "
        "not compared")
