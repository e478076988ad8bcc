"""The job function a farm worker runs: one job (one configuration's trials) on its own phone.

It runs in the worker process on the USB host that holds the phone: the device comes from that
host's adb server. The request names builds and models by sha256 only; the first job of a run on
this worker gets what this host's artifact cache lacks from the driver's artifact service
(``harness.farm.artifacts``) and runs them from the cache.

Every job takes the phone's lease (``harness.device.lease``, the same one a local ``harness run``
takes) for as long as it runs, renewed in the background; a phone leased by someone else is not
touched and the report names the holder.

The device is prepared (facts, plan, artefacts pushed) by the first job of a run that reaches this
worker process and kept for the run's next jobs. What preparing learnt of the phone (its facts,
the files verified on it, its probes) is kept for later runs too (``harness.farm.phonestate``):
a later run's first job checks it in one round trip (same boot id, files unchanged) instead of
checksumming every file on the phone again. A restarted worker prepares again, which pushes
nothing when the files are still on the phone. The report splits a job's time into set-up
(artifact fetch, lease, preparing the phone) and the trials.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.device import get_device
from harness.device.base import Device
from harness.device.lease import DeviceBusyError, DeviceLease
from harness.errors import DeviceLostError, HarnessError
from harness.farm.artifacts import (
    ArtifactCache,
    Fetched,
    FileRef,
    default_cache_dir,
    localize,
    worker_tls,
)
from harness.farm.phonestate import PhoneState, StateLedger, revalidate
from harness.records import AdaptiveRecord, SampleRecord, TrialRecord
from harness.run.events import FORWARDED, Kind
from harness.run.order import TrialSpec
from harness.run.session import Prepared, RunOptions
from harness.run.worker import DeviceWorker

TrialResult = tuple[TrialRecord, tuple[SampleRecord, ...]]
_KEEP_DEVICES = 8  # prepared devices kept per worker process (runs x phones)
_PUSH_EVERY_S = 1.0  # push progress is forwarded at most this often
_LEASE_POLL_S = 2.0  # how often a job looks again at a lease its own run holds elsewhere
_LEASE_SLACK_S = 10.0


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
    artifacts_url: str = ""  # the driver's artifact service, https://host:port (http: insecure)
    # the run's token, asked of every request by that service (never in a repr or a log)
    artifacts_token: str = field(default="", repr=False)
    model_refs: tuple[tuple[tuple[str, str], FileRef], ...] = ()  # (model, quant) -> its file

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
    busy: str | None = None  # the phone is leased by another run (named): nothing ran
    # set-up (seconds): artifacts fetched into the host's cache, the lease, the phone prepared
    # (facts, plan, push); the first job of a run on a worker pays the fetch and the push
    fetch_s: float = 0.0
    lease_s: float = 0.0
    prepare_s: float = 0.0
    trials_s: float = 0.0  # running the job's trials (gates, engine, sampling)
    bytes_fetched: int = 0  # downloaded from the driver's artifact service by this job
    corrupt_replaced: tuple[str, ...] = ()  # cached files whose sha256 no longer matched
    adaptive: tuple[AdaptiveRecord, ...] = ()  # why this job's A/B pairs stopped
    # how this job found the phone's prepared state: "kept" from an earlier run (checked in one
    # round trip), "new" (first run on this worker, or the phone rebooted), "" (an earlier job
    # of this run prepared it)
    phone_state: str = ""
    # where the trials' time went, summed over the job's trials (``harness.run.laps``: the
    # engine's own run apart from the harness's phases around it)
    laps: tuple[tuple[str, float], ...] = ()

    @property
    def setup_s(self) -> float:
        return self.fetch_s + self.lease_s + self.prepare_s


class _Emitter:
    """Worker-side events to the driver through Dask's event log (msgpack-safe dicts)."""

    def __init__(self, worker: Any, request: JobRequest) -> None:
        self.worker = worker
        self.request = request
        self.last_push = 0.0
        self.laps: dict[str, float] = {}  # the job's trials' laps (``done`` events), summed

    def __call__(self, kind: str, serial: str, details: dict[str, Any]) -> None:
        if kind == Kind.DONE:
            for phase, seconds in (details.get("timings") or {}).items():
                self.laps[phase] = self.laps.get(phase, 0.0) + seconds
        if kind not in FORWARDED:  # the driver takes only those; the rest comes with the result
            return
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
_phones: dict[str, PhoneState] = {}  # serial -> what preparing it taught, kept across runs


@dataclass
class _Timing:
    fetch_s: float = 0.0
    lease_s: float = 0.0
    prepare_s: float = 0.0
    trials_s: float = 0.0
    fetched: Fetched = field(default_factory=Fetched)
    pushed: int = 0
    adaptive: tuple[AdaptiveRecord, ...] = ()
    phone_state: str = ""


def _prepared_device(request: JobRequest, device: Device, emit: _Emitter,
                     timing: _Timing) -> tuple[DeviceWorker, _Collector]:
    """The device of this run on this worker, prepared once (artifacts fetched, then pushed)."""
    key = (request.run_id, request.serial)
    if key in _devices:
        _devices.move_to_end(key)
        device_worker, collector = _devices[key]
        device_worker.on_event = emit
        return device_worker, collector
    clock = time.monotonic()
    prepared = request.prepared
    models, builds, timing.fetched = localize(
        prepared.models, prepared.builds, dict(request.model_refs), request.artifacts_url,
        ArtifactCache(default_cache_dir(), request.artifacts_token,
                      worker_tls(request.artifacts_url)))
    timing.fetch_s = time.monotonic() - clock
    clock = time.monotonic()
    collector = _Collector()
    kept = _phones.pop(request.serial, None)
    state, facts = revalidate(device, kept)
    timing.phone_state = "kept" if state is kept else "new"
    device_worker = DeviceWorker(device, Prepared(prepared.matrix, prepared.cells, models, builds),
                                 request.run_id, request.options, set(request.done), emit,
                                 sink=collector, ledger=StateLedger(device, state))
    if state.probed is not None:
        device_worker.reuse(state.probed)
    device_worker.prepare_jobs(facts)
    _phones[request.serial] = state
    timing.prepare_s = time.monotonic() - clock
    timing.pushed = device_worker.summary.bytes_pushed
    _devices[key] = (device_worker, collector)
    while len(_devices) > _KEEP_DEVICES:
        _devices.popitem(last=False)
    return device_worker, collector


def _device(request: JobRequest) -> Device:
    cached = _devices.get((request.run_id, request.serial))
    return cached[0].device if cached else get_device(request.serial)


def _take_lease(stack: contextlib.ExitStack, device: Device, request: JobRequest,
                emit: _Emitter) -> None:
    """Hold the phone's lease for the rest of ``stack``. A lease held by this same run from
    another host (a worker of a host that died or lost its network, whose job came here) is
    waited out: nobody renews it, so it expires within its TTL. Anyone else's lease, or ours
    still renewed after two TTLs, is refused (``DeviceBusyError``) as for a local run."""
    ttl = request.options.lease_ttl_s
    deadline = time.monotonic() + 2 * ttl + _LEASE_SLACK_S
    while True:
        lease = DeviceLease(device, request.run_id, ttl)
        try:
            stack.enter_context(lease)
            return
        except DeviceBusyError:
            holder = lease.holder()
            if holder is None or holder.run != lease.run or time.monotonic() > deadline:
                raise
            emit(Kind.WAITING, request.serial, {"lease_of": holder.describe()})
            time.sleep(_LEASE_POLL_S)


def run_job(request: JobRequest) -> JobReport:
    """Run one job on this worker's phone; called by Dask on the worker that holds the phone."""
    from distributed import get_worker

    worker = get_worker()
    started = time.time()
    emit = _Emitter(worker, request)
    emit(Kind.JOB, request.serial, {"key": request.key, "trials": len(request.specs)})
    collector = _Collector()
    timing = _Timing()
    lost = failed = note = busy = None
    try:
        with contextlib.ExitStack() as stack:
            clock = time.monotonic()
            device = _device(request)
            _take_lease(stack, device, request, emit)
            timing.lease_s = time.monotonic() - clock
            device_worker, collector = _prepared_device(request, device, emit, timing)
            collector.trials.clear()
            note = device_worker.summary.error
            clock = time.monotonic()
            decided = len(device_worker.summary.adaptive)
            try:
                device_worker.run_job(request.specs, request.first_index)
            finally:
                timing.trials_s = time.monotonic() - clock
                timing.adaptive = tuple(device_worker.summary.adaptive[decided:])
            if request.serial in _phones:
                _phones[request.serial].probed = device_worker.probed()
    except DeviceBusyError as error:  # a local run (or another farm) holds the phone: touch nothing
        busy = str(error)
    except DeviceLostError as error:
        lost = str(error)
        _forget(request)
    except HarnessError as error:
        failed = str(error)
        _forget(request)
    except OSError as error:  # the host's artifact cache cannot be written, ...
        failed = f"{error} (on the worker's host {socket.gethostname()})"
        _forget(request)
    return JobReport(
        job_id=request.job_id, serial=request.serial, worker=str(worker.name), pid=os.getpid(),
        started=started, finished=time.time(), trials=tuple(collector.trials),
        bytes_pushed=timing.pushed, lost=lost, failed=failed, note=note, busy=busy,
        fetch_s=timing.fetch_s, lease_s=timing.lease_s, prepare_s=timing.prepare_s,
        trials_s=timing.trials_s, bytes_fetched=timing.fetched.bytes,
        corrupt_replaced=timing.fetched.corrupt, adaptive=timing.adaptive,
        phone_state=timing.phone_state, laps=tuple(sorted(emit.laps.items())),
    )


def _forget(request: JobRequest) -> None:
    """A phone lost or failed: its run's device and its kept state go (prepared anew next)."""
    _devices.pop((request.run_id, request.serial), None)
    _phones.pop(request.serial, None)
