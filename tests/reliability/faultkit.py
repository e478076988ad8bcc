"""Helpers of the reliability suite: a small real run, fault injectors, the store audit.

Faults are injected at a chosen moment of a real run (virtual phones, the real llama-bench, the
tiny ladder): from the run's own progress events (a push at half way, a trial just stored) or
from a thread that watches the phone for the engine process. Every scenario ends with an audit of
the store: each trial the run was meant to finish present exactly once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import store
from harness.device import Device, get_device
from harness.matrix import expand, load_matrix
from harness.run.order import interleave

MATRIX = """\
name: {name}
axes:
  build: [host-release]
  model: [tiny]
  quant: [Q8_0]
  n_ctx: {n_ctx}
  kv: [f16]
  threads: [1]
models:
  tiny: {{ladder: tiny}}
workload: {{n_prompt: 32, n_gen: {n_gen}, n_depth: 0}}
repetitions: {reps}
cooldown: {{max_thermal_status: {max_status}, max_temperature_c: 150, min_battery_pct: 0,
           max_wait_s: {max_wait}}}
timeout: {{trial_s: {timeout}}}
"""


def write_matrix(folder: Path, name: str = "faults", *, n_ctx: list[int] | None = None,
                 n_gen: int = 1536, reps: int = 3, timeout: float = 60, max_status: int = 2,
                 max_wait: float = 1) -> Path:
    """A one-cell matrix whose trials run long enough (about a second) to be hit."""
    path = folder / f"{name}.yaml"
    path.write_text(MATRIX.format(name=name, n_ctx=n_ctx or [2048], n_gen=n_gen, reps=reps,
                                  timeout=timeout, max_status=max_status, max_wait=max_wait))
    return path


def expected_trials(matrix: Path, run_id: str, serials: list[str]) -> set[str]:
    cells = expand(load_matrix(matrix))
    return {t.trial_id for serial in serials for t in interleave(cells, run_id, serial)}


@dataclass(frozen=True)
class Audit:
    """What the store holds of one run against what the run was meant to finish."""

    lost: int  # expected trials with no row
    duplicated: int  # rows beyond one per trial
    rows: int


def audit(results: Path, run_id: str, expected: set[str]) -> Audit:
    trials = store.read_table(results, "trials")
    ids = list(trials.loc[trials["run_id"] == run_id, "trial_id"])
    return Audit(lost=len(expected - set(ids)), duplicated=len(ids) - len(set(ids)),
                 rows=len(ids))


def device_of(serial: str) -> Device:
    return get_device(serial)


# --- the engine process on a virtual phone -----------------------------------------------------


def engine_pids(sandbox_root: Path) -> list[int]:
    """Pids of llama-bench processes the phone runs now (their pid files, checked live)."""
    found = []
    for pid_file in (sandbox_root / "data/local/tmp/harness/trials").glob("*/pid"):
        text = pid_file.read_text().strip() if pid_file.is_file() else ""
        if not text.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{text}/cmdline").read_bytes()
        except OSError:
            continue
        if b"llama-bench" in cmdline:
            found.append(int(text))
    return found


def wait_for(predicate: Callable[[], Any], timeout: float = 60, poll: float = 0.01) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"condition not met within {timeout} s")


class Injector:
    """A thread that waits for a moment of the run and then injects a fault, once."""

    def __init__(self, when: Callable[[], Any], act: Callable[[Any], None],
                 timeout: float = 120) -> None:
        self.injected = threading.Event()
        self.error: BaseException | None = None
        self.value: Any = None
        self._when, self._act, self._timeout = when, act, timeout
        self._thread = threading.Thread(target=self._run, name="fault-injector", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.value = wait_for(self._when, self._timeout)
            self._act(self.value)
            self.injected.set()
        except BaseException as error:  # reported by join()
            self.error = error

    def join(self) -> bool:
        self._thread.join(timeout=self._timeout + 30)
        if self.error is not None:
            raise AssertionError(f"fault injection failed: {self.error!r}")
        return self.injected.is_set()


class Events:
    """The run's progress events, kept, with hooks that fire (in the worker) at a chosen one."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, Any]]] = []
        self.hooks: list[Callable[[str, str, dict[str, Any]], None]] = []
        self.lock = threading.Lock()

    def __call__(self, kind: str, serial: str, details: dict[str, Any]) -> None:
        with self.lock:
            self.seen.append((kind, serial, details))
        for hook in list(self.hooks):
            hook(kind, serial, details)

    def kinds(self, serial: str) -> list[str]:
        with self.lock:
            return [kind for kind, s, _ in self.seen if s == serial]


def once(hook: Callable[[str, str, dict[str, Any]], bool]) -> Callable[..., None]:
    """A hook that acts the first time ``hook`` returns True, never again."""
    fired = threading.Event()

    def call(kind: str, serial: str, details: dict[str, Any]) -> None:
        if not fired.is_set() and hook(kind, serial, details):
            fired.set()

    call.fired = fired  # type: ignore[attr-defined]
    return call


def dump(events: Events, serial: str) -> list[str]:
    """The run's events of one phone without push progress, for assertion messages."""
    with events.lock:
        return [f"{k} {d}" for k, s, d in events.seen if s == serial and k != "push"]
