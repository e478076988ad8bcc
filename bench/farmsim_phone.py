"""The stand-in phone of the simulated farm (bench/farmsim.py): no qemu, no engine.

What it replaces is only the phone and its engine, inside a farm worker: ``harness.farm.job``
asks ``get_device`` for the phone and builds a ``DeviceWorker`` on it; ``install`` points both
names at the stand-ins below, so everything else a job does is the farm's own code (the job
function, the lease on the phone, the artifact fetch into the host's cache, the report to the
driver, the driver's retries and store writes).

- ``SimPhone`` is a Device whose shell is this host's ``sh`` in the phone's own folder (its
  ``/data/local/tmp``), so the lease scripts run as they are; it fails like an unplugged phone
  while it is unplugged.
- ``SimDeviceWorker`` plans nothing and pushes nothing: its first preparation on a phone sleeps
  for the push (longer on a phone with a slow link); each trial announces itself as the real
  one does (``trial`` event with its id: the driver knows the trial in flight), sleeps for its
  duration (drawn from real trials, ``trial_seconds``) and hands an ``ok`` row with its samples
  to the sink. A phone given a loss fault records its trial in flight ``device_lost`` and raises
  ``DeviceLostError``, as the real worker does for a phone gone past the reconnect wait; a phone
  given an unplug fault is unplugged by its host (its worker stops) and plugged back later.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from harness.device.base import DeviceFacts, Progress, ShellResult, shell_command
from harness.errors import DeviceError, DeviceLostError
from harness.records import SampleRecord, TrialRecord, new_trial
from harness.run import store_io
from harness.run.events import Kind
from harness.run.order import TrialSpec
from harness.run.worker import DeviceWorker

DEVICE_TMP = "/data/local/tmp"
SAMPLE_EVERY_S = 0.5  # the runner's default sample interval: one sample row per half second
MAX_SAMPLES = 40


def trial_seconds(trial_id: str, durations: Sequence[float], factor: float) -> float:
    """A trial's stand-in duration: one of the real ``durations``, picked by the trial's id (the
    same trial gets the same duration in the driver's ideal and on the worker), times
    ``factor`` (pure)."""
    pick = int(hashlib.sha256(trial_id.encode()).hexdigest()[:12], 16) % len(durations)
    return durations[pick] * factor


@dataclass(frozen=True)
class SimConfig:
    """What every stand-in phone of a run knows (a JSON file the host processes read)."""

    durations: tuple[float, ...]  # real trial durations, seconds
    factor: float  # stand-in seconds per real second
    state: Path  # the phones' folders: <state>/<serial>/ is the phone's /data/local/tmp
    push_s: float = 0.0  # first preparation of a phone (already scaled)
    slow_push: frozenset[str] = frozenset()  # phones whose link is slow
    slow_factor: float = 10.0
    lose_at: dict[str, int] = field(default_factory=dict)  # serial -> trial index: gone for good
    unplug_at: dict[str, int] = field(default_factory=dict)  # serial -> trial index: unplugged
    unplug_s: float = 1.0  # how long an unplugged phone stays away

    def to_json(self) -> dict[str, Any]:
        return {"durations": list(self.durations), "factor": self.factor,
                "state": str(self.state), "push_s": self.push_s,
                "slow_push": sorted(self.slow_push), "slow_factor": self.slow_factor,
                "lose_at": self.lose_at, "unplug_at": self.unplug_at, "unplug_s": self.unplug_s}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SimConfig:
        return cls(tuple(data["durations"]), data["factor"], Path(data["state"]),
                   data["push_s"], frozenset(data["slow_push"]), data["slow_factor"],
                   dict(data["lose_at"]), dict(data["unplug_at"]), data["unplug_s"])

    @classmethod
    def load(cls, path: Path) -> SimConfig:
        return cls.from_json(json.loads(path.read_text()))

    def seconds(self, trial_id: str) -> float:
        return trial_seconds(trial_id, self.durations, self.factor)

    def folder(self, serial: str) -> Path:
        return self.state / serial.replace(":", "_")


Unplug = Callable[[str], None]  # asks the phone's host to stop its worker (serial)


class SimPhone:
    """A stand-in phone: a folder for its /data/local/tmp, and a plug."""

    # serial -> set while the phone is unplugged (per process)
    plugged_out: ClassVar[dict[str, threading.Event]] = {}

    def __init__(self, serial: str, config: SimConfig) -> None:
        self._serial = serial
        self.config = config
        self.folder = config.folder(serial)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.unplugged = SimPhone.plugged_out.setdefault(serial, threading.Event())

    @property
    def serial(self) -> str:
        return self._serial

    def _check(self) -> None:
        if self.unplugged.is_set():
            raise DeviceError("device offline (unplugged)", self._serial)

    def shell(self, cmd: str | Sequence[str], timeout: float | None = None) -> ShellResult:
        self._check()
        command = shell_command(cmd).replace(DEVICE_TMP, str(self.folder))
        done = subprocess.run(["sh", "-c", command], capture_output=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
        return ShellResult(done.returncode, done.stdout.decode(errors="replace"),
                           done.stderr.decode(errors="replace"))

    def push(self, local: str | Path, remote: str, progress: Progress | None = None) -> None:
        self._check()

    def facts(self) -> DeviceFacts:
        self._check()
        return DeviceFacts(serial=self._serial, kind="sim", model="farmsim-phone",
                           manufacturer="harness", abi="arm64-v8a", abis=("arm64-v8a",),
                           total_ram_kb=8 * 2**20, available_ram_kb=6 * 2**20, cpu_count=8)


def _samples(trial: TrialRecord, seconds: float) -> tuple[SampleRecord, ...]:
    count = max(1, min(MAX_SAMPLES, int(seconds / SAMPLE_EVERY_S)))
    return tuple(SampleRecord(trial.run_id, trial.trial_id, int(i * SAMPLE_EVERY_S * 1000),
                              300 << 20, 320 << 20, 0, 280 << 20, 20 << 20, 0, 40.0, None, None,
                              80, 30.0, "stand-in") for i in range(count))


class SimDeviceWorker(DeviceWorker):
    """The phone's part of a job with the engine replaced by a sleep of the trial's duration."""

    config: SimConfig  # set by install()
    unplug: Unplug = staticmethod(lambda serial: None)  # set by the host process

    def prepare_jobs(self, facts: DeviceFacts | None = None) -> list[list[TrialSpec]]:
        facts = facts or self.device.facts()
        self.summary.memory_model = facts.memory_model
        phone = self.config.folder(self.device.serial)
        marker = phone / "pushed"
        if not marker.exists():  # the first run on this phone pushes; later ones find the files
            slow = self.device.serial in self.config.slow_push
            self._wait(self.config.push_s * (self.config.slow_factor if slow else 1.0))
            marker.write_text("pushed\n")
            self.summary.bytes_pushed += 1
        self._emit(Kind.PUSHED, bytes=self.summary.bytes_pushed, files=1, reused=0)
        return []

    def _wait(self, seconds: float) -> None:
        """Sleep, or stop at once with a DeviceError when the phone is unplugged meanwhile."""
        unplugged = SimPhone.plugged_out.setdefault(self.device.serial, threading.Event())
        if unplugged.wait(seconds):
            raise DeviceError("device offline (unplugged)", self.device.serial)

    def _fires(self, faults: dict[str, int], index: int, kind: str) -> bool:
        """Whether this trial is the phone's fault of ``kind`` (once: a marker remembers)."""
        if faults.get(self.device.serial) != index:
            return False
        marker = self.config.folder(self.device.serial) / f"fault-{kind}"
        if marker.exists():
            return False
        marker.write_text(f"{index}\n")
        return True

    def run_job(self, job: Sequence[TrialSpec], first_index: int = 0) -> None:
        serial = self.device.serial
        for index, spec in enumerate(job, start=first_index):
            self._emit(Kind.TRIAL, index=index, total=len(job), label=spec.cell.label(),
                       build=spec.cell.build, runs_on=spec.cell.setup_label(),
                       trial_id=spec.trial_id)
            seconds = self.config.seconds(spec.trial_id)
            started = datetime.now(UTC)
            if self._fires(self.config.unplug_at, index, "unplug"):
                self._wait(seconds / 2)
                type(self).unplug(serial)
                self._wait(60.0)
            if self._fires(self.config.lose_at, index, "lose"):
                self._wait(seconds / 2)
                self.sink(store_io.bare_trial(spec, "device_lost", "the device went away "
                                              "during the trial (stand-in fault)", None), [])
                self.summary.not_run = len(job) - (index - first_index) - 1
                raise DeviceLostError(f"gone for good (stand-in fault); {self.summary.not_run} "
                                      "trials not run (finish them with --resume)", serial)
            self._wait(seconds)
            trial = new_trial(spec, spec.cell, "ok", started_at=started, wall_s=seconds,
                              tg_tps=20.0, pp_tps=200.0)
            self.sink(trial, _samples(trial, seconds))
            self._emit(Kind.DONE, outcome="ok", tg_tps=20.0, pp_tps=200.0)


def install(config: SimConfig, unplug: Unplug) -> None:
    """Make this process's farm jobs run on stand-in phones (``harness.farm.job``'s device and
    its per-phone worker); the rest of the job is the farm's own code."""
    from harness.farm import job

    for name in ("get_device", "DeviceWorker"):
        if not hasattr(job, name):  # the seam moved: fail loudly rather than run real phones
            raise RuntimeError(f"harness.farm.job has no {name}: update bench/farmsim_phone.py")
    SimDeviceWorker.config = config
    SimDeviceWorker.unplug = staticmethod(unplug)
    job.get_device = lambda serial: SimPhone(serial, config)
    job.DeviceWorker = SimDeviceWorker  # type: ignore[misc]

