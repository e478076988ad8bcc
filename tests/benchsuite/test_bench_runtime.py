"""The suite's run time: summary.json and the table carry the total with the quick target (15
minutes on 2 cores for every figure) and every figure's seconds, slowest first (issue 50)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import bench.run as bench_run
from bench.common import Figure


def fake_suite(seconds: dict[str, float]) -> Any:
    def run_suite(names: Any, quick: bool, work: Path) -> tuple[list[Figure], dict[str, Any]]:
        timed = {name: {"seconds": s, "load_1min_before": 1.0, "load_1min_after": 1.0}
                 for name, s in seconds.items() if name in names}
        meta = {"mode": "quick" if quick else "full", "figures": timed,
                "machine": {"cpus": 2, "load_average": [1.0]}}
        return [Figure("1 a figure", 1.0, "ratio", "-", ">= 0.99", True)], meta
    return run_suite


@pytest.mark.parametrize(("argv", "met", "scope"), [
    (["--quick"], True, "quick, every figure"),
    (["--quick", "--only", "push"], None, "quick, 1 figure(s) of the suite"),
    ([], None, "full, every figure")])
def test_the_summary_has_the_total_with_its_target_and_each_figures_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        argv: list[str], met: bool | None, scope: str) -> None:
    seconds = {"sampler": 126.0, "gpusampler": 241.0, "push": 20.0}
    monkeypatch.setattr(bench_run, "RESULTS", tmp_path)
    monkeypatch.setattr(bench_run, "run_suite", fake_suite(seconds))
    prepared: list[list[str]] = []

    def prepare(variants: list[str], builds: Path) -> dict[str, Any]:
        prepared.append(variants)
        return {"seconds": 3.0, "builds": variants, "compiled": variants[-1:]}

    monkeypatch.setattr(bench_run, "prepare", prepare, raising=False)
    assert bench_run.main(argv) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    elapsed = summary["elapsed_s"]
    setup = {"seconds": 3.0, "builds": prepared[0], "compiled": prepared[0][-1:]}
    assert summary["total"] == {"seconds": elapsed, "quick_target_s": 900, "met": met,
                                "setup": setup}
    # the builds are made before the first figure: host-vulkan only when figure 12 runs
    assert prepared == [["host-release"] if "--only" in argv else
                        ["host-release", "host-vulkan"]]
    row = summary["table"][-1]
    assert row["figure"] == f"0 bench run time, {scope}"
    assert row["target"] == "<= 900 s (15 min), quick, every figure"
    assert row["note"] == f"set-up 3 s (compiled: {prepared[0][-1]}); " + (
        "push 20 s" if "--only" in argv else "gpusampler 241 s, sampler 126 s, push 20 s")
    assert f"| 0 bench run time, {scope} |" in (tmp_path / "summary.md").read_text()
    printed = capsys.readouterr().out
    assert "total 0 min 0 s; target <= 900 s (15 min), quick, every figure: " in printed


def test_a_quick_run_over_fifteen_minutes_misses_the_target() -> None:
    from bench.runtime import run_time_figure, total_line

    slow = run_time_figure(1500.0, {"gpusampler": {"seconds": 1400.0}}, True, True,
                           {"seconds": 0.5, "compiled": []})
    assert slow.met is False
    assert total_line(slow) == (
        "total 25 min 0 s; target <= 900 s (15 min), quick, every figure: MISSED; set-up 0 s "
        "(compiled: nothing, all cached); gpusampler 1400 s")


def test_the_builds_needed_are_host_release_for_phones_and_host_vulkan_for_figure_12() -> None:
    from bench.runtime import builds_needed

    phones = {"push", "gpusampler"}
    assert builds_needed(["gpusampler", "push"], phones) == ["host-release", "host-vulkan"]
    assert builds_needed(["report"], phones) == []
