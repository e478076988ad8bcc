"""Export to, and import from, llama.cpp's own benchmark formats.

Why: llama.cpp developers compare builds with ``scripts/compare-llama-bench.py`` over
``llama-bench -o jsonl`` / ``-o sql`` results. Exporting the store in that schema lets them use
the tool they know on phone-farm data, and importing lets results measured elsewhere (a laptop,
another farm) sit in the same store as trials.

Export: one llama-bench record per *test* of each ``ok`` trial, as llama-bench itself prints a
prompt test (``n_gen`` 0) and a generation test (``n_prompt`` 0): the stored ``engine_record``
when there is one, else synthesised from the trial's columns. Every key property is filled
(never null), because the script joins baseline and candidate rows with SQL ``=``, which never
matches a NULL.

``build_commit`` holds one identifier per harness build, all of one length
(``build_identifiers``): the script truncates every ``build_commit`` to the shortest when their
lengths differ (with a warning that wrong commits may be compared), so build names such as
``host-release`` and ``host-slow`` would stop matching ``-b``/``-c``. A build's identifier is
its engine commit as llama-bench writes it (7 hex digits) where no other exported build has
that commit, else 7 hex digits of a hash of the build id: two harness builds of one commit (a
release and a deliberately slowed build) must stay apart in the script's comparison.
``build_key="id"`` or ``"commit"`` writes the build id or the engine's commit as they are.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from harness import knobs
from harness.analysis.sustained import column
from harness.errors import ConfigError, StoreError
from harness.knobs import offload_of

Format = Literal["llama-bench-jsonl", "llama-bench-sql"]
FORMATS: tuple[str, ...] = ("llama-bench-jsonl", "llama-bench-sql")
BuildKey = Literal["short", "id", "commit"]
SHORT = 7  # hex digits of a commit, as llama-bench writes build_commit
_HEX = re.compile(r"^[0-9a-f]{7,40}$")

#: compare-llama-bench.py's LLAMA_BENCH_DB_FIELDS and types, in its order (llama.cpp 0.3.36).
LLAMA_BENCH_FIELDS: tuple[tuple[str, str], ...] = (
    ("build_commit", "TEXT"), ("build_number", "INTEGER"), ("cpu_info", "TEXT"),
    ("gpu_info", "TEXT"), ("backends", "TEXT"), ("model_filename", "TEXT"),
    ("model_type", "TEXT"), ("model_size", "INTEGER"), ("model_n_params", "INTEGER"),
    ("n_batch", "INTEGER"), ("n_ubatch", "INTEGER"), ("n_threads", "INTEGER"),
    ("cpu_mask", "TEXT"), ("cpu_strict", "INTEGER"), ("poll", "INTEGER"), ("type_k", "TEXT"),
    ("type_v", "TEXT"), ("n_gpu_layers", "INTEGER"), ("split_mode", "TEXT"),
    ("main_gpu", "INTEGER"), ("no_kv_offload", "INTEGER"), ("flash_attn", "INTEGER"),
    ("tensor_split", "TEXT"), ("tensor_buft_overrides", "TEXT"), ("load_mode", "TEXT"),
    ("embeddings", "INTEGER"), ("no_op_offload", "INTEGER"), ("n_prompt", "INTEGER"),
    ("n_gen", "INTEGER"), ("n_depth", "INTEGER"), ("test_time", "TEXT"), ("avg_ns", "INTEGER"),
    ("stddev_ns", "INTEGER"), ("avg_ts", "REAL"), ("stddev_ts", "REAL"), ("n_cpu_moe", "INTEGER"),
    ("fit_target", "INTEGER"), ("fit_min_ctx", "INTEGER"),
)
FIELD_NAMES = tuple(name for name, _ in LLAMA_BENCH_FIELDS)
DEFAULTS: dict[str, Any] = {
    "build_number": 0, "gpu_info": "", "backends": "CPU", "cpu_mask": "0x0", "cpu_strict": 0,
    "poll": 50, "n_gpu_layers": 0, "split_mode": "layer", "main_gpu": 0, "no_kv_offload": 0,
    "flash_attn": -1, "tensor_split": "0.00", "tensor_buft_overrides": "none",
    "load_mode": "mmap", "embeddings": 0, "no_op_offload": 0, "n_depth": 0, "stddev_ns": 0,
    "stddev_ts": 0.0, "n_cpu_moe": 0, "fit_target": 0, "fit_min_ctx": 0, "model_size": 0,
    "model_n_params": 0, "n_batch": knobs.default("n_batch"),
    "n_ubatch": knobs.default("n_ubatch"), "n_threads": 1, "type_k": knobs.default("type_k"),
    "type_v": knobs.default("type_v"), "n_prompt": 0, "n_gen": 0,
}
FLASH = {"on": 1, "off": 0, "auto": -1}
#: ggml's names of the backends a build's manifest lists, in the order llama.cpp registers them
#: (ggml/src/ggml-backend-reg.cpp); llama-bench's ``backends`` joins those a build has, "CPU"
#: when it has none
GGML_BACKENDS: tuple[tuple[str, str], ...] = (
    ("vulkan", "Vulkan"), ("opencl", "OpenCL"), ("hexagon", "HTP"))
#: Builds: build id -> the backends its manifest lists (``Manifest.backends``)
Builds = Mapping[str, Sequence[str]]


def backends_text(compiled: Sequence[str]) -> str:
    """llama-bench's ``backends`` of a build whose manifest lists ``compiled``."""
    known = dict(GGML_BACKENDS)
    names = [ggml for ours, ggml in GGML_BACKENDS if ours in compiled]
    names += [name for name in compiled if name not in known]
    return ",".join(names) or "CPU"


def _backends(row: Mapping[str, Any], builds: Builds) -> str:
    """The trial's build's backends; a build not at hand: the backend of the device the trial
    ran on (a CPU trial's build may have had others, which the store does not say)."""
    build = builds.get(str(row.get("build_id")))
    if build is not None:
        return backends_text(build)
    device = str(offload_of(row)[0]).lower()
    return next((ggml for _, ggml in GGML_BACKENDS if ggml.lower() in device), "CPU")


def _value(row: Mapping[str, Any], key: str) -> Any:
    value = row.get(key)
    return None if value is None or (not isinstance(value, str) and pd.isna(value)) else value


def _iso(value: Any) -> str:
    stamp = pd.Timestamp(value)
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def _extras(row: Mapping[str, Any]) -> dict[str, Any]:
    return {"harness_trial_id": row.get("trial_id"), "harness_build_id": row.get("build_id"),
            "harness_device_serial": row.get("device_serial"),
            "harness_config_id": row.get("config_id"), "harness_n_ctx": int(row["n_ctx"])}


def _base(row: Mapping[str, Any], build: str, builds: Builds) -> dict[str, Any]:
    affinity = str(_value(row, "affinity") or "all")
    device = _value(row, "device_model") or row.get("device_serial")
    soc = _value(row, "device_soc")
    return {
        "build_commit": build,
        "cpu_info": f"{device} ({soc})" if soc else str(device),
        "model_filename": f"{row['model_name']}-{row['quant']}.gguf",
        "model_type": f"{row['model_name']} {row['quant']}",
        "model_size": int(_value(row, "model_file_bytes") or 0),
        "model_n_params": int(_value(row, "model_n_params") or 0),
        "n_batch": int(row["n_batch"]), "n_ubatch": int(row["n_ubatch"]),
        "n_threads": int(row["threads"]),
        "cpu_mask": affinity if affinity.startswith("0x") else "0x0",
        "cpu_strict": int(affinity.startswith("0x")),
        "type_k": row["type_k"], "type_v": row["type_v"],
        "flash_attn": FLASH.get(str(row["flash_attn"]), -1),
        # as the engine was asked (dio, mlock, ...; a store from before the knob: what mmap says)
        "load_mode": knobs.load_mode_of(bool(row["mmap"]), _value(row, "load_mode")),
        "backends": _backends(row, builds),
        "n_depth": int(row["n_depth"]), "test_time": _iso(row["started_at"]),
        # where it ran (a store from before the device knob: the CPU)
        "n_gpu_layers": offload_of(row)[1],
        "gpu_info": str(_value(row, "gpu_info") or ""),
    }


def _synthesised(row: Mapping[str, Any], build: str, builds: Builds) -> list[dict[str, Any]]:
    out = []
    for metric, prompt, gen in (("pp_tps", int(row["n_prompt"]), 0),
                                ("tg_tps", 0, int(row["n_gen"]))):
        rate = _value(row, metric)
        tokens = prompt + gen
        if rate is None or rate <= 0 or tokens == 0:
            continue
        ns = round(tokens / float(rate) * 1e9)
        out.append({**DEFAULTS, **_base(row, build, builds), "n_prompt": prompt, "n_gen": gen,
                    "avg_ns": ns, "avg_ts": float(rate), "samples_ns": [ns],
                    "samples_ts": [float(rate)]})
    return out


@dataclass(frozen=True)
class BuildIdentifier:
    """What an exported build is called in ``build_commit``, and why."""

    build_id: str
    identifier: str
    source: str  # "commit", or why it is a hash of the build id


def build_identifiers(trials: pd.DataFrame) -> dict[str, BuildIdentifier]:
    """One identifier of ``SHORT`` characters per build id of ``trials`` (pure): its commit's
    first digits where that commit is hex and no other build has it, else a hash of the build
    id; a hash that meets another build's identifier takes the next digits of its own."""
    commits: dict[str, str | None] = {}
    for build, commit in zip(trials["build_id"].astype(str),
                             column(trials, "build_commit"), strict=True):
        text = str(commit).lower() if isinstance(commit, str) else ""
        commits.setdefault(build, text[:SHORT] if _HEX.match(text) else None)
    counts = Counter(c for c in commits.values() if c)
    shared = {c for c, n in counts.items() if n > 1}
    taken = {c for c in commits.values() if c and c not in shared}
    found: dict[str, BuildIdentifier] = {}
    for build in sorted(commits):
        commit = commits[build]
        if commit and commit not in shared:
            found[build] = BuildIdentifier(build, commit, "commit")
            continue
        digest = hashlib.sha256(build.encode()).hexdigest()
        start = 0
        while digest[start:start + SHORT] in taken:
            start += 1
        ident = digest[start:start + SHORT]
        taken.add(ident)
        why = (f"a hash of the build id: commit {commit} is shared with another build"
               if commit else "a hash of the build id: its commit is not known")
        found[build] = BuildIdentifier(build, ident, why)
    return found


def trial_records(row: Mapping[str, Any], build_key: BuildKey = "id",
                  identifier: str | None = None,
                  builds: Builds | None = None) -> list[dict[str, Any]]:
    """llama-bench records of one ``ok`` trial (none for any other outcome); ``identifier``:
    its build's ``build_commit`` with ``build_key="short"``; ``builds``: the backends of the
    builds at hand (``backends``)."""
    if row.get("outcome") != "ok":
        return []
    commit = _value(row, "build_commit")
    if build_key == "short" and identifier is not None:
        build = identifier
    else:
        build = str(commit if build_key == "commit" and commit else row["build_id"])
    text = _value(row, "engine_record")
    records: list[dict[str, Any]] = []
    if text:
        try:
            raw = json.loads(text)
        except ValueError:
            raw = None
        if isinstance(raw, list) and raw and all(isinstance(r, dict) for r in raw):
            base = {**DEFAULTS, **_base(row, build, builds or {})}
            for record in raw:
                filled = {**base, **{k: v for k, v in record.items() if v is not None}}
                filled["build_commit"] = build
                records.append(filled)
    if not records:
        records = _synthesised(row, build, builds or {})
    return [{**r, **_extras(row)} for r in records]


def exported_rows(trials: pd.DataFrame, run_id: str | None = None) -> pd.DataFrame:
    """The ``ok`` trials an export writes (of one run, if given), oldest first."""
    rows = trials if run_id is None else trials[trials["run_id"] == run_id]
    if run_id is not None and rows.empty:
        known = ", ".join(sorted(trials["run_id"].unique())[-5:])
        raise ConfigError(f"--run {run_id!r}: no trials of that run (latest runs: {known})")
    return rows[rows["outcome"] == "ok"].sort_values(["started_at", "trial_id"])


def export_records(trials: pd.DataFrame, *, run_id: str | None = None,
                   build_key: BuildKey = "short",
                   builds: Builds | None = None) -> list[dict[str, Any]]:
    rows = exported_rows(trials, run_id)
    names = build_identifiers(rows) if build_key == "short" else {}
    out: list[dict[str, Any]] = []
    for row in rows.to_dict("records"):
        named = names.get(str(row["build_id"]))
        out.extend(trial_records(row, build_key, named.identifier if named else None, builds))
    return out


def _atomic(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f".{path.name}.tmp")


def write_jsonl(records: Iterable[Mapping[str, Any]], path: Path) -> int:
    tmp = _atomic(path)
    count = 0
    with tmp.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(dict(record), default=str) + "\n")
            count += 1
    os.replace(tmp, path)
    return count


def write_sqlite(records: Iterable[Mapping[str, Any]], path: Path) -> int:
    """A SQLite database with llama-bench's ``llama_bench`` table (what ``-o sql | sqlite3``
    makes, and what compare-llama-bench.py opens)."""
    tmp = _atomic(path)
    tmp.unlink(missing_ok=True)
    columns = ", ".join(f"{name} {kind}" for name, kind in LLAMA_BENCH_FIELDS)
    placeholders = ", ".join("?" * len(FIELD_NAMES))
    count = 0
    connection = sqlite3.connect(tmp)
    try:
        connection.execute(f"CREATE TABLE llama_bench ({columns})")
        for record in records:
            connection.execute(f"INSERT INTO llama_bench ({', '.join(FIELD_NAMES)}) "
                               f"VALUES ({placeholders})",
                               [_sql(record.get(name)) for name in FIELD_NAMES])
            count += 1
        connection.commit()
    finally:
        connection.close()
    os.replace(tmp, path)
    return count


def _sql(value: Any) -> Any:
    return int(value) if isinstance(value, bool) else value


def export(trials: pd.DataFrame, fmt: str, path: Path, *, run_id: str | None = None,
           build_key: BuildKey = "short", builds: Builds | None = None) -> int:
    """Write the store's trials in ``fmt``; returns the number of records written."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    records = export_records(trials, run_id=run_id, build_key=build_key, builds=builds)
    try:
        if fmt == "llama-bench-jsonl":
            return write_jsonl(records, path)
        return write_sqlite(records, path)
    except (OSError, sqlite3.Error) as error:
        raise StoreError(f"cannot write {path}: {error}") from error


def read_llama_bench(path: Path) -> list[dict[str, Any]]:
    """llama-bench records from JSONL, a JSON array, a SQLite database or ``-o sql`` text."""
    try:
        head = path.read_bytes()[:16]
        if head.startswith(b"SQLite format 3"):
            return _sqlite_rows(sqlite3.connect(f"file:{path}?mode=ro", uri=True), path)
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{path}: cannot read ({error.strerror or error})") from error
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not llama-bench JSONL, JSON, SQL or SQLite") from None
    stripped = text.lstrip()
    try:
        if stripped.startswith("["):
            data = json.loads(stripped)
            return [dict(r) for r in data if isinstance(r, dict)]
        if stripped.startswith("{"):
            return [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError as error:
        raise ConfigError(f"{path}: not valid llama-bench JSON ({error})") from None
    if "llama_bench" in text and "INSERT" in text.upper():
        connection = sqlite3.connect(":memory:")
        try:
            connection.executescript(text)
        except sqlite3.Error as error:
            raise ConfigError(f"{path}: not valid llama-bench SQL ({error})") from None
        return _sqlite_rows(connection, path)
    raise ConfigError(f"{path}: not llama-bench JSONL, JSON, SQL or SQLite")


def _sqlite_rows(connection: sqlite3.Connection, path: Path) -> list[dict[str, Any]]:
    try:
        connection.row_factory = sqlite3.Row
        rows = connection.execute("SELECT * FROM llama_bench").fetchall()
        return [dict(r) for r in rows]
    except sqlite3.Error as error:
        raise ConfigError(f"{path}: no readable llama_bench table ({error})") from None
    finally:
        connection.close()


def default_run_id(now: datetime | None = None) -> str:
    return f"import-{(now or datetime.now(UTC)):%Y%m%d-%H%M%S}"


__all__: Sequence[str] = (
    "FORMATS", "LLAMA_BENCH_FIELDS", "export", "export_records", "read_llama_bench",
    "trial_records", "write_jsonl", "write_sqlite",
)
