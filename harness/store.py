"""The results store: a Parquet dataset of trials and samples.

Layout: ``<root>/<table>/date=YYYY-MM-DD/part-<run_id>-<seq>-<nonce>.parquet``. Each run appends
new part files and never rewrites old ones; each part is written under a temporary name and
renamed, so a reader never sees half a file. pandas, pyarrow and DuckDB read it as it is
(``read_parquet('results/trials/*/*.parquet', hive_partitioning=true)``).

The schema is declared once, from the record dataclasses, with a version in the file metadata.
Readers accept older files: missing columns read as null; a corrupt part is skipped with a warning.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import types
import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from harness.errors import StoreError
from harness.records import SampleRecord, TrialRecord

SCHEMA_VERSION = 4
TABLES: dict[str, type] = {"trials": TrialRecord, "samples": SampleRecord}
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


def _read_part(path: Path, schema: pa.Schema) -> pa.Table | None:
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as error:
        log.warning("skipping unreadable part %s: %s", path, error)
        return None
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
    tables = [t for p in (files or part_files(root, name)) if (t := _read_part(p, schema))]
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables)


def read_table(root: Path, name: str) -> pd.DataFrame:
    """All rows of a table as a DataFrame (older files' missing columns are null)."""
    return read_arrow(root, name).to_pandas()


def run_files(root: Path, name: str, run_id: str) -> list[Path]:
    return [p for p in part_files(root, name) if p.name.startswith(f"part-{run_id}-")]
