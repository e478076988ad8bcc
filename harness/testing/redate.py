"""Move a stored run to another night: a farm's weeks on virtual phones in minutes.

A night is the UTC date of a trial's ``started_at`` (``harness.analysis.frames.nights``), and a
run's parts live in its start's ``date=`` partition. ``move_run`` shifts every timestamp of one
run (trials, samples, energy, adaptive decisions and the run's meta) by whole days so that the
run starts on ``night``, keeping its time of day, and moves its parts into that date's
partition. The measurements are untouched: only the calendar is compressed. Used by the tests
that run several nights of `harness nightly` on virtual phones in one session.
"""

from __future__ import annotations

import json
import os
from datetime import date, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from harness.store import TABLES


def _shifted(table: pa.Table, days: int) -> pa.Table:
    delta = pa.scalar(timedelta(days=days), type=pa.duration("us"))
    for i, column in enumerate(table.schema):
        if pa.types.is_timestamp(column.type):
            moved = pc.add(table.column(i), delta).cast(column.type)
            table = table.set_column(i, column, moved)
    return table


def _run_parts(root: Path, table: str, run_id: str) -> list[Path]:
    return sorted((root / table).glob(f"date=*/part-{run_id}-*.parquet"))


def move_run(root: Path, run_id: str, night: date) -> int:
    """Shift run ``run_id`` of the store at ``root`` so it starts on ``night``; the number of
    whole days it moved (0: nothing to do). A run whose parts span two dates keeps that span."""
    parts = _run_parts(root, "trials", run_id)
    if not parts:
        raise ValueError(f"{root}: no trials of run {run_id}")
    first = min(date.fromisoformat(p.parent.name.removeprefix("date=")) for p in parts)
    days = (night - first).days
    if days == 0:
        return 0
    for table in TABLES:
        for part in _run_parts(root, table, run_id):
            old = date.fromisoformat(part.parent.name.removeprefix("date="))
            folder = root / table / f"date={old + timedelta(days=days):%Y-%m-%d}"
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".{part.name}.tmp"
            pq.write_table(_shifted(pq.read_table(part), days), tmp)
            os.replace(tmp, folder / part.name)
            part.unlink()
            if not any(part.parent.iterdir()):
                part.parent.rmdir()
    meta = root / "runs" / f"{run_id}.json"
    if meta.is_file():
        data = json.loads(meta.read_text(encoding="utf-8"))

        def moved(text: str) -> str:
            return (datetime.fromisoformat(text) + timedelta(days=days)).isoformat()

        if isinstance(data.get("started_at"), str):
            data["started_at"] = moved(data["started_at"])
        data["sessions"] = [moved(s) for s in data.get("sessions", []) if isinstance(s, str)]
        meta.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return days
