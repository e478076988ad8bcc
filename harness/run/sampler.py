"""The sampler: polls an engine process's memory and the device's heat while a trial runs.

A background thread calls ``read_memory`` every tick and ``read_state`` every ``state_every``
ticks (thermal service and battery cost more than two small procfs reads). The clock is injected,
sample times are milliseconds since the engine started, and a failed read is skipped, never
raised: sampling must not be what fails a trial.
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
    interval_s: float = 1.0
    state_every: int = 2
    fast_start_s: float = 0.0  # sample every fast_interval_s at first, so short trials count
    fast_interval_s: float = 0.1
    clock: Callable[[], float] = time.monotonic
    ticks: list[Tick] = field(default_factory=list)
    failures: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _start: float = 0.0

    def start(self, started_at: float | None = None) -> None:
        self._start = self.clock() if started_at is None else started_at
        self._thread = threading.Thread(target=self._loop, name="harness-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> list[Tick]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        return self.ticks

    def sample_once(self, with_state: bool) -> None:
        t_ms = int((self.clock() - self._start) * 1000)
        try:
            memory = self.read_memory()
            state = self.read_state() if with_state else None
        except Exception as error:  # a failed sample is recorded as missing, never fatal
            self.failures += 1
            log.debug("sample failed: %s", error)
            return
        self.ticks.append(Tick(t_ms, memory, state))

    def _loop(self) -> None:
        n = 0
        while not self._stop.is_set():
            self.sample_once(with_state=n % max(self.state_every, 1) == 0)
            n += 1
            fast = self.clock() - self._start < self.fast_start_s
            self._stop.wait(self.fast_interval_s if fast else self.interval_s)
