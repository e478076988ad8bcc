"""A farm worker keeps its phone's prepared state from one run to the next (issue 50, item 3).

The jobs run in this process through ``harness.farm.job.run_job`` (as a Dask worker calls it),
on one virtual phone of the test's private adb server, with the run's files served by a real
artifact service; the phone's device records every command and push it is given.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import write_matrix

from harness.artifacts.builds import Build
from harness.device.adb import AdbDevice
from harness.farm import job
from harness.farm.artifacts import ArtifactService
from harness.farm.driver import ship
from harness.run import adaptive
from harness.run.order import interleave
from harness.run.runner import RunOptions, prepare
from harness.run.worker import jobs_of

pytestmark = pytest.mark.slow


class RecordingDevice(AdbDevice):
    """The phone, with every shell command and push it is given kept in order."""

    def __init__(self, serial: str, log: list[str]) -> None:
        super().__init__(serial)
        self.log = log

    def shell(self, cmd: Any, timeout: float | None = None) -> Any:
        self.log.append(f"shell {cmd}")
        return super().shell(cmd, timeout=timeout)

    def push(self, local: Any, remote: str, progress: Any = None) -> None:
        self.log.append(f"push {remote}")
        super().push(local, remote, progress=progress)


@dataclass
class FakeWorker:
    name: str
    events: list[dict[str, Any]] = field(default_factory=list)

    def log_event(self, topic: str, message: dict[str, Any]) -> None:
        self.events.append(message)


@dataclass
class Ran:
    reports: list[job.JobReport]
    commands: list[list[str]]  # per job


@pytest.fixture
def farm_worker(virtual_phone: Any, tmp_path: Path, host_build: Build,
                tiny_ladder: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``run(run_id)``: every job of a two-configuration matrix on the phone, in this one
    worker process (its kept state starts empty)."""
    serial = virtual_phone.serial
    monkeypatch.setenv("HARNESS_FARM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(job, "_devices", type(job._devices)())
    monkeypatch.setattr(job, "_phones", {}, raising=False)
    worker = FakeWorker(f"{serial}@test")
    monkeypatch.setattr("distributed.get_worker", lambda: worker)
    log: list[str] = []
    monkeypatch.setattr(job, "get_device", lambda s: RecordingDevice(s, log))
    matrix = write_matrix(tmp_path, "kept", ["Q8_0", "Q4_K_M"], reps=1)
    options = RunOptions(tmp_path / "results", host_build.path.parent)
    shipped = ship(prepare(matrix, options))

    def run(run_id: str) -> Ran:
        cells = adaptive.planned_cells(shipped.prepared.cells, None)
        ran = Ran([], [])
        with ArtifactService(shipped.files) as service:
            index = 0
            for specs in jobs_of(interleave(cells, run_id, serial)):
                log.clear()
                ran.reports.append(job.run_job(job.JobRequest(
                    run_id, serial, specs[0].job_id, tuple(specs), index, shipped.prepared,
                    options, frozenset(), f"topic/{run_id}", service.url, service.token,
                    shipped.model_refs)))
                ran.commands.append(list(log))
                index += len(specs)
        return ran

    yield run


def preparing(commands: list[str], marks: tuple[str, ...] = (
        "getprop", "sha256sum", "push ", "dd if=/dev/zero", "harness-generate")) -> list[str]:
    """The commands of preparing a phone and probing it: facts (getprop), a checksum pass over
    the files on it, a push, the memory bandwidth's copy test, an output check (the kept
    state's check, which names the files, is not one of them)."""
    return [c for c in commands if any(m in c for m in marks) and "@@harness:stat" not in c]


def outcomes(ran: Ran) -> list[tuple[str, str | None]]:
    return [(t.outcome, t.output_check) for r in ran.reports for t, _ in r.trials]


def test_a_later_run_on_the_same_phone_checks_its_kept_state_instead_of_preparing_again(
        farm_worker: Any) -> None:
    first = farm_worker("run-1")
    assert [r.failed or r.lost for r in first.reports] == [None, None]
    assert preparing(first.commands[0])  # the first run prepares and probes
    # its second job reuses that (as before); only its own cell's output check is new
    found = preparing(first.commands[1])
    assert len(found) == 1 and "harness-generate" in found[0] and "Q4_K_M" in found[0]
    assert outcomes(first) == [("ok", "match"), ("ok", "match")]

    second = farm_worker("run-2")
    assert [preparing(c) for c in second.commands] == [[], []], json.dumps(
        [preparing(c) for c in second.commands])[:2000]
    assert [r.phone_state for r in second.reports] == ["kept", ""]
    assert [r.bytes_pushed for r in second.reports] == [0, 0]
    # the same trials, measured, with the verdicts the kept probes give
    assert outcomes(second) == outcomes(first)
    # the check is one round trip before the run's plan, and set-up is now a small part
    assert sum("@@harness:stat" in c for c in second.commands[0]) == 1
    assert second.reports[0].prepare_s < first.reports[0].prepare_s


def test_a_rebooted_phone_is_prepared_again_and_a_wiped_file_is_pushed_again(
        farm_worker: Any, virtual_phone: Any, tiny_ladder: dict[str, Path]) -> None:
    farm_worker("run-1")
    # the phone rebooted: a new boot id
    boot = virtual_phone.root / "proc/sys/kernel/random/boot_id"
    boot.write_text("0b7a1f7e-94c5-4f0e-8a3b-3c1e2d4f5a6b\n")
    rebooted = farm_worker("run-2")
    assert rebooted.reports[0].phone_state == "new"
    found = preparing(rebooted.commands[0])
    assert any("getprop" in c for c in found) and any("sha256sum" in c for c in found)
    assert any("dd if=/dev/zero" in c for c in rebooted.commands[0])  # probed again

    # the same boot, but a model file wiped from the phone: checksummed and pushed again
    wiped = [p for p in (virtual_phone.root / "data/local/tmp/harness/models").rglob("*.gguf")
             if p.name.endswith("Q8_0.gguf")]
    assert len(wiped) == 1
    wiped[0].unlink()
    again = farm_worker("run-3")
    assert again.reports[0].phone_state == "kept"
    pushes = [c for c in again.commands[0] if c.startswith("push ")]
    assert len(pushes) == 1 and pushes[0].endswith("Q8_0.gguf.part")
    assert again.reports[0].bytes_pushed == tiny_ladder["Q8_0"].stat().st_size
    assert not any("getprop" in c for c in again.commands[0])
    assert [t.outcome for r in again.reports for t, _ in r.trials] == ["ok", "ok"]
