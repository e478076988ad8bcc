"""The sampler collects memory every tick and device state on its own cadence."""

from __future__ import annotations

import time

from harness.run.sampler import Sampler
from harness.run.state import DeviceState, ProcessMemory


class SteppingClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 0.25
        return self.now


def test_manual_ticks_record_memory_and_state_with_times_since_start() -> None:
    clock = SteppingClock()
    reads = iter([ProcessMemory(rss_kb=10), ProcessMemory(rss_kb=20)])
    sampler = Sampler(lambda: next(reads), lambda: DeviceState(thermal_status=1), clock=clock)
    sampler._start = 100.0
    sampler.sample_once(with_state=True)
    sampler.sample_once(with_state=False)
    assert [t.t_ms for t in sampler.ticks] == [250, 500]
    assert [t.memory.rss_kb for t in sampler.ticks if t.memory] == [10, 20]
    assert sampler.ticks[0].state == DeviceState(thermal_status=1)
    assert sampler.ticks[1].state is None


def test_a_failing_read_is_counted_and_skipped() -> None:
    def broken() -> ProcessMemory:
        raise OSError("adb hiccup")

    sampler = Sampler(broken, DeviceState, clock=SteppingClock())
    sampler.sample_once(with_state=True)
    assert sampler.ticks == [] and sampler.failures == 1


def test_thread_samples_until_stopped() -> None:
    sampler = Sampler(lambda: ProcessMemory(rss_kb=1), DeviceState, interval_s=0.01)
    sampler.start()
    while len(sampler.ticks) < 3:
        time.sleep(0.005)
    ticks = sampler.stop()
    count = len(ticks)
    assert count >= 3
    assert len(sampler.ticks) == count  # nothing is added after stop returns
    assert any(t.state is not None for t in ticks)
