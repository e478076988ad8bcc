"""``harness models``: the synthetic test models and their quant ladder."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from harness.artifacts.ladder import describe_ladder
from harness.artifacts.testmodels import LADDER_SIZES, ensure_ladder, spec_for


@click.group("models")
def models() -> None:
    """Synthetic GGUF test models (no downloads).

    \b
    Example:
      harness models ladder --size tiny
    """


@models.command("ladder")
@click.option(
    "--size",
    default="tiny",
    show_default=True,
    help=f"Model size: {' or '.join(LADDER_SIZES)} (tiny for tests, bench for benchmarks).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list for scripts.")
def ladder(size: str, as_json: bool) -> None:
    """Make (or find in the cache) the quant ladder F16 .. Q2_K of a synthetic llama model.

    The files are generated from a seed and quantised with llama-cpp-python, then cached under
    $HARNESS_CACHE/models/ (default ~/.cache/harness), so the second call returns at once.

    \b
    Example:
      harness models ladder --size bench
      harness models ladder --json | jq -r '.[] | select(.quant == "Q4_K_M") | .path'
    """
    spec = spec_for(size)  # a bad size fails here, before any work
    err = Console(stderr=True)
    paths = ensure_ladder(size, progress=lambda message: err.print(f"[dim]{message}[/dim]"))
    files = describe_ladder(paths)
    if as_json:
        rows = [
            {
                "size": size,
                "quant": f.quant,
                "path": str(f.path),
                "bytes": f.size_bytes,
                "sha256": f.sha256,
                "n_params": spec.n_params,
            }
            for f in files
        ]
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table(title=f"harness-{size}: {spec.n_params:,} parameters")
    table.add_column("quant")
    table.add_column("MiB", justify="right")
    table.add_column("sha256")
    table.add_column("path", overflow="fold")
    for f in files:
        table.add_row(f.quant, f"{f.size_bytes / 2**20:.1f}", f.sha256[:16], str(f.path))
    Console().print(table)


COMMANDS: list[click.Command] = [models]
