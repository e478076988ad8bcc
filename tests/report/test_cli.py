"""`harness report` through click: output file, --json, and user errors as one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import click
from click.testing import CliRunner

from harness.cli import HarnessGroup
from harness.cli.report import COMMANDS, report
from harness.testing.synthstore import SynthSummary


def _cli() -> click.Group:
    """The command under the real error handling, registered or not in harness.cli yet."""
    group = HarnessGroup()
    group.add_command(report)
    return group


def test_report_writes_html_and_json_summary(
    synth_store: tuple[Path, SynthSummary], tmp_path: Path
) -> None:
    root, written = synth_store
    out = tmp_path / "reports" / "r.html"
    result = CliRunner().invoke(_cli(), ["report", "--results", str(root), "-o", str(out),
                                         "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["trials"] == written.trials and summary["outcomes"] == written.outcomes
    assert (summary["baseline"], summary["candidate"]) == ("b4100", "b4101")
    assert (summary["baseline_engine"], summary["engines"]) == ("llama-bench", ["llama-bench"])
    assert summary["verdicts"]["tg_tps"]["regression"] >= 32
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert summary["bytes"] == out.stat().st_size
    assert not list(out.parent.glob(".*.tmp"))


def test_empty_store_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "results" / "trials").mkdir(parents=True)
    result = CliRunner().invoke(_cli(), ["report", "--results", str(tmp_path / "results"),
                                         "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "no trials in" in lines[0] and "Traceback" not in result.output
    assert not (tmp_path / "r.html").exists()


def test_bad_filters_exit_2(synth_store: tuple[Path, SynthSummary], tmp_path: Path) -> None:
    root = str(synth_store[0])
    out = str(tmp_path / "r.html")
    both = CliRunner().invoke(_cli(), ["report", "--results", root, "--run", "x", "--since",
                                       "2026-01-01", "-o", out])
    assert both.exit_code == 2 and "exclude each other" in both.output
    date = CliRunner().invoke(_cli(), ["report", "--results", root, "--since", "yesterday",
                                       "-o", out])
    assert date.exit_code == 2 and "YYYY-MM-DD" in date.output
    build = CliRunner().invoke(_cli(), ["report", "--results", root, "--baseline", "nope",
                                        "-o", out])
    assert build.exit_code == 2 and "--baseline 'nope'" in build.output
    engine = CliRunner().invoke(_cli(), ["report", "--results", root, "--candidate-engine",
                                         "mlc", "-o", out])
    assert engine.exit_code == 2 and engine.output.strip().splitlines() == [
        "Error: --candidate-engine 'mlc': no trials of that engine (engines: llama-bench)"]
    several = CliRunner().invoke(_cli(), ["report", "--results", root, "--baseline-engine",
                                          "llama-bench", "-o", out])
    assert several.exit_code == 2 and "has trials of several builds (b4100, b4101)" in (
        several.output)


def test_help_has_an_example_and_command_is_listed() -> None:
    result = CliRunner().invoke(_cli(), ["report", "--help"])
    assert result.exit_code == 0 and "Example:" in result.output
    assert [report] == COMMANDS
