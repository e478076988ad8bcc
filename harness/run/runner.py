"""A run: plan the (device x cell) trials, put artefacts on each device, run, store.

One worker thread per device, one trial at a time per device. Every finished trial is written to
the store at once (samples first, then the trial row that marks it done), so killing the harness
loses at most the trial in flight, and ``resume`` re-runs only trials with no stored row.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.device.base import Device
from harness.device.lease import DeviceBusyError
from harness.errors import ConfigError
from harness.run import store_io
from harness.run.events import Event
from harness.run.session import (
    DeviceSummary,
    Prepared,
    RunOptions,
    RunSession,
    RunSummary,
    new_run_id,
)
from harness.run.session import prepare_matrix as prepare
from harness.run.worker import DeviceWorker, jobs_of

__all__ = ["DeviceSummary", "Prepared", "RunOptions", "RunSummary", "execute", "jobs_of",
           "load_run_meta", "new_run_id", "prepare"]


def execute(matrix_path: Path, devices: Sequence[Device], options: RunOptions,
            run_id: str | None = None, on_event: Event | None = None) -> RunSummary:
    """Run a matrix on devices (one thread each); ``run_id`` given = resume that run."""
    session = RunSession.open(matrix_path, options, run_id, prepare=prepare)
    session.write_meta([d.serial for d in devices], adb=_adb_identity(devices))
    events = on_event or (lambda kind, serial, details: None)
    workers = [DeviceWorker(d, session.prepared, session.run_id, options, session.done, events)
               for d in devices]
    # daemon threads: a stopped run (Ctrl-C, SIGTERM) does not wait for the trials in flight;
    # the caller's clean-up stops the phones it started, and the trials are run on --resume
    threads = [threading.Thread(target=w.run, name=f"device-{w.device.serial}", daemon=True)
               for w in workers]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except BaseException:
        for worker in workers:
            worker.stop.set()
        raise
    refused = [w.busy for w in workers if w.busy is not None]
    if refused:  # the others' trials are stored; say so, and fail the command (exit 2)
        raise DeviceBusyError(f"{refused[0]}; the other devices finished, "
                              f"--resume {session.run_id} runs this one's trials later")
    return session.summary([w.summary for w in workers])


def _adb_identity(devices: Sequence[Device]) -> dict[str, Any] | None:
    """The adb the run's phones are reached through (None: only this host, no adb)."""
    from harness.device.adb import AdbDevice, adb_identity

    return adb_identity() if any(isinstance(d, AdbDevice) for d in devices) else None


def load_run_meta(results: Path, run_id: str) -> dict[str, Any]:
    path = store_io.run_meta_path(results, run_id)
    if not path.is_file():
        raise ConfigError(f"no run {run_id!r} in {results} (runs are in {path.parent})")
    data: dict[str, Any] = json.loads(path.read_text())
    return data
