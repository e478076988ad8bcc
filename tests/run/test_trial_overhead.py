"""The per-trial path's adb round trips (issue 50 item 2): the launch and one read after it.

A scripted device answers the trial's commands by kind and counts them; its "phone" says what
the test sets (battery saver, thermal status). The read after a launch brings the evidence and
the phone's conditions back together; the next trial's pre-flight check and cooldown gate run
on those conditions when it starts at once, and on a new reading otherwise. Every check still
decides: a phone in battery saver after one trial refuses the next, a hot one is throttled.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from silent_engine import SilentEngine

from harness.cell import Cell
from harness.device.base import ShellResult
from harness.errors import NotRunLostError
from harness.matrix import Requirements, expand, load_matrix
from harness.records import BuildMeta, DeviceMeta, ModelMeta, TrialRecord
from harness.run import trial as trials
from harness.run.order import TrialSpec
from harness.run.probe import split_sections
from harness.run.session import Prepared, RunOptions
from harness.run.trial import TrialContext, TrialPolicy, TrialRunner, _after_command
from harness.run.worker import DeviceWorker, _Ready

BOOT = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
MATRIX = Path(__file__).resolve().parents[2] / "bench" / "matrices" / "sampler.yaml"


def answer(stdout: str = "") -> ShellResult:
    return ShellResult(0, stdout, "")


def _conditions(saver: int, status: int) -> str:
    return (f"@@harness:thermal\nThermal Status: {status}\n@@harness:low_power\n{saver}\n"
            f"@@harness:boot_id\n{BOOT}\n@@harness:uptime\n100.0 50.0\n")


@dataclass
class Phone:
    """A scripted phone: ``saver`` and ``status`` now, and every command it was sent."""

    saver: int = 0
    status: int = 0
    commands: list[str] = field(default_factory=list)
    serial: str = "fake-1"

    def kinds(self) -> list[str]:
        return [_kind(c) for c in self.commands]

    def shell(self, cmd: str, timeout: float | None = None) -> ShellResult:
        self.commands.append(cmd)
        kind = _kind(cmd)
        if kind == "launch":
            return answer()
        if kind == "after":
            return answer(stdout="@@harness:pid\n42\n@@harness:t0\n10.00\n@@harness:t1\n10.20\n"
                          + _conditions(self.saver, self.status))
        if kind == "conditions":
            return answer(stdout=_conditions(self.saver, self.status))
        if cmd == "echo ok":  # the worker's check that a phone is back
            return answer(stdout="ok\n")
        raise AssertionError(f"unexpected command: {cmd}")


def _kind(cmd: str) -> str:
    if "exec " in cmd and "echo $$ > pid" in cmd:
        return "launch"
    if "@@harness:pid" in cmd:
        return "after"
    if "/pre.$$" in cmd:
        return "conditions"
    return cmd


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _runner(phone: Phone, clock: Clock, require: Requirements | None = None,
            ) -> tuple[TrialRunner, Cell]:
    matrix = load_matrix(MATRIX)
    (cell,) = expand(matrix)
    policy = TrialPolicy(cooldown=matrix.cooldown, timeout_s=30,
                         require=require or Requirements(), throttle_status=1)
    return TrialRunner(phone, policy, clock=clock), cell  # type: ignore[arg-type]


CONTEXT = TrialContext(engine=SilentEngine(), binary="/bin/engine", lib_dir=None,  # type: ignore[arg-type]
                       model="/m.gguf", cpu_mask=None, big_cpu=0, memory_limit_bytes=None,
                       predicted_peak_bytes=None, device_meta=DeviceMeta(),
                       build_meta=BuildMeta(), model_meta=ModelMeta())


def _trial(runner: TrialRunner, cell: Cell, rep: int) -> TrialRecord:
    trial, _ = runner.run(TrialSpec("run", "fake-1", cell, rep), CONTEXT)
    return trial


def test_a_trial_that_follows_another_makes_two_round_trips() -> None:
    phone, clock = Phone(), Clock()
    runner, cell = _runner(phone, clock)
    _trial(runner, cell, 0)
    assert phone.kinds() == ["conditions", "launch", "after"]
    phone.commands.clear()
    clock.now += trials.REUSE_S / 2
    trial = _trial(runner, cell, 1)
    assert phone.kinds() == ["launch", "after"]  # its pre-flight is the last after-read
    assert trial.boot_id == BOOT and trial.battery_saver is False
    assert trial.start_thermal_status == 0 and trial.cooldown_source == "thermal_status"


def test_a_phone_in_battery_saver_after_a_trial_refuses_the_next_one() -> None:
    phone, clock = Phone(), Clock()
    runner, cell = _runner(phone, clock, Requirements(battery_saver=False))
    original = phone.shell

    def saver_on_at_launch(cmd: str, timeout: float | None = None) -> ShellResult:
        if _kind(cmd) == "launch":  # the phone goes into battery saver while the engine runs
            phone.saver = 1
        return original(cmd, timeout)

    phone.shell = saver_on_at_launch  # type: ignore[method-assign]
    _trial(runner, cell, 0)
    assert phone.kinds() == ["conditions", "launch", "after"]  # met: launched
    phone.commands.clear()
    refused = _trial(runner, cell, 1)
    assert refused.outcome == "precondition_failed" and "battery saver is on" in refused.error
    assert phone.kinds() == []  # decided on the after-read's conditions, nothing launched


def test_a_reading_older_than_the_reuse_window_or_forgotten_is_read_again() -> None:
    phone, clock = Phone(), Clock()
    runner, cell = _runner(phone, clock)
    _trial(runner, cell, 0)
    phone.commands.clear()
    clock.now += trials.REUSE_S + 0.1
    _trial(runner, cell, 1)
    assert phone.kinds() == ["conditions", "launch", "after"]
    phone.commands.clear()
    runner.forget_reading()  # the worker ran something else on the phone (an output check)
    _trial(runner, cell, 2)
    assert phone.kinds() == ["conditions", "launch", "after"]


def test_a_cells_first_output_check_makes_the_next_trial_read_the_phone_again(
    tmp_path: Path,
) -> None:
    phone, clock = Phone(), Clock()
    runner, cell = _runner(phone, clock)
    matrix = load_matrix(MATRIX)
    worker = DeviceWorker(phone, Prepared(matrix, [cell], {}, {}), "run",  # type: ignore[arg-type]
                          RunOptions(results=tmp_path), set(), lambda *event: None)
    worker._ready = _Ready({}, frozenset(), None, runner, 0)
    _trial(runner, cell, 0)
    worker._output_verdict(cell, CONTEXT)  # the cell's check (it may run on the phone)
    phone.commands.clear()
    _trial(runner, cell, 1)
    assert phone.kinds() == ["conditions", "launch", "after"]
    worker._output_verdict(cell, CONTEXT)  # known: nothing runs
    phone.commands.clear()
    _trial(runner, cell, 2)
    assert phone.kinds() == ["launch", "after"]


def test_a_launch_whose_shell_never_opened_is_tried_again_not_lost(tmp_path: Path) -> None:
    phone, clock = Phone(), Clock()
    runner, cell = _runner(phone, clock)
    worker = DeviceWorker(phone, Prepared(load_matrix(MATRIX), [cell], {}, {}), "run",  # type: ignore[arg-type]
                          RunOptions(results=tmp_path), set(), lambda *event: None)
    _trial(runner, cell, 0)  # its after-read is the next trial's pre-flight reading
    original, offline = phone.shell, [True]

    def offline_once(cmd: str, timeout: float | None = None) -> ShellResult:
        if _kind(cmd) == "launch" and offline.pop() if offline else False:
            phone.commands.append(cmd)
            raise NotRunLostError("device offline", phone.serial)
        return original(cmd, timeout)

    phone.shell = offline_once  # type: ignore[method-assign]
    phone.commands.clear()
    trial, _ = worker._attempt(runner, TrialSpec("run", "fake-1", cell, 1), CONTEXT,
                               None)  # type: ignore[arg-type]
    assert trial.outcome != "device_lost"
    # the launch that never ran, the phone answering again, a new reading, the trial
    assert phone.kinds() == ["launch", "echo ok", "conditions", "launch", "after"]


def test_the_state_a_trial_leaves_comes_with_its_evidence_and_marks_it_throttled() -> None:
    phone, clock = Phone(), Clock()
    runner, cell = _runner(phone, clock)
    phone.status = 3  # hot after the work: only the read after the launch sees it
    original = phone.shell

    def cool_before(cmd: str, timeout: float | None = None) -> ShellResult:
        phone.status = 0 if _kind(cmd) == "conditions" else 3
        return original(cmd, timeout)

    phone.shell = cool_before  # type: ignore[method-assign]
    trial = _trial(runner, cell, 0)
    assert phone.kinds() == ["conditions", "launch", "after"]
    assert trial.start_thermal_status == 0
    assert trial.max_thermal_status == 3 and trial.throttled is True


def test_the_laps_cover_each_phase_of_the_trial() -> None:
    phone, clock = Phone(), Clock()
    runner, cell = _runner(phone, clock)
    _trial(runner, cell, 0)
    assert set(runner.laps.seconds) == {"preflight", "cooldown", "launch", "evidence",
                                        "classify", "engine"}
    assert abs(runner.laps.seconds["engine"] - 0.2) < 1e-9  # t1 - t0 on the phone's clock


def test_the_read_after_the_launch_wakes_the_sampler_instead_of_waiting_for_its_tick(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "trial"
    folder.mkdir()
    (folder / "pid").write_text("42\n")
    (folder / "mem").write_text("100 90 2\n")  # a sampler ran: its end stamp t1 is waited for
    subprocess.run(["mkfifo", str(folder / "nap")], check=True)
    # a sampler asleep on its FIFO (no timeout): only a wake-up lets it write its end stamp
    sampler = subprocess.Popen(["sh", "-c", "read x < nap; echo 12.5 > t1"], cwd=folder)
    try:
        done = subprocess.run(["sh", "-c", _after_command(str(folder))], capture_output=True,
                              text=True, check=False, timeout=30)
    finally:
        sampler.kill()
        sampler.wait()
    # unwoken, the sampler never writes t1, and the read gives up waiting for it after 1 s
    assert split_sections(done.stdout)["t1"].strip() == "12.5"
    assert not folder.exists()
