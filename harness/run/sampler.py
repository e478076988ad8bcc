"""The sampler: polls an engine process's memory and the device's heat while a trial runs.

Two background threads: one reads the engine's memory (two small procfs files, one adb round
trip) quickly at first and then every ``interval_s``, so short trials still get several samples
near their peak; the other reads the thermal service, battery and clocks every
``state_interval_s`` (those cost more, so they must not delay the memory readings). Sample times
are milliseconds since the engine started; a failed read is counted and skipped, never raised:
sampling must not be what fails a trial.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from harness.run.state import DeviceState, ProcessMemory

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Tick:
    t_ms: int
    memory: ProcessMemory | None
    state: DeviceState | None


@dataclass
class Sampler:
    read_memory: Callable[[], ProcessMemory | None]
    read_state: Callable[[], DeviceState]
    interval_s: float = 0.5
    state_interval_s: float = 2.0
    fast_start_s: float = 0.0  # sample every fast_interval_s at first, so short trials count
    fast_interval_s: float = 0.05
    # a costlier cross-check (``dumpsys meminfo <pid>``) read every ``extra_every`` state rounds
    read_extra: Callable[[], ProcessMemory | None] | None = None
    extra_every: int = 3
    clock: Callable[[], float] = time.monotonic
    ticks: list[Tick] = field(default_factory=list)
    failures: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _start: float = 0.0

    def start(self, started_at: float | None = None) -> None:
        self._start = self.clock() if started_at is None else started_at
        for target in (self._memory_loop, self._state_loop):
            thread = threading.Thread(target=target, name="harness-sampler", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> list[Tick]:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)
        with self._lock:
            self.ticks.sort(key=lambda t: t.t_ms)
            return list(self.ticks)

    def _elapsed_ms(self) -> int:
        return int((self.clock() - self._start) * 1000)

    def _take(self, read: Callable[[], Tick | None]) -> None:
        try:
            tick = read()
        except Exception as error:  # a failed sample is recorded as missing, never fatal
            with self._lock:
                self.failures += 1
            log.debug("sample failed: %s", error)
            return
        if tick is not None:
            with self._lock:
                self.ticks.append(tick)

    def sample_memory(self) -> None:
        def read() -> Tick | None:
            t_ms, memory = self._elapsed_ms(), self.read_memory()
            return Tick(t_ms, memory, None) if memory is not None else None

        self._take(read)

    def sample_state(self) -> None:
        self._take(lambda: Tick(self._elapsed_ms(), None, self.read_state()))

    def _memory_loop(self) -> None:
        while not self._stop.is_set():
            self.sample_memory()
            fast = self.clock() - self._start < self.fast_start_s
            self._stop.wait(self.fast_interval_s if fast else self.interval_s)

    def sample_extra(self) -> None:
        read_extra = self.read_extra
        if read_extra is None:
            return

        def read() -> Tick | None:
            t_ms, memory = self._elapsed_ms(), read_extra()
            return Tick(t_ms, memory, None) if memory is not None else None

        self._take(read)

    def _state_loop(self) -> None:
        rounds = 0
        while not self._stop.wait(self.state_interval_s):
            self.sample_state()
            rounds += 1
            if rounds % max(self.extra_every, 1) == 0:
                self.sample_extra()
