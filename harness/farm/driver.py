"""The farm backend of ``harness run``: the driver side.

The driver plans as the local backend does, then hands each phone's jobs to Dask one at a time,
in order, each with the phone's ``device:`` resource so it runs only on that phone's worker (and
the resource keeps any other run off the phone meanwhile). A job's key is ``<run_id>/<job_id>``.
The driver is the only writer of the results store: it writes a job's trials as soon as its
result arrives (after handing the phone its next job, when the job ended well: the phone does not
wait for the store), skipping trial ids already stored (so a trial that ran twice keeps its first
result), and then releases the future, so Dask never recomputes a finished job after a worker dies.
The driver sleeps until a job ends (each future wakes it) or its next look at the workers.

Failures:
- A worker killed mid-job: Dask puts the job back in the queue; it waits for a worker with the
  phone's resource. If the phone's worker returns within the grace period (the agent restarts it),
  the whole job runs again there: its trials were never written, so nothing is duplicated.
- No worker for the phone for longer than the grace period: the trial in flight (known from the
  worker's progress events) is recorded ``device_lost``; the job's later trials and the phone's
  queued jobs are reported as not run (``--resume`` runs them later).
- A job that keeps killing its worker (the scheduler's ``allowed-failures``): its trial in flight
  is recorded ``device_lost``, its later trials are not run, and the phone goes on to its next job.
- The phone itself lost (adb gone beyond the reconnect wait): as in the local backend, the trial in
  flight is ``device_lost`` and the phone's remaining trials are not run.
- The phone leased by another run (a local ``harness run``, another farm): the job touches
  nothing and reports the holder; the phone's trials are not run, and the run ends with that
  ``DeviceBusyError`` (exit code 2) after the other phones finished, as the local backend does.
The other phones keep going in every case.

Builds and models are not read at the driver's paths on the workers: the driver serves the run's
files by sha256 from an artifact service (``harness.farm.artifacts``) and each job names them by
hash; a worker fetches what its host's cache lacks.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness import store
from harness.artifacts.builds import builds_root
from harness.device.lease import DeviceBusyError
from harness.errors import ConfigError
from harness.farm import FarmError, require_distributed
from harness.farm.artifacts import ArtifactService, FileRef, service_address, strip_paths
from harness.farm.job import JobReport, JobRequest, run_job
from harness.farm.naming import farm_phones, resource_map
from harness.farm.security import FarmTLS, describe, scheduler_url
from harness.records import TrialRecord
from harness.run import adaptive, store_io
from harness.run.events import FORWARDED, Event, Kind
from harness.run.order import TrialSpec, interleave
from harness.run.runner import (
    DeviceSummary,
    Prepared,
    RunOptions,
    RunSummary,
    jobs_of,
    prepare,
)
from harness.run.session import RunSession

DEFAULT_GRACE_S = 120.0
_FORWARDED = FORWARDED


@dataclass(frozen=True)
class JobRecord:
    """Where and when one job ran (placement, for the summary and the tests)."""

    key: str
    serial: str
    worker: str
    pid: int
    started: float
    finished: float
    trials: int
    written: int  # trials newly stored (a trial already stored is not written again)
    setup_s: float = 0.0  # artifact fetch + lease + preparing the phone (facts, plan, push)
    trials_s: float = 0.0  # the trials themselves
    bytes_fetched: int = 0  # from the artifact service into the host's cache
    busy: str | None = None  # the phone's lease holder, when the job could not take it
    corrupt_replaced: tuple[str, ...] = ()  # cached files found corrupt and fetched again
    lease_s: float = 0.0  # of setup_s: taking the phone's lease (waiting out a dead host's)
    phone_state: str = ""  # "kept" from an earlier run, "new", "" (an earlier job's): JobReport
    laps: tuple[tuple[str, float], ...] = ()  # the trials' phases, summed: JobReport.laps

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "serial": self.serial, "worker": self.worker, "pid": self.pid,
                "trials": self.trials, "written": self.written,
                "seconds": round(self.finished - self.started, 2),
                "setup_s": round(self.setup_s, 3), "trials_s": round(self.trials_s, 3),
                "lease_s": round(self.lease_s, 3), "phone_state": self.phone_state,
                "bytes_fetched": self.bytes_fetched, "busy": self.busy,
                "corrupt_replaced": list(self.corrupt_replaced),
                "laps": {phase: round(seconds, 4) for phase, seconds in self.laps}}


@dataclass(frozen=True)
class FarmSummary:
    run: RunSummary
    jobs: tuple[JobRecord, ...]
    duplicates_skipped: int
    bytes_served: int = 0  # by the driver's artifact service over the whole run
    security: str = ""  # harness.farm.security.describe: TLS (which farm CA) or insecure
    artifact_refused: int = 0  # connections and requests the artifact service refused

    def to_json(self) -> dict[str, Any]:
        return {**self.run.to_json(), "backend": "dask", "farm_security": self.security,
                "duplicates_skipped": self.duplicates_skipped,
                "artifact_bytes_served": self.bytes_served,
                "artifact_refused": self.artifact_refused,
                "jobs": [j.to_json() for j in self.jobs]}


class FarmBusyError(DeviceBusyError):
    """A phone of the run was leased by someone else; the others finished (``summary``)."""

    def __init__(self, message: str, summary: FarmSummary) -> None:
        super().__init__(message)
        self.summary = summary


@dataclass
class _Job:
    serial: str
    specs: list[TrialSpec]
    first_index: int
    key: str


@dataclass(frozen=True)
class _Shipped:
    """What the jobs carry instead of the driver's paths, and what the service serves."""

    prepared: Prepared  # models and builds with names, not paths
    model_refs: tuple[tuple[tuple[str, str], FileRef], ...]
    files: dict[str, Path]  # sha256 -> file on the driver


def ship(prepared: Prepared) -> _Shipped:
    models, builds, refs, files = strip_paths(prepared.models, prepared.builds)
    return _Shipped(Prepared(prepared.matrix, prepared.cells, models, builds),
                    tuple(sorted(refs.items())), files)


def execute_farm(matrix_path: Path, scheduler: str, options: RunOptions,
                 serials: Sequence[str] | None = None, run_id: str | None = None,
                 on_event: Event | None = None, grace_s: float = DEFAULT_GRACE_S,
                 poll_s: float = 0.5, artifact_address: str | None = None, *,
                 tls: FarmTLS | None) -> FarmSummary:
    """Run a matrix on the farm's phones (``serials``, or every phone with a worker).

    ``tls`` is the driver's certificates (``harness.farm.security``): the scheduler connection
    and the artifact service use them; None runs in plaintext (``--insecure``), and the run's
    meta says which. ``artifact_address`` (``HOST[:PORT]``, else ``$HARNESS_ARTIFACT_ADDRESS``,
    else this machine's address towards the scheduler) is where the run's files are served to
    the workers, to requests that carry the run's token.
    """
    distributed = require_distributed()
    scheduler = scheduler_url(scheduler, tls)
    options = replace(options, builds=builds_root(options.builds).resolve())
    host, port = service_address(scheduler, artifact_address)
    session = RunSession.open(matrix_path, options, run_id, prepare=prepare)
    shipped = ship(session.prepared)
    try:
        client = distributed.Client(scheduler, timeout="10s", set_as_default=False,
                                    security=tls.security() if tls else None)
    except (OSError, TimeoutError) as error:
        raise FarmError(f"cannot reach the Dask scheduler at {scheduler} ({error}); start one "
                        "with `harness farm scheduler`"
                        + (" (with the same farm's certificates)" if tls else "")) from error
    except ImportError as error:  # Dask raises a scheduler's refusal of a client as this
        raise FarmError(f"the Dask scheduler at {scheduler} refused this driver: {error}") \
            from error
    with client:
        present = farm_phones(client.scheduler_info()["workers"])
        chosen = list(serials) if serials else sorted(present)
        if not chosen:
            raise ConfigError(f"no phone has a worker on the scheduler at {scheduler}; run "
                              "`harness farm agent --scheduler ADDR` on each USB host")
        if not any(s in present for s in chosen):
            raise ConfigError(f"none of {', '.join(chosen)} has a worker on the scheduler at "
                              f"{scheduler} (known: {', '.join(sorted(present)) or 'none'})")
        session.write_meta(chosen, backend="dask", scheduler=scheduler,
                           adb="on each agent host (its own adb server)",
                           farm_security=describe(tls))
        with ArtifactService(shipped.files, host, port, tls=tls) as service:
            run = _FarmRun(distributed, client, shipped, service.url, service.token,
                           session.run_id, options,
                           session.done, chosen,
                           on_event or (lambda kind, serial, details: None), grace_s, poll_s)
            run.run()
            served, refused = service.bytes_served, service.refused
    summary = session.summary([run.summaries[s] for s in chosen])
    farm = FarmSummary(summary, tuple(run.jobs), run.duplicates, served, describe(tls), refused)
    if run.busy:  # as the local backend: the others finished; say so, and fail (exit 2)
        first = next(iter(run.busy.values()))
        raise FarmBusyError(f"{first}; the other devices finished, --resume {session.run_id} "
                            "runs this one's trials later", farm)
    return farm


class _FarmRun:
    """The driver's loop: one job in flight per phone, results written as they arrive."""

    def __init__(self, distributed: Any, client: Any, shipped: _Shipped, artifacts_url: str,
                 artifacts_token: str, run_id: str, options: RunOptions, done: set[str],
                 serials: Sequence[str], events: Event, grace_s: float, poll_s: float) -> None:
        self.distributed = distributed
        self.client = client
        self.shipped = shipped
        self.artifacts_url = artifacts_url
        self.artifacts_token = artifacts_token
        prepared = shipped.prepared
        self.run_id = run_id
        self.options = options
        self.done = frozenset(done)
        self.stored = set(done)
        self.events = events
        self.grace_s = grace_s
        self.poll_s = poll_s
        self.resources = resource_map(serials)
        self.summaries = {s: DeviceSummary(s) for s in serials}
        self.topic = f"harness-run/{run_id}"
        self.queues: dict[str, deque[_Job]] = {}
        self.inflight: dict[Any, _Job] = {}  # future -> job
        self.in_trial: dict[str, str] = {}  # job key -> trial id in flight (worker events)
        self.absent_since: dict[str, float] = {}
        self.jobs: list[JobRecord] = []
        self.duplicates = 0
        self.busy: dict[str, str] = {}  # serial -> the refusal naming the lease holder
        self.lock = threading.Lock()
        self.wake = threading.Event()  # set by each job's future as it ends
        for serial in serials:
            cells = adaptive.planned_cells(prepared.cells, prepared.matrix.adaptive)
            todo = [t for t in interleave(cells, run_id, serial)
                    if t.trial_id not in self.done]
            queue: deque[_Job] = deque()
            index = 0
            for specs in jobs_of(todo):
                queue.append(_Job(serial, specs, index, f"{run_id}/{specs[0].job_id}"))
                index += len(specs)
            self.queues[serial] = queue
            events("planned", serial, {"total": len(todo), "todo": len(todo),
                                       "runnable": len(todo)})

    # -- worker events (called on the client's event thread) --------------------------------
    def _on_worker_event(self, event: tuple[float, Any]) -> None:
        _, message = event
        if not isinstance(message, dict) or message.get("kind") not in _FORWARDED:
            return
        details = dict(message.get("details") or {})
        if message["kind"] == "trial" and details.get("trial_id"):
            with self.lock:
                self.in_trial[f"{self.run_id}/{message['job_id']}"] = str(details["trial_id"])
        details.update(worker=message.get("worker"), pid=message.get("pid"))
        self.events(str(message["kind"]), str(message.get("serial")), details)

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> None:
        self.client.subscribe_topic(self.topic, self._on_worker_event)
        try:
            last_check = 0.0
            while True:
                self._submit_next()
                if not self.inflight:
                    break
                finished = [f for f in list(self.inflight) if f.done()]
                for future in finished:
                    self._collect(future)
                if not finished:  # until a job ends (its future wakes us) or the next look
                    self.wake.wait(max(0.0, last_check + self.poll_s - time.monotonic()))
                    self.wake.clear()
                if time.monotonic() - last_check >= self.poll_s:
                    last_check = time.monotonic()
                    self._check_presence()
        finally:  # on the way out after an error, too: nothing may mask that error
            with contextlib.suppress(Exception):
                for future in list(self.inflight):
                    future.cancel()
                self.client.unsubscribe_topic(self.topic)

    def _submit_next(self) -> None:
        busy = {job.serial for job in self.inflight.values()}
        for serial, queue in self.queues.items():
            if serial in busy or not queue:
                continue
            job = queue.popleft()
            request = JobRequest(self.run_id, serial, job.specs[0].job_id, tuple(job.specs),
                                 job.first_index, self.shipped.prepared, self.options,
                                 self.done, self.topic, self.artifacts_url,
                                 self.artifacts_token, self.shipped.model_refs)
            future = self.client.submit(run_job, request, key=job.key,
                                        resources={self.resources[serial]: 1}, retries=1)
            self.inflight[future] = job
            future.add_done_callback(lambda _: self.wake.set())

    def _collect(self, future: Any) -> None:
        job = self.inflight.pop(future)
        self.absent_since.pop(job.serial, None)
        try:
            if future.status == "finished":
                report: JobReport = future.result()
                if not (report.busy or report.lost or report.failed):
                    self._submit_next()  # its next job first: the phone need not wait for the store
                self._write_report(job, report)
            elif future.status == "error":
                error = future.exception()
                if isinstance(error, self.distributed.KilledWorker):
                    self._job_killed(job, f"the job killed its farm worker repeatedly ({error})")
                else:
                    self._job_killed(job, f"the job failed on its worker: {error!r}")
            else:  # cancelled or lost by the scheduler, not by us
                self._job_killed(job, f"the scheduler dropped the job ({future.status})")
        finally:
            future.release()
            with self.lock:
                self.in_trial.pop(job.key, None)

    def _check_presence(self) -> None:
        """Give up on phones whose worker has been gone longer than the grace period."""
        if not self.inflight:
            return
        try:
            present = set(farm_phones(self.client.scheduler_info()["workers"]))
        except OSError as error:  # distributed's CommClosedError is an OSError
            raise FarmError(
                f"lost the Dask scheduler ({error}); the jobs finished so far are stored: "
                f"finish with --resume {self.run_id}") from error
        now = time.monotonic()
        for future, job in list(self.inflight.items()):
            if job.serial in present:
                self.absent_since.pop(job.serial, None)
                continue
            if job.serial not in self.absent_since:
                self.absent_since[job.serial] = now
                self.events(Kind.WAITING, job.serial, {"grace_s": self.grace_s})
                continue
            if now - self.absent_since[job.serial] < self.grace_s:
                continue
            future.cancel()
            self.inflight.pop(future)
            future.release()
            reason = (f"no farm worker for {self.grace_s:.0f} s (phone unplugged or its host "
                      "down)")
            self._job_killed(job, reason)
            self._stop_phone(job.serial, reason, "lost")

    # -- outcomes ------------------------------------------------------------------------------
    def _write(self, serial: str, trial: TrialRecord, samples: Sequence[Any]) -> bool:
        if trial.trial_id in self.stored:
            self.duplicates += 1
            return False
        store_io.append(self.options.results, self.run_id, trial, samples)
        self.stored.add(trial.trial_id)
        self.summaries[serial].outcomes[trial.outcome] += 1
        self.events("done", serial, {"outcome": trial.outcome, "tg_tps": trial.tg_tps,
                                     "pp_tps": trial.pp_tps})
        return True

    def _write_report(self, job: _Job, report: JobReport) -> None:
        written = sum(self._write(job.serial, trial, samples) for trial, samples in report.trials)
        summary = self.summaries[job.serial]
        summary.bytes_pushed += report.bytes_pushed
        if report.adaptive:  # why the job's A/B pairs stopped (adaptive: matrices)
            store.write_part(self.options.results, "adaptive", list(report.adaptive),
                             self.run_id)
            summary.adaptive.extend(report.adaptive)
        if report.note and not summary.error:
            summary.error = report.note
        self.jobs.append(JobRecord(job.key, job.serial, report.worker, report.pid,
                                   report.started, report.finished, len(report.trials), written,
                                   report.setup_s, report.trials_s, report.bytes_fetched,
                                   report.busy, report.corrupt_replaced, report.lease_s,
                                   report.phone_state, report.laps))
        returned = {trial.trial_id for trial, _ in report.trials}
        summary.not_run += sum(1 for s in job.specs if s.trial_id not in returned)
        if report.busy:
            self.busy[job.serial] = report.busy
            self._stop_phone(job.serial, report.busy, "failed")
        elif report.lost or report.failed:
            self._stop_phone(job.serial, str(report.lost or report.failed),
                             "lost" if report.lost else "failed")

    def _job_killed(self, job: _Job, reason: str) -> None:
        """The job never returned: its trial in flight is device_lost, the rest not run."""
        with self.lock:
            in_flight = self.in_trial.get(job.key)
        for spec in job.specs:
            if spec.trial_id == in_flight:
                self._write(job.serial, store_io.bare_trial(spec, "device_lost", reason, None),
                            [])
            elif spec.trial_id not in self.stored:
                self.summaries[job.serial].not_run += 1
        self.summaries[job.serial].error = reason
        self.events("failed", job.serial, {"error": reason})

    def _stop_phone(self, serial: str, reason: str, kind: str) -> None:
        """The phone's queued jobs are reported not run."""
        queue = self.queues[serial]
        summary = self.summaries[serial]
        summary.not_run += sum(len(job.specs) for job in queue)
        queue.clear()
        summary.error = reason
        self.events(kind, serial, {"error": reason})
