"""What a run writes to the results store, and how it finds what is already there."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness import store
from harness.plan import PlannedCell
from harness.records import SampleRecord, TrialRecord
from harness.run.order import TrialSpec


def append(root: Path, run_id: str, trial: TrialRecord, samples: Sequence[SampleRecord]) -> None:
    """Samples first, then the trial row: a trial row means the trial is complete."""
    store.write_part(root, "samples", list(samples), run_id)
    store.write_part(root, "trials", [trial], run_id)


def finished_trials(root: Path, run_id: str) -> set[str]:
    table = store.read_arrow(root, "trials", store.run_files(root, "trials", run_id))
    return set(table.column("trial_id").to_pylist())


def run_meta_path(root: Path, run_id: str) -> Path:
    return root / "runs" / f"{run_id}.json"


def write_run_meta(root: Path, run_id: str, meta: dict[str, Any]) -> None:
    path = run_meta_path(root, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    history = json.loads(path.read_text()).get("sessions", []) if path.is_file() else []
    meta = {**meta, "sessions": [*history, meta.get("started_at")]}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(tmp, path)


def bare_trial(spec: TrialSpec, outcome: str, error: str | None,
               predicted: int | None) -> TrialRecord:
    """A trial that produced no measurement (skipped, unsupported, lost before it ran ...)."""
    cell = spec.cell
    return TrialRecord(
        run_id=spec.run_id, trial_id=spec.trial_id, job_id=spec.job_id, cell_id=cell.cell_id,
        config_id=cell.config_id, rep=spec.rep, started_at=datetime.now(UTC), wall_s=None,
        device_serial=spec.serial, device_model=None, device_manufacturer=None,
        device_soc=None, device_sdk=None, device_ram_bytes=None,
        build_id=cell.build, build_engine=None, build_version=None, build_commit=None,
        build_abi=None, model_name=cell.model, model_sha256=None, quant=cell.quant,
        model_n_params=None, model_file_bytes=None, n_ctx=cell.n_ctx, n_prompt=cell.n_prompt,
        n_gen=cell.n_gen, n_depth=cell.n_depth, type_k=cell.type_k, type_v=cell.type_v,
        flash_attn=cell.flash_attn, threads=cell.threads, affinity=cell.affinity,
        mmap=cell.mmap, n_batch=cell.n_batch, n_ubatch=cell.n_ubatch, outcome=outcome,
        error=error, pp_tps=None, tg_tps=None, ttft_ms=None, peak_pss_bytes=None,
        peak_rss_bytes=None, peak_swap_bytes=None, vm_hwm_bytes=None,
        peak_pss_anon_bytes=None, peak_pss_file_bytes=None, predicted_peak_bytes=predicted,
        max_temp_c=None, max_thermal_status=None, throttled=False, cooldown_waited_s=None,
        start_thermal_status=None, start_temp_c=None, battery_level=None,
        battery_temp_c=None, evidence=None, engine_record=None,
    )


def _predicted(plan: PlannedCell) -> int | None:
    return plan.prediction.total if plan.prediction else None


def skipped_trial(spec: TrialSpec, plan: PlannedCell) -> TrialRecord:
    outcome = "unsupported" if plan.reason_code in (
        "kv_type_unsupported", "v_cache_needs_flash_attn", "workload_exceeds_ctx",
    ) else "skipped_infeasible"
    return bare_trial(spec, outcome, plan.reason, _predicted(plan))


def push_failed_trial(spec: TrialSpec, plan: PlannedCell, error: str | None) -> TrialRecord:
    return bare_trial(spec, "push_failed", error or "artefacts could not be pushed",
                      _predicted(plan))


def lost_trial(spec: TrialSpec, plan: PlannedCell) -> TrialRecord:
    return bare_trial(spec, "device_lost", "the device went away during the trial",
                      _predicted(plan))
