"""Soak: 500 trials over 4 virtual phones with faults sprinkled in; the harness must not leak.

Runs when HARNESS_SOAK=1 (the ``reliability`` nox session sets it); HARNESS_SOAK_TRIALS changes
the count (a multiple of 20). The harness process's open file descriptors, sockets (its adb
connections), threads and RSS are read at an early point (10% of trials, after imports and
caches have warmed up), half way and at the end, and must stay within the bounds below.
"""

from __future__ import annotations

import gc
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.artifacts.builds import Build
from harness.run.runner import RunOptions, execute
from reliability.faultkit import (
    Events,
    audit,
    device_of,
    engine_pids,
    expected_trials,
    wait_for,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("HARNESS_SOAK") != "1",
                       reason="soak runs in `nox -s reliability` (HARNESS_SOAK=1)"),
]
TRIALS = int(os.environ.get("HARNESS_SOAK_TRIALS", "500"))
PHONES = 4
# Growth allowed between the early snapshot and the later ones.
MAX_FD_GROWTH = 8
MAX_SOCKET_GROWTH = 4
MAX_THREAD_GROWTH_MID = 4  # the middle snapshot is taken while trials run
MAX_THREAD_GROWTH_END = 0
MAX_RSS_GROWTH = 64 * 2**20

SOAK = """\
name: soak
axes:
  build: [host-release]
  model: [tiny]
  quant: [Q4_K_M]
  n_ctx: [64, 80, 96, 112, 128]
  kv: [f16]
  threads: [1]
models:
  tiny: {{ladder: tiny}}
workload: {{n_prompt: 8, n_gen: 4}}
repetitions: {reps}
cooldown: {{max_thermal_status: 2, max_temperature_c: 150, min_battery_pct: 0, max_wait_s: 1}}
timeout: {{trial_s: 6}}
"""


@dataclass(frozen=True)
class Usage:
    fds: int
    sockets: int
    threads: int
    rss: int


def usage() -> Usage:
    gc.collect()
    fds = os.listdir("/proc/self/fd")
    sockets = 0
    for fd in fds:
        try:
            sockets += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            continue
    status = Path("/proc/self/status").read_text()
    rss = next(int(line.split()[1]) * 1024 for line in status.splitlines()
               if line.startswith("VmRSS:"))
    return Usage(len(fds), sockets, threading.active_count(), rss)


class Sprinkler:
    """Faults at fixed trial counts: drops, heat, an engine SIGSEGV and a hang past timeout."""

    def __init__(self, phones: list[Any], events: Events) -> None:
        self.phones, self.events = phones, events
        self.injected: list[str] = []
        self.done_counts = {p.serial: 0 for p in phones}
        self.lock = threading.Lock()
        events.hooks.append(self.on_event)

    def on_event(self, kind: str, serial: str, details: dict[str, Any]) -> None:
        if kind != "done":
            return
        with self.lock:
            self.done_counts[serial] += 1
            n = self.done_counts[serial]
        index = next(i for i, p in enumerate(self.phones) if p.serial == serial)
        phone = self.phones[index]
        per_phone = TRIALS // PHONES
        if index == 0 and n in (per_phone // 5, per_phone // 2):
            phone.fault("drop", 0)
            self.injected.append("drop")
        if index == 1 and n == per_phone // 4:
            phone.fault("thermal", 4)
            self.injected.append("thermal")
        if index == 1 and n == per_phone // 4 + 3:
            phone.fault("thermal-release")
        if index in (2, 3) and n in (per_phone // 3, 2 * per_phone // 3):
            threading.Thread(target=self._kill, args=(phone, "SEGV" if index == 2 else "STOP"),
                             daemon=True).start()

    def _kill(self, phone: Any, sig: str) -> None:
        pids = wait_for(lambda: engine_pids(phone.root), timeout=30)
        device_of(phone.serial).shell(f"kill -{sig} {pids[0]}")
        self.injected.append(sig)


def test_soak_500_trials_on_4_phones_with_faults(
    virtual_phones: Any, tmp_path: Path, host_build: Build, tiny_ladder: Any, fault_row: Any,
) -> None:
    assert TRIALS % (PHONES * 5) == 0
    row = fault_row(f"soak: {TRIALS} trials, 4 phones, drops/heat/SIGSEGV/hang sprinkled")
    phones = list(virtual_phones(PHONES))
    matrix = tmp_path / "soak.yaml"
    matrix.write_text(SOAK.format(reps=TRIALS // (PHONES * 5)))
    results = tmp_path / "r"
    events = Events()
    sprinkler = Sprinkler(phones, events)
    snapshots: dict[str, Usage] = {}
    finished = [0]

    def snapshot(kind: str, serial: str, details: dict[str, Any]) -> None:
        if kind == "done":
            with sprinkler.lock:
                finished[0] += 1
                n = finished[0]
            if n == TRIALS // 10:
                snapshots["early"] = usage()
            elif n == TRIALS // 2:
                snapshots["middle"] = usage()

    events.hooks.append(snapshot)
    summary = execute(matrix, [device_of(p.serial) for p in phones],
                      RunOptions(results=results, builds=host_build.path.parent,
                                 sample_interval_s=0.25), on_event=events)
    snapshots["end"] = usage()
    found = audit(results, summary.run_id,
                  expected_trials(matrix, summary.run_id, [p.serial for p in phones]))
    row.injected = len(sprinkler.injected) >= 6
    row.lost, row.duplicated, row.trials = found.lost, found.duplicated, found.rows
    print("\nsoak usage:", {k: v.__dict__ for k, v in snapshots.items()},
          "faults:", sprinkler.injected, "outcomes:", dict(summary.outcomes()))
    assert (found.lost, found.duplicated, found.rows) == (0, 0, TRIALS)
    outcomes = summary.outcomes()
    assert set(outcomes) <= {"ok", "device_lost", "crashed", "timeout"}, outcomes
    assert outcomes["ok"] >= TRIALS - len(sprinkler.injected)
    early, middle, end = snapshots["early"], snapshots["middle"], snapshots["end"]
    for later, threads in ((middle, MAX_THREAD_GROWTH_MID), (end, MAX_THREAD_GROWTH_END)):
        assert later.fds - early.fds <= MAX_FD_GROWTH, snapshots
        assert later.sockets - early.sockets <= MAX_SOCKET_GROWTH, snapshots
        assert later.threads - early.threads <= threads, snapshots
        assert later.rss - early.rss <= MAX_RSS_GROWTH, snapshots
