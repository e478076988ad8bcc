"""A run session: what both backends (local threads, the Dask farm) share about one run.

It owns the run id (new, or the one being resumed), the prepared matrix, the trials already
stored (for ``--resume``), the run's meta file and the summary at the end. The backends only
decide where each device's jobs run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.run import store_io

if TYPE_CHECKING:
    from harness.run.runner import DeviceSummary, Prepared, RunOptions, RunSummary


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
        from harness.run.runner import new_run_id
        from harness.run.runner import prepare as default_prepare

        started = datetime.now(UTC)
        prepared = (prepare or default_prepare)(matrix_path, options)
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
        from harness.run.runner import RunSummary

        wall = (datetime.now(UTC) - self.started).total_seconds()
        return RunSummary(self.run_id, str(self.matrix_path), tuple(devices), wall)
