"""The job function a farm worker runs: one job (one configuration's trials) on its own phone.

It runs in the worker process on the USB host that holds the phone: the device comes from that
host's adb server, and the build and model files are read from the paths the driver planned with,
so those paths must be readable on the worker's host (one machine, or a shared mount).

The device is prepared (facts, plan, artefacts pushed) by the first job of a run that reaches this
worker process and kept for the next ones; a restarted worker prepares again, which pushes nothing
when the files are still on the phone.
"""

from __future__ import annotations

import os
import socket
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.device import get_device
from harness.errors import DeviceLostError, HarnessError
from harness.records import SampleRecord, TrialRecord
from harness.run.events import Kind
from harness.run.order import TrialSpec
from harness.run.runner import DeviceWorker, Prepared, RunOptions

TrialResult = tuple[TrialRecord, tuple[SampleRecord, ...]]
_KEEP_DEVICES = 8  # prepared devices kept per worker process (runs x phones)
_PUSH_EVERY_S = 1.0  # push progress is forwarded at most this often


@dataclass(frozen=True)
class JobRequest:
    """What the driver sends: the job's trials and everything needed to run them."""

    run_id: str
    serial: str
    job_id: str
    specs: tuple[TrialSpec, ...]
    first_index: int  # position of the job's first trial among the phone's trials to do
    prepared: Prepared
    options: RunOptions
    done: frozenset[str]  # trials stored before the run started (resume)
    topic: str  # Dask event topic for progress

    @property
    def key(self) -> str:
        """The Dask key: one per job of a run, so a job is never submitted twice."""
        return f"{self.run_id}/{self.job_id}"


@dataclass(frozen=True)
class JobReport:
    """What comes back: the trials, and where and when they ran."""

    job_id: str
    serial: str
    worker: str  # the Dask worker's name, <serial>@<host>
    pid: int  # the worker process
    started: float  # wall clock (time.time) on the worker host
    finished: float
    trials: tuple[TrialResult, ...]
    bytes_pushed: int
    lost: str | None = None  # the phone went away for good: later trials did not run
    failed: str | None = None  # the phone could not be prepared: nothing ran
    note: str | None = None  # a non-fatal device error, e.g. a failed push


class _Emitter:
    """Worker-side events to the driver through Dask's event log (msgpack-safe dicts)."""

    def __init__(self, worker: Any, request: JobRequest) -> None:
        self.worker = worker
        self.request = request
        self.last_push = 0.0

    def __call__(self, kind: str, serial: str, details: dict[str, Any]) -> None:
        if kind == "push":
            now = time.monotonic()
            if now - self.last_push < _PUSH_EVERY_S and details.get("done") != details.get(
                    "total"):
                return
            self.last_push = now
        # msgpack takes plain values only: a Kind or an Outcome (str enums) goes as its string
        safe = {k: _plain(v) for k, v in details.items()
                if v is None or isinstance(v, str | int | float | bool)}
        self.worker.log_event(self.request.topic, {
            "kind": _plain(kind), "serial": serial, "job_id": self.request.job_id,
            "worker": str(self.worker.name), "pid": os.getpid(), "details": safe,
        })


def _plain(value: Any) -> Any:
    return str.__str__(value) if isinstance(value, str) else value


class _Collector:
    """The sink of a prepared device: the current job's trials, in order."""

    def __init__(self) -> None:
        self.trials: list[TrialResult] = []

    def __call__(self, trial: TrialRecord, samples: Sequence[SampleRecord]) -> None:
        self.trials.append((trial, tuple(samples)))


_devices: OrderedDict[tuple[str, str], tuple[DeviceWorker, _Collector]] = OrderedDict()


def _prepared_device(request: JobRequest, emit: _Emitter) -> tuple[DeviceWorker, _Collector, int]:
    """The device of this run on this worker, prepared once; bytes pushed by this call."""
    key = (request.run_id, request.serial)
    if key in _devices:
        _devices.move_to_end(key)
        device_worker, collector = _devices[key]
        device_worker.on_event = emit
        return device_worker, collector, 0
    collector = _Collector()
    device_worker = DeviceWorker(get_device(request.serial), request.prepared, request.run_id,
                                 request.options, set(request.done), emit, sink=collector)
    device_worker.prepare_jobs()
    _devices[key] = (device_worker, collector)
    while len(_devices) > _KEEP_DEVICES:
        _devices.popitem(last=False)
    return device_worker, collector, device_worker.summary.bytes_pushed


def run_job(request: JobRequest) -> JobReport:
    """Run one job on this worker's phone; called by Dask on the worker that holds the phone."""
    from distributed import get_worker

    worker = get_worker()
    started = time.time()
    emit = _Emitter(worker, request)
    emit(Kind.JOB, request.serial, {"key": request.key, "trials": len(request.specs)})
    collector = _Collector()
    pushed = 0
    lost = failed = note = None
    try:
        device_worker, collector, pushed = _prepared_device(request, emit)
        collector.trials.clear()
        note = device_worker.summary.error
        device_worker.run_job(request.specs, request.first_index)
    except DeviceLostError as error:
        lost = str(error)
        _devices.pop((request.run_id, request.serial), None)
    except HarnessError as error:
        failed = str(error)
        _devices.pop((request.run_id, request.serial), None)
    except OSError as error:  # a build or model path this host cannot read
        failed = f"{error} (on the worker's host {socket.gethostname()}; builds and models " \
                 "must be readable there at the driver's paths)"
        _devices.pop((request.run_id, request.serial), None)
    return JobReport(
        job_id=request.job_id, serial=request.serial, worker=str(worker.name), pid=os.getpid(),
        started=started, finished=time.time(), trials=tuple(collector.trials),
        bytes_pushed=pushed, lost=lost, failed=failed, note=note,
    )
