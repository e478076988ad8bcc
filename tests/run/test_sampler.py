"""The sampler collects memory quickly and device state on its own slower cadence."""

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


def test_manual_samples_record_times_since_start() -> None:
    clock = SteppingClock()
    reads = iter([ProcessMemory(rss_kb=10), ProcessMemory(rss_kb=20)])
    sampler = Sampler(lambda: next(reads), lambda: DeviceState(thermal_status=1), clock=clock)
    sampler._start = 100.0
    sampler.sample_memory()
    sampler.sample_state()
    sampler.sample_memory()
    ticks = sampler.stop()
    assert [t.t_ms for t in ticks] == [250, 500, 750]
    assert [t.memory.rss_kb for t in ticks if t.memory] == [10, 20]
    assert [t.state for t in ticks if t.state] == [DeviceState(thermal_status=1)]


def test_a_gone_process_adds_no_memory_sample() -> None:
    sampler = Sampler(lambda: None, DeviceState, clock=SteppingClock())
    sampler.sample_memory()
    assert sampler.ticks == [] and sampler.failures == 0


def test_a_failing_read_is_counted_and_skipped() -> None:
    def broken() -> ProcessMemory:
        raise OSError("adb hiccup")

    sampler = Sampler(broken, DeviceState, clock=SteppingClock())
    sampler.sample_memory()
    assert sampler.ticks == [] and sampler.failures == 1


def test_threads_sample_memory_fast_and_state_slowly_until_stopped() -> None:
    sampler = Sampler(lambda: ProcessMemory(rss_kb=1), DeviceState, interval_s=0.01,
                      state_interval_s=0.05)
    sampler.start()
    deadline = time.monotonic() + 10
    while not any(t.state for t in sampler.ticks) and time.monotonic() < deadline:
        time.sleep(0.005)
    ticks = sampler.stop()
    memory = [t for t in ticks if t.memory]
    states = [t for t in ticks if t.state]
    assert states, "no state sample within 10 s"
    assert len(memory) > len(states)
    assert len(sampler.stop()) == len(ticks)  # nothing is added after stop returns


def test_the_costly_cross_check_runs_every_few_state_rounds() -> None:
    extra = iter([ProcessMemory(pss_kb=5, source="dumpsys")] * 10)
    sampler = Sampler(lambda: None, DeviceState, state_interval_s=0.01,
                      read_extra=lambda: next(extra), extra_every=3)
    sampler.start()
    deadline = time.monotonic() + 10
    while sum(1 for t in sampler.ticks if t.state) < 7 and time.monotonic() < deadline:
        time.sleep(0.005)
    ticks = sampler.stop()
    states = sum(1 for t in ticks if t.state)
    extras = [t for t in ticks if t.memory and t.memory.source == "dumpsys"]
    assert states >= 7
    assert len(extras) == states // 3
