"""``harness report``: one self-contained HTML report from the results store."""

from __future__ import annotations

import json
import time
from datetime import date, datetime
from pathlib import Path

import click

from harness.errors import ConfigError


def _since(value: str | None) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise ConfigError(
            f"--since {value!r}: write a date as YYYY-MM-DD, e.g. 2026-01-31") from None


@click.command("report")
@click.option("--results", type=click.Path(path_type=Path), default=Path("results"),
              show_default=True, help="Results store to read.")
@click.option("--run", "run_id", default=None, help="Only this run's trials.")
@click.option("--since", default=None, metavar="YYYY-MM-DD",
              help="Only trials started on or after this date (UTC).")
@click.option("--baseline", default=None, help="Baseline build of the comparison.")
@click.option("--candidate", default=None, help="Candidate build of the comparison.")
@click.option("--baseline-engine", default=None, metavar="ENGINE",
              help="Engine of the baseline side (default: the only engine of its build).")
@click.option("--candidate-engine", default=None, metavar="ENGINE",
              help="Engine of the candidate side (default: the only engine of its build).")
@click.option("--recent", type=click.IntRange(1), default=None, metavar="N",
              help="Compare only each side's N newest usable trials per cell, as "
                   "`harness compare --recent N` does [default: all].")
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False),
              default=Path("reports/report.html"), show_default=True, help="HTML file to write.")
@click.option("--top", default=6, show_default=True, type=click.IntRange(1, 50),
              help="Charts per section (devices, timelines, history series).")
@click.option("--title", default="Benchmark report", show_default=True, help="Report title.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout.")
def report(results: Path, run_id: str | None, since: str | None, baseline: str | None,
           candidate: str | None, baseline_engine: str | None, candidate_engine: str | None,
           recent: int | None, output: Path, top: int, title: str, as_json: bool) -> None:
    """Write one self-contained HTML report (inline CSS and SVG, no network, no JavaScript).

    Sections: run summary with the failed trials, throughput heatmaps, memory (measured against
    predicted, timelines with thermal status), thermal, build comparison (when one engine has
    two builds in scope or the sides are given; `harness compare`'s verdicts), engines side by
    side (when the scope holds more than one), nightly history with change points (`harness
    history`), and recommendations per device (`harness recommend`).

    \b
    Example:
      harness report --results results -o reports/nightly.html
      harness report --since 2026-01-01 --baseline b4100 --candidate b4101 -o reports/ab.html
      harness report --baseline-engine llama-bench --candidate-engine llama-cpp-python
    """
    from harness.report import ReportOptions, write_report

    if run_id and since:
        raise ConfigError("--run and --since exclude each other: give one of them")
    start = time.perf_counter()
    options = ReportOptions(results=results, run_id=run_id, since=_since(since),
                            baseline=baseline, candidate=candidate, top=top, title=title,
                            baseline_engine=baseline_engine, candidate_engine=candidate_engine,
                            recent=recent)
    data = write_report(options, output)
    seconds = time.perf_counter() - start
    comparison = data.comparison
    if as_json:
        click.echo(json.dumps({
            "output": str(output), "trials": data.summary.trials, "scope": data.scope,
            "outcomes": {o.name: o.trials for o in data.summary.outcomes},
            "baseline": comparison.baseline, "candidate": comparison.candidate,
            "baseline_engine": comparison.baseline_engine,
            "candidate_engine": comparison.candidate_engine,
            "verdicts": dict(comparison.counts), "engines": list(data.engines.engines),
            "change_points": len(data.history.changes), "noise_floor": data.noise.to_json(),
            "bytes": output.stat().st_size,
            "seconds": round(seconds, 3), "timings": data.timings,
            "generated_at": datetime.isoformat(data.generated_at),
        }, indent=2))
        return
    click.echo(f"report: {output} ({data.summary.trials} trials, {output.stat().st_size // 1024} "
               f"KiB, {seconds:.1f} s)")


COMMANDS: list[click.Command] = [report]
