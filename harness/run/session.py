"""A run session: what both backends (local threads, the Dask farm) share about one run.

The run's shared types live here (options, the prepared matrix, the summaries), so the backends
and the device worker import them without importing each other. A session owns the run id (new,
or the one being resumed), the prepared matrix, the trials already stored (for ``--resume``), the
run's meta file and the summary at the end. The backends only decide where each device's jobs
run.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.artifacts.builds import Build, builds_root, open_build
from harness.budget import DEFAULT_RESERVE_BYTES
from harness.cell import DEVICE_PYTHON_BUILD, Cell
from harness.device.lease import DEFAULT_TTL_S
from harness.engines import get_engine
from harness.matrix import Matrix, expand, load_matrix
from harness.plan import resolve_models
from harness.records import AdaptiveRecord
from harness.run import store_io
from harness.run.modelfiles import folder_files


@dataclass(frozen=True)
class RunOptions:
    results: Path
    builds: Path | None = None
    reserve_bytes: int = DEFAULT_RESERVE_BYTES
    no_skip: bool = False
    sample_interval_s: float = 0.5  # <= 0 disables the sampler (bench/sampler.py)
    status_interval_s: float = 0.0  # dumpsys thermalservice during a trial (0: before/after)
    dumpsys_interval_s: float = 0.0  # dumpsys meminfo <pid> during a trial (0: never)
    reconnect_s: float = 60.0  # how long a lost device is waited for before its jobs stop
    lease_ttl_s: float = DEFAULT_TTL_S  # a device lease not renewed for this long expires


@dataclass
class DeviceSummary:
    serial: str
    outcomes: Counter[str] = field(default_factory=Counter)
    bytes_pushed: int = 0
    not_run: int = 0
    error: str | None = None
    adaptive: list[AdaptiveRecord] = field(default_factory=list)  # why each A/B pair stopped
    # a virtual phone's memory model (cgroup: the host kernel enforces it; simulated: the
    # phone's own accounting), None on a real phone: said for every run, never a silent fallback
    memory_model: str | None = None


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    matrix: str
    devices: tuple[DeviceSummary, ...]
    wall_s: float

    def outcomes(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for device in self.devices:
            total.update(device.outcomes)
        return total

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "matrix": self.matrix,
            "wall_s": round(self.wall_s, 1),
            "trials_by_outcome": dict(sorted(self.outcomes().items())),
            "devices": [
                {"serial": d.serial, "trials_by_outcome": dict(sorted(d.outcomes.items())),
                 "bytes_pushed": d.bytes_pushed, "not_run": d.not_run, "error": d.error,
                 "memory_model": d.memory_model,
                 **({"adaptive": [adaptive_json(r) for r in d.adaptive]} if d.adaptive else {})}
                for d in self.devices
            ],
        }


def adaptive_json(record: AdaptiveRecord) -> dict[str, Any]:
    return {"config_id": record.config_id, "baseline": record.baseline_build,
            "candidate": record.candidate_build, "metric": record.metric, "step": record.step,
            "reason": record.reason, "repetitions": record.repetitions,
            "ratio": record.ratio}


def new_run_id(now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"



@dataclass
class Prepared:
    matrix: Matrix
    cells: list[Cell]
    models: Mapping[tuple[str, str], Any]
    builds: dict[str, Build]


def prepare_matrix(matrix_path: Path, options: RunOptions) -> Prepared:
    matrix = load_matrix(matrix_path)
    cells = expand(matrix)
    models = resolve_models(matrix, cells)
    for cell in cells:  # every engine of the matrix loads (a generic one names its file)
        engine = get_engine(cell.engine)
        own = matrix.models[cell.model].engine_path(cell.engine, cell.quant)
        if own is not None:  # an engine's own model files: there, with what it reads beside
            folder_files(own, f"{matrix_path}: models.{cell.model}.engines.{cell.engine}",
                         getattr(engine, "model_files", ()))
    root = builds_root(options.builds)
    names = sorted({c.build for c in cells if c.build != DEVICE_PYTHON_BUILD})
    builds = {name: open_build(root, name) for name in names}
    return Prepared(matrix, cells, models, builds)



@dataclass
class RunSession:
    matrix_path: Path
    options: RunOptions
    prepared: Prepared
    run_id: str
    resumed: bool
    started: datetime
    done: set[str] = field(default_factory=set)  # trial ids already stored (resume)

    @classmethod
    def open(cls, matrix_path: Path, options: RunOptions, run_id: str | None = None,
             prepare: Callable[[Path, RunOptions], Prepared] | None = None) -> RunSession:
        """Prepare the matrix (fails before anything is written) and find what is done."""
        started = datetime.now(UTC)
        prepared = (prepare or prepare_matrix)(matrix_path, options)
        resumed = run_id is not None
        run_id = run_id or new_run_id(started)
        done = store_io.finished_trials(options.results, run_id) if resumed else set()
        return cls(matrix_path, options, prepared, run_id, resumed, started, done)

    def write_meta(self, devices: Sequence[str], **extra: Any) -> None:
        """The run's meta file (each session of a resumed run is appended to its history)."""
        store_io.write_run_meta(self.options.results, self.run_id, {
            "run_id": self.run_id, "matrix": str(self.matrix_path), "resumed": self.resumed,
            "devices": list(devices), "started_at": self.started.isoformat(), **extra,
            "pid": os.getpid(),
        })

    def summary(self, devices: Sequence[DeviceSummary]) -> RunSummary:
        wall = (datetime.now(UTC) - self.started).total_seconds()
        return RunSummary(self.run_id, str(self.matrix_path), tuple(devices), wall)
