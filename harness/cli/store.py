"""``harness store check``: read every part of a results store and name what cannot be read."""

from __future__ import annotations

import json
from pathlib import Path

import click

from harness.cli import SKIPS_LISTED
from harness.cli.analysis import RESULTS


@click.group("store")
def store_group() -> None:
    """Look after a results store.

    \b
    Example:
      harness store check --results results
    """


@store_group.command("check")
@RESULTS
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def check_command(results: Path, as_json: bool) -> None:
    """Read every part of every table whole; list the parts that cannot be read (exit 1).

    A part that is unreadable, or has a column that cannot be read as the schema's type, is
    left out of every table a command reads (each command names it on stderr); this lists
    them all with the rows they hold, so they can be repaired or moved away.

    \b
    Example:
      harness store check --results results
      harness store check --results results --json | jq '.skipped[].path'
    """
    from harness import store
    from harness.errors import ConfigError

    if not results.is_dir():
        raise ConfigError(f"--results {results}: no such folder (a results store is the folder "
                          "harness run writes)")
    files, skipped = store.check(results)
    click.get_current_context().meta[SKIPS_LISTED] = True  # listed below, not again on stderr
    if as_json:
        click.echo(json.dumps({"results": str(results), "parts": files, "skipped": [
            {"path": str(p.path), "table": p.table, "rows": p.rows, "reason": p.reason}
            for p in skipped]}, indent=2))
    else:
        for part in skipped:
            click.echo(f"left out: {part.line()}")
        click.echo(f"{files} parts read, {len(skipped)} left out")
    if skipped:
        raise SystemExit(1)


COMMANDS = [store_group]
