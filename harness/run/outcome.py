"""Outcome classification: every trial gets exactly one outcome, with its evidence.

A pure function over what the executor observed, so every rule is tested without a phone.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

SIGKILL_EXIT = 128 + signal.SIGKILL
# What a phone's shell says when the kernel will not execute a binary of another ABI:
# mksh "not executable: 64-bit ELF file" (exit 1), dash/bash/toybox "Exec format error" (126).
_FOREIGN_ELF = ("not executable: ", "Exec format error", "cannot execute binary file")


@dataclass(frozen=True)
class Observation:
    """What the executor saw of one engine process."""

    exit_code: int | None  # None when the process's end was not observed
    timed_out: bool = False  # we killed it after the matrix's limit
    device_lost: bool = False  # the adb transport went away during the trial
    lmk_line: str | None = None  # a lowmemorykiller / kernel OOM line naming the process
    peak_rss_bytes: int | None = None
    memory_limit_bytes: int | None = None  # what the device allows the process
    complete_records: int = 0  # engine result lines parsed
    expected_records: int = 1
    stderr_tail: str = ""
    mismatch: str | None = None  # engine ran something other than the cell asked for


@dataclass(frozen=True)
class Outcome:
    outcome: str
    error: str | None = None
    evidence: str | None = None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _near_limit(obs: Observation, fraction: float = 0.9) -> bool:
    if obs.peak_rss_bytes is None or not obs.memory_limit_bytes:
        return False
    return obs.peak_rss_bytes >= fraction * obs.memory_limit_bytes


def classify(obs: Observation) -> Outcome:
    tail = obs.stderr_tail.strip() or None
    if obs.device_lost:
        return Outcome("device_lost", "the device went away during the trial", tail)
    if obs.timed_out:
        return Outcome("timeout", "killed after the trial time limit", tail)
    if obs.exit_code is None:
        return Outcome("crashed", "the engine's exit status was not observed", tail)
    if obs.lmk_line is not None and obs.exit_code != 0:
        return Outcome("oom_killed", "killed by the low-memory killer", obs.lmk_line)
    if obs.exit_code == SIGKILL_EXIT or obs.exit_code == -signal.SIGKILL:
        if _near_limit(obs):
            return Outcome("oom_killed", "SIGKILL with memory at the device limit", tail)
        return Outcome("crashed", "killed by SIGKILL without memory pressure evidence", tail)
    if obs.exit_code in (1, 126) and obs.complete_records == 0 and tail \
            and any(sign in tail for sign in _FOREIGN_ELF):
        return Outcome("abi_mismatch", "the device cannot execute the engine binary "
                       "(another CPU ABI)", tail)
    if obs.exit_code != 0:
        if obs.exit_code > 128:
            name = _signal_name(obs.exit_code - 128)
            return Outcome("crashed", f"killed by {name}", tail)
        return Outcome("crashed", f"exit code {obs.exit_code}", tail)
    if obs.complete_records < obs.expected_records:
        return Outcome(
            "crashed",
            f"engine reported {obs.complete_records} of {obs.expected_records} results",
            tail,
        )
    if obs.mismatch:
        return Outcome("engine_mismatch", obs.mismatch, tail)
    return Outcome("ok")
