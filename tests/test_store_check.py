"""Nothing dropped from the store quietly (issue 37, item 5): a part that cannot be read, or
whose column cannot be cast, is named by every command that reads the store, shown in a banner
at the top of the report, and listed by `harness store check` (exit 1); the rest is kept."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from analysis.factory import cell, trial, write
from click.testing import CliRunner

from harness import store
from harness.cli import main


def _damaged_store(root: Path) -> tuple[Path, Path]:
    """Six good trials of two builds in one part; a truncated part, and a copy of the good one
    whose tg_tps is text."""
    write(root, [trial(cell(build=b), rep=r, tg_tps=20.0 + r) for b in ("b1", "b2")
                 for r in range(3)])
    folder = root / "trials" / "date=2026-12-05"
    folder.mkdir(parents=True, exist_ok=True)
    truncated = folder / "part-broken-1.parquet"
    truncated.write_bytes(b"PAR1 the rest of this file never arrived")
    good = store.part_files(root, "trials")[0]
    table = pq.read_table(good)
    index = table.column_names.index("tg_tps")
    words = pa.array(["fast"] * table.num_rows, pa.string())
    miscast = folder / "part-miscast-1.parquet"
    pq.write_table(table.set_column(index, "tg_tps", words), miscast)
    return truncated, miscast


def test_store_check_lists_each_part_left_out_and_exits_1(tmp_path: Path) -> None:
    truncated, miscast = _damaged_store(tmp_path / "r")
    result = CliRunner().invoke(main, ["store", "check", "--results", str(tmp_path / "r")])
    assert result.exit_code == 1, result.output
    assert f"left out: {truncated} (trials, rows unknown): unreadable:" in result.stdout
    assert (f"left out: {miscast} (6 rows of trials): column tg_tps cannot be read as double"
            in result.stdout)
    assert result.stdout.endswith("3 parts read, 2 left out\n")
    assert result.stderr == ""  # listed once, not again as warnings
    doc = json.loads(CliRunner().invoke(main, ["store", "check", "--results",
                                               str(tmp_path / "r"), "--json"]).stdout)
    assert sorted((p["path"], p["rows"]) for p in doc["skipped"]) == sorted(
        [(str(truncated), None), (str(miscast), 6)])


def test_a_healthy_store_checks_clean(tmp_path: Path) -> None:
    write(tmp_path / "r", [trial()])
    result = CliRunner().invoke(main, ["store", "check", "--results", str(tmp_path / "r")])
    assert (result.exit_code, result.output) == (0, "1 parts read, 0 left out\n")
    missing = CliRunner().invoke(main, ["store", "check", "--results", str(tmp_path / "no")])
    assert missing.exit_code == 2 and "no such folder" in missing.output


def test_every_reading_command_names_the_parts_and_the_report_has_a_banner(
        tmp_path: Path) -> None:
    truncated, miscast = _damaged_store(tmp_path / "r")
    results = ["--results", str(tmp_path / "r")]
    runner = CliRunner()
    for args in (["export", "--format", "llama-bench-jsonl", "-o", str(tmp_path / "x.jsonl")],
                 ["compare", "--baseline", "b1", "--candidate", "b2", "--json"],
                 ["recommend", "--device", "SER1", "--json"]):
        result = runner.invoke(main, [*args, *results])
        for part in (truncated, miscast):
            assert f"warning: store part left out: {part} (" in result.stderr, (args,
                                                                               result.stderr)
    # the good trials are all still read: 6 trials, 12 llama-bench records
    exported = runner.invoke(main, ["export", "--format", "llama-bench-jsonl", "-o",
                                    str(tmp_path / "x.jsonl"), *results])
    assert "wrote 12 llama-bench records" in exported.stdout
    page = tmp_path / "r.html"
    report = runner.invoke(main, ["report", *results, "-o", str(page)])
    assert report.exit_code == 0, report.output
    html = page.read_text()
    assert "2 store parts could not be read and are left out of this report" in html
    assert str(truncated) in html and "column tg_tps cannot be read as double" in html
    assert "6 trials" in html
