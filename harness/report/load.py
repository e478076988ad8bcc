"""Reading only what the report needs from the results store.

At farm scale (a million trials, ten million samples) the report reads with the store's own
reader (``harness.store.read_columns``: named columns and row filters pushed down into Parquet,
the store's migration, null for a missing column, an unreadable part skipped with a warning),
and adds what only the report needs: partitions and part files that cannot match ``--run`` /
``--since`` are skipped by their paths alone, low-cardinality strings read as categoricals, and
samples are read only for the few trials it plots.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import date
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from harness.analysis.monitor import with_stored_energy
from harness.errors import StoreError
from harness.labels import CONFIG_COLUMNS
from harness.store import SCHEMAS, part_files, read_columns

log = logging.getLogger(__name__)

# trial_id is left out on purpose: a million unique ids cost more to read than everything else;
# the few trials whose samples are plotted are looked up by ``find_trial_ids``.
TRIAL_COLUMNS: tuple[str, ...] = tuple(dict.fromkeys((
    "run_id", "config_id", "started_at", "device_serial", "device_model",
    "device_manufacturer", "device_soc", "device_ram_bytes", "build_id", "model_name", "quant",
    "n_ctx", "type_k", "type_v", "threads", "outcome", "error", "evidence", "pp_tps", "tg_tps",
    "peak_pss_bytes", "peak_rss_bytes", "predicted_peak_bytes", "max_temp_c",
    "max_thermal_status", "throttled", "cpu_emulation", "affinity", "applied_affinity",
    "threads_seen", "config_not_applied", "screen_on", "stay_awake", "charging",
    "charge_source", "battery_saver", "doze_state", "cooldown_source",
    "model_sha256", "vm_hwm_bytes", "predicted_kv_bytes", "kv_reported_bytes",
    # what harness.analysis reads besides (labels, TTFT, knob suggestions, the engine axis)
    "engine", "n_prompt", "n_gen", "n_depth", "ttft_ms", "model_n_params",
    # schema 6: validity, sustained workloads, energy (the sections that show them)
    "valid", "invalid_reason", "sustained_s", "time_to_throttle_s", "steady_state_ratio",
    "sustained_tg_tps", "energy_source", "energy_units", "energy_valid", "energy_invalid_reason",
    "idle_power_w", "tg_power_w", "pp_j_per_token", "tg_j_per_token",
    # schema 8: paging and storage (the paging section, and recommend's paging candidates)
    "mmap", "model_file_bytes", "peak_pss_anon_bytes", "memory_model", "storage_read_mb_s",
    "load_mode", "cache", "cache_resident_bytes", "major_faults", "read_bytes",
    "read_bytes_per_token", "major_faults_per_token", "load_ms", "paging",
    "predicted_paging_tg_tps", "swap_in_bytes", "swap_in_bytes_per_token", "paging_unknown",
    # schema 11: where the model ran and what the phone said of its GPU (the Offload section)
    "gpu_emulated", "gpu_info", "devices_used", "gpu_driver", "offloaded_layers",
    "model_layers", "accelerator_memory_bytes", "accelerator_memory_source", "host_memory_bytes",
    "device_reported_bytes", "predicted_accelerator_bytes", "predicted_host_bytes",
    "max_gpu_temp_c", "gpu_throttled", "output_check",
    # what the phone would not let the shell read (the conditions section)
    "unreadable",
    # every knob of a configuration, so labels name whatever differs (harness.labels)
    *CONFIG_COLUMNS,
)))
# strings with few distinct values: read as categoricals (trial_id, error, evidence stay strings)
DICTIONARY_COLUMNS = frozenset(
    f.name for f in SCHEMAS["trials"] if f.type == pa.string()
) - {"trial_id", "error", "evidence", "invalid_reason"}
SAMPLE_COLUMNS = ("trial_id", "t_ms", "pss_bytes", "thermal_status", "max_temp_c", "tg_tps",
                  "gpu_cur_khz", "gpu_max_khz", "gpu_busy_pct", "gpu_temp_c")


def _partition_date(path: Path) -> date | None:
    name = path.parent.name
    try:
        return date.fromisoformat(name.removeprefix("date="))
    except ValueError:
        return None


def select_files(root: Path, table: str, run_id: str | None = None,
                 since: date | None = None) -> list[Path]:
    """Part files that may hold matching rows, decided from their paths only.

    A part lands in the partition of the day it was written, never before its trials started,
    so a partition older than ``since`` cannot hold a trial started on or after it.
    """
    files = part_files(root, table)
    if run_id is not None:
        files = [p for p in files if p.name.startswith(f"part-{run_id}-")]
    if since is not None:
        files = [p for p in files if (d := _partition_date(p)) is None or d >= since]
    return files


def load_trials(root: Path, run_id: str | None = None, since: date | None = None,
                columns: Sequence[str] = TRIAL_COLUMNS) -> pd.DataFrame:
    """Trials matching ``run_id`` / ``since`` with strings as categoricals (compact at scale)."""
    if not (root / "trials").is_dir():
        raise StoreError(f"no results store at {root}: no trials/ folder (see --results)")
    monitored = (root / "energy").is_dir()  # an external monitor's energy replaces the gauge's
    if monitored and "trial_id" not in columns:
        columns = (*columns, "trial_id")
    table = read_columns(select_files(root, "trials", run_id, since), "trials", columns,
                         dictionary=[c for c in columns if c in DICTIONARY_COLUMNS])
    if run_id is not None and table.num_rows:
        table = table.filter(pc.equal(table.column("run_id"), run_id))
    if since is not None and table.num_rows:
        start = pa.scalar(pd.Timestamp(since, tz="UTC"), type=table.schema.field("started_at").type)
        table = table.filter(pc.greater_equal(table.column("started_at"), start))
    frame = table.to_pandas(split_blocks=True)  # a block a column: no 2-D copy of them
    return with_stored_energy(root, frame) if monitored else frame


def find_trial_ids(root: Path, trials: pd.DataFrame) -> list[str | None]:
    """The trial_id of each given trial (run_id, device_serial, config_id, started_at),
    reading only its run's parts; None where no stored row matches."""
    key_columns = ["run_id", "device_serial", "config_id", "started_at"]
    found: dict[tuple[object, ...], str] = {}
    for run in sorted({str(r) for r in trials["run_id"]}):
        table = read_columns(select_files(root, "trials", run_id=run), "trials",
                             ["trial_id", *key_columns], filters=[("run_id", "==", run)])
        for row in table.to_pylist():
            found[tuple(str(row[k]) for k in key_columns)] = row["trial_id"]
    return [found.get((str(r.run_id), str(r.device_serial), str(r.config_id),
                       str(r.started_at.to_pydatetime())))
            for r in trials.itertuples(index=False)]


def load_samples(root: Path, trials: pd.DataFrame) -> pd.DataFrame:
    """Samples of the given trials (columns run_id, trial_id), reading only their runs' parts."""
    if trials.empty:
        return pd.DataFrame(columns=list(SAMPLE_COLUMNS))
    ids = [str(t) for t in trials["trial_id"]]
    files: list[Path] = []
    for run in sorted({str(r) for r in trials["run_id"]}):
        files.extend(select_files(root, "samples", run_id=run))
    table = read_columns(files, "samples", SAMPLE_COLUMNS, filters=[("trial_id", "in", ids)])
    return table.to_pandas()
