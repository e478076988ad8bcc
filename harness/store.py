"""The results store: a Parquet dataset of trials and samples.

Layout: ``<root>/<table>/date=YYYY-MM-DD/part-<run_id>-<seq>-<nonce>.parquet``. Each run appends
new part files and never rewrites old ones; each part is written under a temporary name and
renamed, so a reader never sees half a file. pandas, pyarrow and DuckDB read it as it is
(``read_parquet('results/trials/*/*.parquet', hive_partitioning=true)``).

The schema is declared once, from the record dataclasses, with a version in the file metadata.
Readers check it: an older part is migrated as it is read (``MIGRATIONS``; columns it lacks read
as null), a part of a newer schema is refused with a StoreError naming it, and a corrupt part is
skipped with a warning.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import types
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from harness.errors import StoreError
from harness.records import AdaptiveRecord, EnergyRecord, SampleRecord, TrialRecord

SCHEMA_VERSION = 8
TABLES: dict[str, type] = {"trials": TrialRecord, "samples": SampleRecord,
                          "energy": EnergyRecord, "adaptive": AdaptiveRecord}
log = logging.getLogger(__name__)

_ARROW_TYPES: dict[Any, pa.DataType] = {
    str: pa.string(),
    int: pa.int64(),
    float: pa.float64(),
    bool: pa.bool_(),
    datetime: pa.timestamp("us", tz="UTC"),
}


def _arrow_field(name: str, hint: Any) -> pa.Field:
    nullable = False
    if get_origin(hint) in (Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        nullable = len(args) != len(get_args(hint))
        (hint,) = args
    return pa.field(name, _ARROW_TYPES[hint], nullable=nullable)


def schema_for(record_type: type) -> pa.Schema:
    hints = get_type_hints(record_type)
    fields = [_arrow_field(f.name, hints[f.name]) for f in dataclasses.fields(record_type)]
    return pa.schema(fields, metadata={b"harness.schema_version": str(SCHEMA_VERSION).encode()})


SCHEMAS: dict[str, pa.Schema] = {name: schema_for(t) for name, t in TABLES.items()}


def to_table(name: str, records: Sequence[Any]) -> pa.Table:
    schema = SCHEMAS[name]
    columns = {f.name: [getattr(r, f.name) for r in records] for f in schema}
    return pa.Table.from_pydict(columns, schema=schema)


def write_part(root: Path, name: str, records: Sequence[Any], run_id: str,
               when: datetime | None = None) -> Path | None:
    """Append one part file of ``records`` to table ``name``; atomic; None when empty."""
    if not records:
        return None
    when = when or datetime.now(UTC)
    folder = root / name / f"date={when:%Y-%m-%d}"
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"part-{run_id}-{when:%H%M%S%f}-{uuid.uuid4().hex[:8]}"
    final = folder / f"{stem}.parquet"
    tmp = folder / f".{stem}.parquet.tmp"
    try:
        pq.write_table(to_table(name, records), tmp)
        os.replace(tmp, final)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise StoreError(f"cannot write {final}: {error.strerror or error}") from error
    return final


def part_files(root: Path, name: str) -> list[Path]:
    return sorted((root / name).glob("date=*/part-*.parquet"))


def part_version(table: pa.Table) -> int:
    """The schema version a part was written with (parts of version 1 carry none)."""
    raw = (table.schema.metadata or {}).get(b"harness.schema_version", b"1")
    try:
        return int(raw)
    except ValueError:
        return 1


def _to_v5(table: pa.Table) -> pa.Table:
    """Before schema 5 every trial was run by llama-bench (or imported from its output)."""
    engine = pa.array(["llama-bench"] * table.num_rows, pa.string())
    if "engine" in table.column_names:
        return table.set_column(table.column_names.index("engine"), "engine", engine)
    return table.append_column("engine", engine)


# version -> what brings a part of that version (or older) up to the next one, per table
MIGRATIONS: dict[str, dict[int, Callable[[pa.Table], pa.Table]]] = {"trials": {4: _to_v5}}


def migrate(name: str, table: pa.Table, version: int) -> pa.Table:
    """A part written with an older schema, as the current schema reads it."""
    for step, change in sorted(MIGRATIONS.get(name, {}).items()):
        if version <= step:
            table = change(table)
    return table


def _read_part(path: Path, schema: pa.Schema, name: str = "") -> pa.Table | None:
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as error:
        log.warning("skipping unreadable part %s: %s", path, error)
        return None
    version = part_version(table)
    if version > SCHEMA_VERSION:
        raise StoreError(f"{path}: written with store schema {version}, this harness reads up "
                         f"to {SCHEMA_VERSION}: upgrade harness to read this store")
    if version < SCHEMA_VERSION:
        table = migrate(name, table, version)
    columns = []
    for field in schema:
        if field.name in table.column_names:
            try:
                columns.append(table.column(field.name).cast(field.type))
            except pa.ArrowException as error:
                log.warning("skipping part %s: column %s: %s", path, field.name, error)
                return None
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def read_arrow(root: Path, name: str, files: Iterable[Path] | None = None) -> pa.Table:
    if name not in SCHEMAS:
        raise StoreError(f"unknown table '{name}' (known: {', '.join(SCHEMAS)})")
    schema = SCHEMAS[name]
    tables = [t for p in (files or part_files(root, name))
              if (t := _read_part(p, schema, name))]
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables)


def read_table(root: Path, name: str) -> pd.DataFrame:
    """All rows of a table as a DataFrame (older files' missing columns are null)."""
    return read_arrow(root, name).to_pandas()


def run_files(root: Path, name: str, run_id: str) -> list[Path]:
    return [p for p in part_files(root, name) if p.name.startswith(f"part-{run_id}-")]
