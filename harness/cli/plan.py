"""``harness plan``: what a matrix will cost on a device, before a phone spends a night on it."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from harness.budget import DEFAULT_RESERVE_BYTES, available_memory
from harness.cell import Cell
from harness.errors import ConfigError, HarnessError
from harness.matrix import Matrix, expand, load_matrix
from harness.plan import (
    PlannedCell,
    Reason,
    display_label,
    matrix_repack,
    parse_size,
    plan_cells,
    plan_document,
    resolve_models,
    summarize,
)
from harness.profiles import Cluster, DeviceProfile, find_profile, list_profiles, storage_speed
from harness.units import MIB, size

LIVE = "live facts of "  # the source of a profile made from an attached device's reading


def _duration(seconds: float) -> str:
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _console() -> Console:
    # Wide when piped, so labels stay on one line in files and CI logs.
    return Console(width=None if sys.stdout.isatty() else 220, highlight=False)


def _device_profile(name: str) -> DeviceProfile:
    """A profile by name or path, else the live facts of an attached device with that serial."""
    try:
        return find_profile(name)
    except ConfigError as not_a_profile:
        from harness.device import get_device

        try:
            facts = get_device(name).facts()
        except HarnessError:
            raise not_a_profile from None
        if not facts.available_ram_kb:
            raise ConfigError(f"{name}: the device did not report its available memory; "
                              "give --memory") from None
        return DeviceProfile(
            name=name, description=f"attached device {facts.model or ''}".strip(),
            props={"ro.product.model": facts.model or "unknown"},
            ram_mb=(facts.total_ram_kb or facts.available_ram_kb) // 1024,
            available_mb=facts.available_ram_kb // 1024,
            storage_free_mb=(facts.free_storage_kb or 0) // 1024,
            clusters=(Cluster("all", facts.cpu_count or 1, 0, 0, 1024, "unknown"),),
            storage_read_mb_s=storage_speed(facts),
            source=f"{LIVE}{name}",
        )


def _available(profile: DeviceProfile | None, memory: str | None) -> int:
    """The device's available memory by the one rule plan, run and recommend share."""
    live = profile is not None and profile.source.startswith(LIVE)
    found = available_memory(
        given=parse_size(memory, "--memory") if memory is not None else None,
        live=profile.available_mb * MIB if live and profile else None,
        live_from=profile.name if profile else "the phone",
        profile_mb=profile.available_mb if profile else None,
        profile=profile.name if profile else None)
    return found.bytes or 0


def _device_json(profile: DeviceProfile | None, memory: str | None) -> dict[str, Any]:
    if profile is None:
        return {"name": "custom", "source": None, "available_mb": None, "memory": memory}
    return {
        "name": profile.name,
        "source": profile.source,
        "available_mb": profile.available_mb,
        "ram_mb": profile.ram_mb,
        "memory": memory,
        "storage_read_mb_s": profile.storage_read_mb_s,
    }


def _cell_table(planned: list[PlannedCell]) -> Table:
    table = Table(show_lines=False, pad_edge=False)
    for title in ("#", "runs on", "cell", "peak", "host", "accelerator", "weights", "kv", "compute",
                  "fits", "time"):
        table.add_column(title, justify="right" if title not in ("runs on", "cell") else "left",
                         no_wrap=title == "cell")
    table.add_column("why not", overflow="fold")
    for i, p in enumerate(planned, 1):
        pred = p.prediction
        terms = [size(x) for x in (pred.total, pred.host, pred.device, pred.weights, pred.kv,
                                    pred.compute)] if pred else ["-"] * 6
        table.add_row(
            str(i), p.cell.setup_label(), display_label(p.cell), *terms, _fits(p),
            _duration(p.estimated_seconds) if p.feasible else "-",
            p.reason if not p.feasible or p.paging is not None else "",
        )
    return table


def _fits(p: PlannedCell) -> str:
    """yes, no, or "paging" with the storage-bound decode speed when one is predicted."""
    if p.reason_code == Reason.PAGING:
        tg = p.paging_tg_tps
        return f"[yellow]paging[/yellow]{f' {tg:.2g} t/s' if tg else ''}"
    return "yes" if p.feasible else "[red]no[/red]"


def _check_kv(matrix: Any, cells: list[Any], as_json: bool) -> None:
    from harness.analysis.kv_size_check import TOLERANCE, check_cells

    err = Console(stderr=True)
    err.print(f"[dim]loading {len(cells)} contexts in the vendored llama.cpp ...[/dim]")
    checks = check_cells(cells, resolve_models(matrix, cells))
    bad = [c for c in checks if not c.within]
    if as_json:
        click.echo(json.dumps({"schema_version": 1, "matrix": matrix.name,
                               "tolerance": TOLERANCE, "checks": [c.as_dict() for c in checks],
                               "within": len(checks) - len(bad), "cells": len(checks)},
                              indent=2))
    else:
        table = Table(pad_edge=False)
        for title in ("cell", "caches", "llama.cpp", "predicted", "ratio"):
            table.add_column(title, justify="left" if title == "cell" else "right")
        for c in checks:
            ratio = f"{c.ratio:.4f}" if c.ratio is not None else (c.error or "-")
            table.add_row(c.cell.label(), str(c.reported_caches),
                          size(c.reported_bytes) if c.reported_bytes else "-",
                          size(c.predicted_bytes) if c.predicted_bytes else "-",
                          ratio if c.within else f"[red]{ratio}[/red]")
        _console().print(table)
        click.echo(f"{len(checks) - len(bad)} of {len(checks)} cells within "
                   f"{TOLERANCE:.0%} of llama.cpp's own KV cache size")
    if bad:
        sys.exit(1)


def _summary_line(name: str, available: int, reserve: int, planned: list[PlannedCell]) -> str:
    s = summarize(planned)
    pages = s["reasons"].get(Reason.PAGING, 0)
    verdict = (f"{s['feasible']} of {s['cells']} cells run ({pages} by paging their weights "
               "from storage)" if pages else f"{s['feasible']} of {s['cells']} cells fit")
    return (
        f"{name}: available {size(available)} - reserve {size(reserve)} = budget "
        f"{size(available - reserve)}; {verdict}; estimated "
        f"{_duration(s['estimated_seconds'])} for the feasible ones"
    )


@click.command("plan")
@click.argument("matrix_path", metavar="MATRIX", type=click.Path(path_type=Path))
@click.option("--device", "-d", "device", metavar="PROFILE_OR_SERIAL",
              help="Device profile name (devices/NAME.yaml), path to a profile YAML, or the "
                   "serial of an attached device (its live available memory is used).")
@click.option("--memory", metavar="SIZE",
              help="Available memory instead of the profile's (e.g. 6GiB, 5500MiB).")
@click.option("--reserve", metavar="SIZE", default=None,
              help="Headroom kept free for the rest of the phone (default 512MiB).")
@click.option("--storage-mb-s", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Storage read speed (MB/s) for cells that run by paging their mmap'd "
                   "weights (default: the profile's storage.read_mb_s).")
@click.option("--check-kv", is_flag=True,
              help="Instead of planning: load every cell's model with its context in the "
                   "vendored llama.cpp (no token computed) and compare the predicted KV cache "
                   "with the size llama.cpp logs; exit 1 if any is off by more than 2%.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document for scripts.")
def plan_command(
    matrix_path: Path, device: str | None, memory: str | None, reserve: str | None,
    storage_mb_s: float | None, check_kv: bool, as_json: bool
) -> None:
    """Predict each cell's peak memory and duration, and whether it fits a device.

    The budget is the device's available memory (the profile's available_mb, or --memory) minus
    --reserve. A cell over it whose weights are mmap'd runs by paging when what must stay
    resident fits: "paging" with its storage-bound decode speed (docs/memory.md). Without
    --device and --memory, the matrix is planned for every profile in
    devices/; the JSON is then {"schema_version", "matrix", "plans": [one document per
    profile]}. Durations come from a simple throughput heuristic (docs/memory.md).

    \b
    Example:
      harness plan matrices/smoke.yaml --device midrange-8gb
      harness plan matrices/nightly.yaml --device midrange-8gb --json
      harness plan matrices/nightly.yaml --memory 6GiB --reserve 1GiB
      harness plan matrices/real-kv.yaml --check-kv
      harness plan matrices/bigger-than-ram.yaml --memory 160MiB --reserve 0 --storage-mb-s 100
      harness plan matrices/gpu.yaml --memory 1GiB     # host and device (GPU) memory per cell
    """
    matrix = load_matrix(matrix_path)
    cells = expand(matrix)
    if check_kv:
        _check_kv(matrix, cells, as_json)
        return
    reserve_bytes = parse_size(reserve, "--reserve") if reserve else DEFAULT_RESERVE_BYTES
    targets: list[tuple[DeviceProfile | None, int]] = []
    if device is not None or memory is not None:
        profile = _device_profile(device) if device is not None else None
        targets.append((profile, _available(profile, memory)))
    else:
        targets = [(p, _available(p, None)) for p in list_profiles()]
        if not targets:
            raise click.UsageError("no device profiles found; give --device or --memory")

    models = resolve_models(matrix, cells)  # after every argument is checked: it may do work
    timeout = matrix.timeout.trial_s
    repack = matrix_repack(matrix)
    plans = [
        (profile, available, plan_cells(
            cells, models, available, reserve_bytes, timeout, repack=repack,
            storage_mb_s=storage_mb_s or (profile.storage_read_mb_s if profile else None)))
        for profile, available in targets
    ]
    if as_json:
        _print_json(matrix, plans, memory, reserve_bytes,
                    single=len(plans) == 1 and (device is not None or memory is not None))
    else:
        _print_tables(matrix, cells, plans, reserve_bytes)


Plans = list[tuple[DeviceProfile | None, int, list[PlannedCell]]]


def _print_json(matrix: Matrix, plans: Plans, memory: str | None, reserve_bytes: int, *,
                single: bool) -> None:
    """One plan document, or, for every profile, {"schema_version", "matrix", "plans"}."""
    documents = [
        plan_document(matrix, _device_json(profile, memory), available, reserve_bytes, planned)
        for profile, available, planned in plans
    ]
    if single:
        click.echo(json.dumps(documents[0], indent=2))
        return
    click.echo(json.dumps({
        "schema_version": documents[0]["schema_version"],
        "matrix": documents[0]["matrix"],
        "plans": documents,
    }, indent=2))


def _print_tables(matrix: Matrix, cells: Sequence[Cell], plans: Plans,
                  reserve_bytes: int) -> None:
    """The cell table of one plan, or one verdict column per profile."""
    console = _console()
    console.print(f"[bold]{matrix.name}[/bold] ({matrix.source}): {len(cells)} cells, "
                  f"{matrix.repetitions} repetitions each")
    if len(plans) == 1:
        profile, available, planned = plans[0]
        console.print(_cell_table(planned))
        console.print(_summary_line(profile.name if profile else "custom", available,
                                    reserve_bytes, planned))
        return
    table = Table(pad_edge=False)
    for title in ("#", "runs on", "cell", "peak"):
        table.add_column(title, no_wrap=title == "cell")
    for profile, _, _ in plans:
        table.add_column(profile.name if profile else "custom")
    for i, cell in enumerate(cells):
        first = plans[0][2][i]
        peak = size(first.prediction.total) if first.prediction else "-"
        verdicts = [
            _fits(planned[i]) if planned[i].feasible else
            f"[red]no[/red] ({planned[i].reason_code})" for _, _, planned in plans
        ]
        table.add_row(str(i + 1), cell.setup_label(), display_label(cell), peak, *verdicts)
    console.print(table)
    for profile, available, planned in plans:
        console.print(_summary_line(profile.name if profile else "custom", available,
                                    reserve_bytes, planned))

COMMANDS: list[click.Command] = [plan_command]
