"""RunOptions/TrialPolicy sample_interval_s <= 0 turns the sampler off (bench/sampler.py needs it).

A hand-written device records every shell command and when it came; the engine "runs" for 0.3 s
inside the launch command. With sampling on, the on-device sampler starts with the engine and
its file comes back in the one read after the engine's exit: no command reaches the device
while the engine runs, and the samples are the file's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from silent_engine import SilentEngine

from harness.matrix import expand, load_matrix
from harness.records import BuildMeta, DeviceMeta, ModelMeta
from harness.run.order import TrialSpec
from harness.run.trial import TrialContext, TrialPolicy, TrialRunner

MATRIX = Path(__file__).resolve().parents[2] / "bench" / "matrices" / "sampler.yaml"


@dataclass(frozen=True)
class Result:
    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""


class RecordingDevice:
    """Answers the trial's shell commands; anything the runner should never send fails loudly."""

    serial = "fake-1"

    def __init__(self) -> None:
        self.commands: list[str] = []
        self.during: list[str] = []  # commands sent while the engine ran
        self.running = False

    def shell(self, cmd: str, timeout: float | None = None) -> Result:
        self.commands.append(cmd)
        if self.running:
            self.during.append(cmd)
        if "exec " in cmd and "echo $$ > pid" in cmd:  # the engine launch
            self.running = True
            time.sleep(0.3)
            self.running = False
            return Result()
        if "@@harness:pid" in cmd:  # the read after the exit: what the sampler left
            sampled = "\n".join(f"m 10.{i:02d} 1024 1100 1000 - - - - 4 3 1" for i in range(5))
            return Result(stdout=f"@@harness:t0\n10.00\n@@harness:smp\n{sampled}\n")
        if "dumpsys thermalservice" in cmd:
            return Result()
        raise AssertionError(f"unexpected command: {cmd}")


def _run(interval: float) -> tuple[RecordingDevice, int]:
    matrix = load_matrix(MATRIX)
    (cell,) = expand(matrix)
    device = RecordingDevice()
    runner = TrialRunner(device, TrialPolicy(cooldown=matrix.cooldown, timeout_s=30,
                                             sample_interval_s=interval))
    ctx = TrialContext(engine=SilentEngine(), binary="/bin/engine", lib_dir=None,  # type: ignore[arg-type]
                       model="/m.gguf", cpu_mask=None, big_cpu=0, memory_limit_bytes=None,
                       predicted_peak_bytes=None, device_meta=DeviceMeta(),
                       build_meta=BuildMeta(), model_meta=ModelMeta())
    _, samples = runner.run(TrialSpec("run", device.serial, cell, 0), ctx)
    return device, len([s for s in samples if s.rss_bytes is not None])


@pytest.mark.parametrize("interval", [0.0, -1.0])
def test_an_interval_of_zero_or_less_starts_no_sampler(interval: float) -> None:
    device, _ = _run(interval)
    (launch,) = [c for c in device.commands if "exec " in c and "echo $$ > pid" in c]
    assert "smaps_rollup" not in launch and "sh -c" not in launch


def test_the_default_interval_samples_on_the_phone_and_nothing_crosses_adb_meanwhile() -> None:
    device, memory_samples = _run(0.5)
    (launch,) = [c for c in device.commands if "exec " in c and "echo $$ > pid" in c]
    assert "smaps_rollup" in launch and "sh -c" in launch
    assert memory_samples == 5  # the sampler's lines, read once after the exit
    assert device.during == []
