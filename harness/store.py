"""The results store: a Parquet dataset of trials and samples.

Layout: ``<root>/<table>/date=YYYY-MM-DD/part-<run_id>-<seq>-<nonce>.parquet``. Each run appends
new part files and never rewrites old ones; each part is written under a temporary name and
renamed, so a reader never sees half a file. pandas, pyarrow and DuckDB read it as it is
(``read_parquet('results/trials/*/*.parquet', hive_partitioning=true)``).

The schema is declared once, from the record dataclasses, with a version in the file metadata.
Readers check it: an older part is migrated as it is read (``MIGRATIONS``; columns it lacks read
as null), a part of a newer schema is refused with a StoreError naming it, and a corrupt part is
skipped with a warning. There is one reader (``read_columns``): the commands read whole tables
through it, the report only the columns and rows it needs.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import threading
import types
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from harness.errors import StoreError
from harness.records import AdaptiveRecord, EnergyRecord, SampleRecord, TrialRecord

SCHEMA_VERSION = 16  # 16: the GPU/NPU's memory columns say accelerator (``RENAMED``)
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


def part_version(table: pa.Table | pa.Schema) -> int:
    """The schema version a part was written with (parts of version 1 carry none)."""
    schema = table if isinstance(table, pa.Schema) else table.schema
    raw = (schema.metadata or {}).get(b"harness.schema_version", b"1")
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


#: columns a part may store under an older name, per table: old name -> current name. A part is
#: read under the current names whatever its version: the names changed before the version did
#: (schema 16: "device" is the phone; a GPU's or NPU's memory is the accelerator's).
RENAMED: dict[str, dict[str, str]] = {
    "trials": {"device_memory_bytes": "accelerator_memory_bytes",
               "device_memory_source": "accelerator_memory_source",
               "predicted_device_bytes": "predicted_accelerator_bytes"},
    "samples": {"device_memory_bytes": "accelerator_memory_bytes"},
}


def stored_names(name: str, stored: Sequence[str]) -> dict[str, str]:
    """Current column name -> the older name a part stores it under (``RENAMED``)."""
    have = set(stored)
    return {new: old for old, new in RENAMED.get(name, {}).items()
            if old in have and new not in have}


# version -> what brings a part of that version (or older) up to the next one, per table
MIGRATIONS: dict[str, dict[int, Callable[[pa.Table], pa.Table]]] = {"trials": {4: _to_v5}}


def migrate(name: str, table: pa.Table, version: int) -> pa.Table:
    """A part written with an older schema, as the current schema reads it."""
    for step, change in sorted(MIGRATIONS.get(name, {}).items()):
        if version <= step:
            table = change(table)
    return table


@dataclasses.dataclass(frozen=True)
class SkippedPart:
    """A part a read left out: it could not be read, or a column could not be cast."""

    path: Path
    table: str
    rows: int | None  # from the Parquet footer, when even that could be read
    reason: str

    def line(self) -> str:
        held = (f"{self.rows} rows of {self.table}" if self.rows is not None
                else f"{self.table}, rows unknown")
        return f"{self.path} ({held}): {self.reason}"


_SKIPPED: list[SkippedPart] = []  # every skip of this process, in order (repeats included)
_SKIPPED_LOCK = threading.Lock()


def skip_mark() -> int:
    """Where the skips of this process stand now: pass it to ``skipped_since``."""
    with _SKIPPED_LOCK:
        return len(_SKIPPED)


def skipped_since(mark: int = 0) -> list[SkippedPart]:
    """The parts reads left out since ``mark``, once each, in the order they were met: what a
    command names on stderr and a report in its banner, so nothing is dropped quietly."""
    with _SKIPPED_LOCK:
        found = _SKIPPED[mark:]
    first: dict[Path, SkippedPart] = {}
    for part in found:
        first.setdefault(part.path, part)
    return list(first.values())


def _skip(path: Path, name: str, reason: str) -> None:
    try:
        rows: int | None = pq.read_metadata(path).num_rows
    except (OSError, pa.ArrowException):
        rows = None
    log.debug("skipping part %s: %s", path, reason)
    with _SKIPPED_LOCK:
        _SKIPPED.append(SkippedPart(path, name, rows, reason))


def check(root: Path) -> tuple[int, list[SkippedPart]]:
    """Read every part of every table under ``root`` whole: (parts read, parts left out)."""
    mark = skip_mark()
    files = 0
    for name in SCHEMAS:
        parts = part_files(root, name)
        files += len(parts)
        if parts:
            read_arrow(root, name, parts)
    return files, skipped_since(mark)


def _read_one(path: Path, name: str, columns: Sequence[str],
              filters: list[tuple[str, str, object]] | None,
              dictionary: Sequence[str]) -> pa.Table | None:
    """One part's columns, migrated to the current schema; low-cardinality strings stay
    dictionary-encoded, as Parquet has them."""
    schema = SCHEMAS[name]
    try:
        # an older or foreign part may lack a column: ask for dictionaries only of those it has
        part = pq.ParquetFile(path)  # its footer, parsed once for the schema and the reads
        stored = part.schema_arrow
        old = stored_names(name, stored.names)  # a column the part names the older way
        present = {n for n in stored.names if n not in old.values()} | set(old)
        if any(d in present for d in dictionary):
            part = pq.ParquetFile(path, metadata=part.metadata, read_dictionary=[
                old.get(d, d) for d in dictionary if d in present])
        wanted = [old.get(c, c) for c in columns if c in present]
        if filters:
            if any(f[0] not in present for f in filters):
                return None  # a filter on a column the part lacks matches nothing
            table = _filtered(part, wanted, [(old.get(f[0], f[0]), *f[1:]) for f in filters])
            if table is None:
                return None
        else:
            table = part.read(columns=wanted, use_threads=False)
    except (OSError, pa.ArrowException) as error:
        _skip(path, name, f"unreadable: {error}")
        return None
    current = {v: k for k, v in old.items()}
    table = table.rename_columns([current.get(n, n) for n in table.column_names])
    table = _migrated(path, name, table, part_version(stored))
    if table.schema.equals(_target(name, tuple(columns))):  # current schema: nothing to cast
        return table.replace_schema_metadata(None)
    arrays = []
    fields = []
    have = set(table.column_names)
    for wanted_name in columns:
        field = schema.field(wanted_name)
        if wanted_name not in have:
            arrays.append(pa.nulls(table.num_rows, field.type))
            fields.append(field)
            continue
        column = table.column(wanted_name)
        if pa.types.is_dictionary(column.type) and column.type.value_type == field.type:
            arrays.append(column)
            fields.append(pa.field(wanted_name, column.type, nullable=True))
            continue
        try:
            arrays.append(column.cast(field.type))
        except pa.ArrowException as error:
            _skip(path, name, f"column {wanted_name} cannot be read as {field.type}: {error}")
            return None
        fields.append(field)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


@functools.lru_cache(maxsize=64)
def _target(name: str, columns: tuple[str, ...]) -> pa.Schema:
    """The schema a read of ``columns`` of table ``name`` gives."""
    return pa.schema([SCHEMAS[name].field(c) for c in columns])


def _filtered(part: pq.ParquetFile, wanted: list[str],
              filters: list[tuple[str, str, object]]) -> pa.Table | None:
    """The part's ``wanted`` columns of the rows ``filters`` keep; None when it keeps none.

    Row groups whose statistics rule the filter out are not read (a part of one phone's
    trials, or a night written a row group per phone), nor filtered when they show every row
    kept. When the statistics tell nothing, the filter's own columns are read first, so a part
    that keeps no row costs only them. (``pq.read_table(filters=...)`` builds a dataset for
    each file: twice the time of a whole read of a one-night part.)
    """
    schema = part.schema_arrow
    verdicts = [_verdict(part.metadata.row_group(g), schema, filters)
                for g in range(part.metadata.num_row_groups)]
    groups = [g for g, v in enumerate(verdicts) if v != "none"]
    if not groups:
        return None
    keys = sorted({f[0] for f in filters})
    expression = pq.filters_to_expression(filters)
    if all(verdicts[g] == "all" for g in groups):
        return part.read_row_groups(groups, columns=wanted, use_threads=False)
    if all(verdicts[g] == "some" for g in groups) and not part.read_row_groups(
            groups, columns=keys, use_threads=False).filter(expression).num_rows:
        return None
    table = part.read_row_groups(groups, columns=[*wanted, *(k for k in keys if k not in wanted)],
                                 use_threads=False)
    return table.filter(expression).select(wanted)


def _verdict(group: pq.RowGroupMetaData, schema: pa.Schema,
             filters: list[tuple[str, str, object]]) -> str:
    """What a row group's min/max statistics tell of ``filters``: "none" of its rows kept,
    "all" kept, or "some" (they cannot tell; only equality and ``in`` are judged)."""
    verdict = "all"
    for column, op, value in filters:
        stats = group.column(schema.get_field_index(column)).statistics
        if op not in ("=", "==", "in") or stats is None or not stats.has_min_max:
            verdict = "some"
            continue
        values = list(value) if op == "in" else [value]  # type: ignore[call-overload]
        try:
            if not any(stats.min <= v <= stats.max for v in values):
                return "none"
        except TypeError:
            verdict = "some"
            continue
        if not (stats.min == stats.max and stats.null_count == 0):
            verdict = "some"
    return verdict


def _migrated(path: Path, name: str, table: pa.Table, version: int) -> pa.Table:
    """The part as the current schema reads it (``harness.store.migrate``)."""
    if version > SCHEMA_VERSION:
        raise StoreError(f"{path}: written with store schema {version}, this harness reads up "
                         f"to {SCHEMA_VERSION}: upgrade harness to read this store")
    return migrate(name, table, version) if version < SCHEMA_VERSION else table


def read_columns(files: Iterable[Path], table: str, columns: Sequence[str],
                 filters: list[tuple[str, str, object]] | None = None,
                 dictionary: Sequence[str] = ()) -> pa.Table:
    """The named columns of ``files`` concatenated; two threads, as pyarrow releases the GIL.

    Columns named in ``dictionary`` come back dictionary-encoded (pandas: categorical) when
    the part stores them so; a part that stores one plainly is encoded to match.
    """
    schema = SCHEMAS[table]
    unknown = [c for c in columns if c not in schema.names]
    if unknown:
        raise StoreError(f"unknown {table} column(s): {', '.join(unknown)}")
    with ThreadPoolExecutor(max_workers=2) as pool:
        parts = [t for t in pool.map(
            lambda p: _read_one(p, table, columns, filters, dictionary), files)
            if t is not None and t.num_rows]
    if not parts:
        return pa.schema([schema.field(c) for c in columns]).empty_table()
    return pa.concat_tables(_same_types(parts))


def _same_types(parts: list[pa.Table]) -> list[pa.Table]:
    """Dictionary-encode a column wherever another part has it encoded, so parts concatenate."""
    encoded = {f.name: f.type for t in parts for f in t.schema if pa.types.is_dictionary(f.type)}
    if not encoded:
        return parts
    out = []
    for t in parts:
        for name, kind in encoded.items():
            column = t.column(name)
            if column.type != kind:
                index = t.schema.get_field_index(name)
                column = pc.dictionary_encode(column.cast(kind.value_type)).cast(kind)
                t = t.set_column(index, pa.field(name, kind), column)
        out.append(t)
    return out


def read_arrow(root: Path, name: str, files: Iterable[Path] | None = None,
               columns: Sequence[str] | None = None,
               filters: list[tuple[str, str, object]] | None = None) -> pa.Table:
    """A table's rows (of ``files``, else every part): every column, or only ``columns``, and
    only the rows ``filters`` (pyarrow's DNF) keep, both pushed down into the Parquet reads."""
    if name not in SCHEMAS:
        raise StoreError(f"unknown table '{name}' (known: {', '.join(SCHEMAS)})")
    return read_columns(part_files(root, name) if files is None else files, name,
                        SCHEMAS[name].names if columns is None else columns, filters)


def read_table(root: Path, name: str, columns: Sequence[str] | None = None,
               filters: list[tuple[str, str, object]] | None = None) -> pd.DataFrame:
    """A table's rows as a DataFrame (older files' missing columns are null); ``columns`` and
    ``filters`` as ``read_arrow``."""
    # a block a column: pandas' consolidation into 2-D blocks copied every column again
    # (0.8 s of a farm phone's 218,400 trials, 0.17 s without; selections got faster too)
    return read_arrow(root, name, columns=columns, filters=filters).to_pandas(split_blocks=True)


def run_files(root: Path, name: str, run_id: str) -> list[Path]:
    return [p for p in part_files(root, name) if p.name.startswith(f"part-{run_id}-")]
