"""``harness bisect``: find the llama.cpp commit that made a cell's generation slower."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.run.bisect import Bisector, BisectReport, BisectRequest
from harness.units import pct


def _fmt_pct(value: Any) -> str:
    return "-" if value is None else pct(float(value))


def evidence_table(report: BisectReport) -> Table:
    table = Table(title=f"bisect {report.bisect_id}: {escape(report.label)} (tg_tps vs good "
                        f"{report.good[:12]})")
    for name in ("commit", "subject", "verdict", "ratio", "95% CI", "n good/commit"):
        table.add_column(name, justify="right" if name in ("ratio", "n good/commit") else "left")
    for row in report.evidence:
        marker = " *" if row["commit"] == report.first_bad else ""
        retry = " (more reps)" if row.get("retry") else ""
        table.add_row(row["commit"][:12] + marker, escape(row["subject"]),
                      f"{row['verdict']}{retry}", _fmt_pct(row["ratio"]),
                      f"[{_fmt_pct(row['ci_low'])}, {_fmt_pct(row['ci_high'])}]",
                      f"{row['n_good']}/{row['n_candidate']}")
    for commit in report.skipped:
        if not any(r["commit"] == commit for r in report.evidence):
            table.add_row(commit[:12], "", "skip (does not compile)", "-", "-", "-")
    return table


@click.command("bisect")
@click.option("--source", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="A llama.cpp git checkout (its files are not touched: commits are checked "
                   "out into a git worktree under $HARNESS_CACHE/bisect/work).")
@click.option("--good", required=True, metavar="REV", help="A revision that is fast.")
@click.option("--bad", required=True, metavar="REV", help="A later revision that is slower.")
@click.option("--cell", "cell_id", required=True, metavar="CELL_ID",
              help="A cell_id in the store: its knobs, model and workload are measured.")
@click.option("--results", type=click.Path(path_type=Path), default=Path("results"),
              show_default=True, help="Results store holding the cell; the bisect's log and "
                                      "trials go to RESULTS/bisect/.")
@click.option("--devices", "devices_spec", required=True, metavar="SERIAL|sim:1",
              help="The phone to measure on: a serial, or sim:1 for a virtual phone.")
@click.option("--profile", default="midrange-8gb", show_default=True,
              help="Profile of a phone started by --devices sim:1.")
@click.option("--abi", default="host", show_default=True, metavar="ABI",
              help="ABI of the builds; only host (this machine's) for now.")
@click.option("--reps", type=click.IntRange(3), default=5, show_default=True,
              help="Repetitions per build and step (an unstable verdict adds as many once).")
@click.option("--noise", type=click.FloatRange(0, 1, max_open=True), default=0.03,
              show_default=True, help="Noise band of the verdict (compare's rule).")
@click.option("--jobs", type=int, default=None, help="Parallel compile jobs (default: all CPUs).")
@click.option("--keep-work", is_flag=True,
              help="Keep the worktree and cmake folder when done (builds are always cached).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def bisect_command(source: Path, good: str, bad: str, cell_id: str, results: Path,
                   devices_spec: str, profile: str, abi: str, reps: int, noise: float,
                   jobs: int | None, keep_work: bool, as_json: bool) -> None:
    """Bisect llama.cpp's first-parent history between --good and --bad for the commit that
    made a stored cell's tg_tps regress.

    Each tested commit is checked out into one worktree and built incrementally in one cmake
    folder (host-release flags, GGML_NATIVE=OFF; host ABI only for now), cached per commit in
    $HARNESS_CACHE/bisect/builds/<commit>. It is measured on the phone interleaved with the good
    build and judged with compare's rule on tg_tps: regression = bad, same/improvement = good,
    unstable = measured once more with added repetitions, then skipped. A commit that does not
    compile is skipped. Both ends are measured first. Every step is appended to
    RESULTS/bisect/<id>.jsonl; running the same command again continues a killed bisect.

    \b
    Example:
      harness bisect --source ~/src/llama.cpp --good b4100 --bad b4180 \\
          --cell 3f2a9c1d0e4b5a67 --results results --devices sim:1
    """
    def say(text: str) -> None:
        click.echo(text, err=True)

    request = BisectRequest(source=source, good=good, bad=bad, cell_id=cell_id, results=results,
                            devices=devices_spec, abi=abi, reps=reps, noise=noise, jobs=jobs,
                            keep_work=keep_work)
    bisector = Bisector(request, say)

    @contextmanager
    def devices() -> Iterator[Sequence[Any]]:
        from harness.run.devices import open_devices

        with open_devices(devices_spec, profile, None) as found:
            yield found

    report = bisector.run(devices)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
        return
    Console(file=sys.stdout, width=None if sys.stdout.isatty() else 200,
            highlight=False).print(evidence_table(report))
    if len(report.candidates) == 1:
        click.echo(f"first bad commit: {report.first_bad} {report.first_bad_subject}")
    else:
        click.echo("first bad commit is one of (skipped commits could not be judged): "
                   + ", ".join(c[:12] for c in report.candidates))
    click.echo(f"last good commit: {report.last_good}")
    click.echo(f"log: {report.log}")


COMMANDS: list[click.Command] = [bisect_command]
