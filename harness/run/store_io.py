"""What a run writes to the results store, and how it finds what is already there."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness import store
from harness.plan import PlannedCell
from harness.records import Outcome, SampleRecord, TrialRecord, new_trial
from harness.run.order import TrialSpec


def append(root: Path, run_id: str, trial: TrialRecord, samples: Sequence[SampleRecord]) -> None:
    """Samples first, then the trial row: a trial row means the trial is complete."""
    store.write_part(root, "samples", list(samples), run_id)
    store.write_part(root, "trials", [trial], run_id)


def finished_trials(root: Path, run_id: str) -> set[str]:
    table = store.read_arrow(root, "trials", store.run_files(root, "trials", run_id),
                             columns=["trial_id"])  # a farm night's resume reads 800 parts
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
    return new_trial(spec, spec.cell, outcome, error=error, predicted_peak_bytes=predicted)


def _predicted(plan: PlannedCell) -> int | None:
    return plan.prediction.total if plan.prediction else None


def skipped_trial(spec: TrialSpec, plan: PlannedCell) -> TrialRecord:
    outcome = Outcome.UNSUPPORTED if plan.unsupported else Outcome.SKIPPED_INFEASIBLE
    return bare_trial(spec, outcome, plan.reason, _predicted(plan))


def push_failed_trial(spec: TrialSpec, plan: PlannedCell, error: str | None) -> TrialRecord:
    return bare_trial(spec, Outcome.PUSH_FAILED, error or "artefacts could not be pushed",
                      _predicted(plan))


def lost_trial(spec: TrialSpec, plan: PlannedCell) -> TrialRecord:
    return bare_trial(spec, Outcome.DEVICE_LOST, "the device went away during the trial",
                      _predicted(plan))
