"""llama-bench records from elsewhere -> trials in the store.

llama-bench prints one record per *test*: a prompt test (``n_gen`` 0) and a generation test
(``n_prompt`` 0) for each parameter set. A harness trial carries both, so the two tests of one
parameter set are paired, in the order they appear, into trials; a record with per-repetition
``samples_ts`` (JSONL) gives one trial per repetition, so ``compare`` has a sample to test, while
an SQL row (averages only) gives one trial. Every imported trial has outcome ``ok``, no memory
or thermal measurement, and the raw records in ``engine_record``.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness import knobs
from harness.cell import Cell
from harness.errors import ConfigError
from harness.records import (
    BuildMeta,
    DeviceMeta,
    ModelMeta,
    Outcome,
    TrialIds,
    TrialRecord,
    new_trial,
)

_QUANT = re.compile(
    r"(?<![A-Za-z0-9])(I?Q\d_[A-Z0-9]+(?:_[A-Z]+)?|I?Q\d_\d|BF16|F16|F32)(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_SUFFIX = {" - Small": "_S", " - Medium": "_M", " - Large": "_L"}
_PAIR_KEYS = ("harness_trial_id", "harness_n_ctx", "build_commit", "harness_build_id",
              "harness_device_serial", "cpu_info",
              "model_filename", "model_type", "n_batch", "n_ubatch", "n_threads", "cpu_mask",
              "type_k", "type_v", "flash_attn", "load_mode", "use_mmap", "n_depth")
FLASH_NAMES = {1: "on", 0: "off", -1: "auto"}  # bools hash as 1 / 0


def quant_of(record: Mapping[str, Any]) -> str:
    """The quant level from the file name, else from llama-bench's ``model_type``."""
    for text in (str(record.get("model_filename") or ""), str(record.get("model_type") or "")):
        for long, short in _SUFFIX.items():
            text = text.replace(long, short)
        found = _QUANT.findall(Path(text).name if "/" in text else text)
        if found:
            return str(found[-1]).upper()
    return "unknown"


def model_of(record: Mapping[str, Any]) -> str:
    name = Path(str(record.get("model_filename") or "model")).name
    stem = name[:-5] if name.endswith(".gguf") else name
    quant = quant_of(record)
    return re.sub(rf"[-_.]?{re.escape(quant)}$", "", stem, flags=re.IGNORECASE) or stem


def _flash(value: Any) -> str:
    if isinstance(value, str):
        return value if value in ("on", "off", "auto") else "auto"
    return FLASH_NAMES.get(value, "auto") if value is not None else "auto"


def _mmap(record: Mapping[str, Any]) -> bool:
    if record.get("load_mode") is not None:
        return str(record["load_mode"]) != "none"
    return bool(record.get("use_mmap", True))


def _when(record: Mapping[str, Any], default: datetime) -> datetime:
    text = record.get("test_time")
    if not text:
        return default
    try:
        stamp = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return default
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def _samples(record: Mapping[str, Any] | None, key: str, avg: str) -> list[float]:
    if record is None:
        return []
    values = record.get(key)
    if isinstance(values, str):
        try:
            values = json.loads(values)
        except ValueError:
            values = None
    if isinstance(values, list) and values:
        return [float(v) for v in values]
    return [float(record[avg])] if record.get(avg) is not None else []


def pair_tests(records: Sequence[Mapping[str, Any]]
               ) -> list[tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]]:
    """(prompt test, generation test) pairs, in order of appearance within a parameter set."""
    prompts: dict[tuple[Any, ...], list[Mapping[str, Any]]] = defaultdict(list)
    gens: dict[tuple[Any, ...], list[Mapping[str, Any]]] = defaultdict(list)
    order: list[tuple[Any, ...]] = []
    for record in records:
        key = tuple(str(record.get(k)) for k in _PAIR_KEYS)
        if key not in order:
            order.append(key)
        (gens if int(record.get("n_prompt") or 0) == 0 else prompts)[key].append(record)
    pairs: list[tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]] = []
    for key in order:
        p, g = prompts[key], gens[key]
        for i in range(max(len(p), len(g))):
            pairs.append((p[i] if i < len(p) else None, g[i] if i < len(g) else None))
    return pairs


def _int(record: Mapping[str, Any], key: str, default: int = 0) -> int:
    value = record.get(key)
    return default if value is None or value == "" else int(value)


def to_trials(records: Sequence[Mapping[str, Any]], *, run_id: str, device: str | None = None,
              now: datetime | None = None) -> list[TrialRecord]:
    """Trials from llama-bench records; ``device`` None keeps a ``harness_device_serial`` the
    record carries (a harness export), else ``imported``."""
    if not records:
        raise ConfigError("the file holds no llama-bench records")
    stamp = now or datetime.now(UTC)
    trials: list[TrialRecord] = []
    for prompt, gen in pair_tests(records):
        first = prompt or gen
        assert first is not None
        pp = _samples(prompt, "samples_ts", "avg_ts")
        tg = _samples(gen, "samples_ts", "avg_ts")
        pp_ns = _samples(prompt, "samples_ns", "avg_ns")
        serial = device or str(first.get("harness_device_serial") or "imported")
        build = str(first.get("harness_build_id") or first.get("build_commit") or "unknown")
        n_prompt = _int(prompt, "n_prompt") if prompt else 0
        n_gen = _int(gen, "n_gen") if gen else 0
        n_depth = _int(first, "n_depth")
        cell = Cell(
            build=build, model=model_of(first), quant=quant_of(first),
            n_ctx=_int(first, "harness_n_ctx", n_prompt + n_gen + n_depth),
            type_k=str(first.get("type_k") or knobs.default("type_k")),
            type_v=str(first.get("type_v") or knobs.default("type_v")),
            threads=_int(first, "n_threads", 1),
            affinity=str(first.get("cpu_mask") or "all") if first.get("cpu_strict") else "all",
            flash_attn=_flash(first.get("flash_attn")), mmap=_mmap(first),
            n_batch=_int(first, "n_batch", knobs.default("n_batch")),
            n_ubatch=_int(first, "n_ubatch", knobs.default("n_ubatch")),
            n_prompt=n_prompt, n_gen=n_gen, n_depth=n_depth,
        )
        raw = json.dumps([dict(r) for r in (prompt, gen) if r is not None], default=str)
        for rep in range(max(len(pp), len(tg))):
            pp_tps = pp[rep] if rep < len(pp) else None
            ttft = pp_ns[rep] / 1e6 if rep < len(pp_ns) else None
            trials.append(_trial(cell, first, run_id, serial, len(trials), rep,
                                 _when(first, stamp), pp_tps,
                                 tg[rep] if rep < len(tg) else None, ttft, raw))
    return trials


def _trial(cell: Cell, record: Mapping[str, Any], run_id: str, serial: str, index: int,
           rep: int, started: datetime, pp_tps: float | None, tg_tps: float | None,
           ttft_ms: float | None, raw: str) -> TrialRecord:
    number = record.get("build_number")
    ids = TrialIds(run_id=run_id, trial_id=f"{run_id}/{serial}/{cell.cell_id}/{index}",
                   job_id=f"{serial}/{cell.cell_id}", serial=serial, rep=rep)
    return new_trial(
        ids, cell, Outcome.OK, started_at=started,
        device=DeviceMeta(model=str(record.get("cpu_info")) if record.get("cpu_info") else None),
        build=BuildMeta(
            engine="llama.cpp", version=str(number) if number is not None else None,
            commit=str(record.get("build_commit")) if record.get("build_commit") else None),
        model=ModelMeta(n_params=_int(record, "model_n_params") or None,
                        file_bytes=_int(record, "model_size") or None),
        pp_tps=pp_tps, tg_tps=tg_tps, ttft_ms=ttft_ms, engine_record=raw,
    )
