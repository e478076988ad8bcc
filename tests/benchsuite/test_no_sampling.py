"""RunOptions/TrialPolicy sample_interval_s <= 0 turns the sampler off (bench/sampler.py needs it).

A hand-written device records every shell command; the engine "runs" for 0.3 s inside the
launch command, long enough for the sampler's fast start (a read every 50 ms) to read memory
several times when it is on.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.cell import Cell
from harness.engines.base import Measurement
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

    def shell(self, cmd: str, timeout: float | None = None) -> Result:
        self.commands.append(cmd)
        if "exec " in cmd and "echo $$ > pid" in cmd:  # the engine launch
            time.sleep(0.3)
            return Result()
        if "@@harness:rollup" in cmd:  # a memory read
            return Result(stdout="@@harness:rollup\nRss:  1024 kB\nPss:  1000 kB\n")
        if "dumpsys thermalservice" in cmd or "@@harness:pid" in cmd:
            return Result()
        raise AssertionError(f"unexpected command: {cmd}")


class SilentEngine:
    name = "silent"

    def supports(self, cell: Cell) -> str | None:
        return None

    def argv(self, cell: Cell, binary_path: str, model_path: str,
             cpu_mask: str | None = None) -> list[str]:
        return [binary_path, model_path]

    def parse(self, stdout: str) -> Sequence[object]:
        return []

    def measure(self, records: Sequence[object]) -> list[Measurement]:
        return []


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
def test_an_interval_of_zero_or_less_sends_no_memory_read(interval: float) -> None:
    device, memory_samples = _run(interval)
    assert memory_samples == 0
    assert not [c for c in device.commands if "@@harness:rollup" in c]


def test_the_default_interval_does_read_memory_during_the_same_trial() -> None:
    device, memory_samples = _run(0.5)
    assert memory_samples >= 2
    assert len([c for c in device.commands if "@@harness:rollup" in c]) >= 2
