"""Outcome classification: every trial gets exactly one outcome, with its evidence.

A pure function over what the executor observed, so every rule is tested without a phone.

Out-of-memory is judged from what a stock user build lets the shell see. lmkd only kills apps it
was told about, never a shell-started engine (oom_score_adj -950), so the engine itself dies by
the kernel's OOM killer, which writes nothing a shell can read (no kernel lines in logcat,
``dmesg`` denied). What remains is circumstantial, and each piece is a named signal
(``OOM_SIGNALS``): the engine's exit 137 with no timeout, its VmHWM close to the MemAvailable the
trial started with, memory stall time in /proc/pressure/memory, lmkd killing apps during the
trial, and a boot id that changed (the kill took system_server and the phone rebooted). An lmkd
line that names the engine still counts, as one more signal, not as the rule.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

from harness.records import Outcome
from harness.units import mib

SIGKILL_EXIT = 128 + signal.SIGKILL
# What a phone's shell says when the kernel will not execute a binary of another ABI:
# mksh "not executable: 64-bit ELF file" (exit 1), dash/bash/toybox "Exec format error" (126).
_FOREIGN_ELF = ("not executable: ", "Exec format error", "cannot execute binary file")

OOM_SIGNALS = (
    "sigkill",  # exit 137 (SIGKILL) and the harness did not kill it for a timeout
    "vm_hwm_near_available",  # peak resident memory >= NEAR_AVAILABLE of MemAvailable at start
    "memory_pressure",  # /proc/pressure/memory "full" stall time grew during the trial
    "lmkd_killed_apps",  # lmkd killed other processes during the trial
    "lmkd_named_engine",  # an lmkd kill line names the engine's pid (supporting evidence)
    "reboot",  # boot id changed / uptime went back: the phone rebooted during the trial
)
MEMORY_SIGNALS = frozenset(OOM_SIGNALS) - {"sigkill", "reboot"}
NEAR_AVAILABLE = 0.9


@dataclass(frozen=True)
class Observation:
    """What the executor saw of one engine process."""

    exit_code: int | None  # None when the process's end was not observed
    timed_out: bool = False  # we killed it after the matrix's limit
    device_lost: bool = False  # the adb transport went away during the trial
    lmk_line: str | None = None  # an lmkd kill line naming the engine's pid
    peak_rss_bytes: int | None = None  # the largest of VmHWM and the sampled RSS
    memory_limit_bytes: int | None = None  # MemAvailable at the start (or the planned budget)
    complete_records: int = 0  # engine result lines parsed
    expected_records: int = 1
    stderr_tail: str = ""
    mismatch: str | None = None  # engine ran something other than the cell asked for
    pressure_full_us: int | None = None  # growth of PSI memory "full" total during the trial
    lmkd_app_kills: tuple[str, ...] = ()  # lmkd kill lines of other processes during the trial
    rebooted: bool = False  # the boot id changed (or uptime went back) during the trial


@dataclass(frozen=True)
class Verdict:
    """A trial's outcome with the reason and the evidence behind it."""

    outcome: Outcome
    error: str | None = None
    evidence: str | None = None
    signals: tuple[str, ...] = ()  # OOM_SIGNALS that fired, in that order


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _near_limit(obs: Observation, fraction: float = NEAR_AVAILABLE) -> bool:
    if obs.peak_rss_bytes is None or not obs.memory_limit_bytes:
        return False
    return obs.peak_rss_bytes >= fraction * obs.memory_limit_bytes


def _sigkill(obs: Observation) -> bool:
    return obs.exit_code in (SIGKILL_EXIT, -signal.SIGKILL)


def oom_signals(obs: Observation) -> tuple[str, ...]:
    """Every memory signal that fired for this trial, in ``OOM_SIGNALS`` order."""
    fired = {
        "sigkill": _sigkill(obs) and not obs.timed_out,
        "vm_hwm_near_available": _near_limit(obs),
        "memory_pressure": (obs.pressure_full_us or 0) > 0,
        "lmkd_killed_apps": bool(obs.lmkd_app_kills),
        "lmkd_named_engine": obs.lmk_line is not None,
        "reboot": obs.rebooted,
    }
    return tuple(name for name in OOM_SIGNALS if fired[name])


def oom_evidence(obs: Observation, signals: tuple[str, ...]) -> str:
    """One line per signal that fired, with its figures; the lmkd lines kept as printed."""
    lines: list[str] = []
    if "sigkill" in signals:
        lines.append(f"exit {obs.exit_code} (SIGKILL) without a timeout")
    if "reboot" in signals:
        lines.append("the phone rebooted during the trial (boot id changed)")
    if "vm_hwm_near_available" in signals and obs.peak_rss_bytes and obs.memory_limit_bytes:
        share = obs.peak_rss_bytes / obs.memory_limit_bytes
        lines.append(f"peak {mib(obs.peak_rss_bytes, 1, grouped=False)} = {share:.0%} of the "
                     f"{mib(obs.memory_limit_bytes, 1, grouped=False)} available at the start")
    if "memory_pressure" in signals and obs.pressure_full_us:
        lines.append(f"memory pressure: all tasks stalled {obs.pressure_full_us / 1000:.0f} ms "
                     "(/proc/pressure/memory full)")
    if "lmkd_killed_apps" in signals:
        lines.append(f"lmkd killed {len(obs.lmkd_app_kills)} other process(es):")
        lines.extend(obs.lmkd_app_kills[-5:])
    if "lmkd_named_engine" in signals and obs.lmk_line:
        lines.append(obs.lmk_line)
    return "\n".join(lines)


def _with_tail(evidence: str, tail: str | None) -> str | None:
    return "\n".join(part for part in (evidence, tail or "") if part) or None


def classify(obs: Observation) -> Verdict:
    tail = obs.stderr_tail.strip() or None
    signals = oom_signals(obs)
    if obs.device_lost:
        if obs.rebooted:
            memory = [s for s in signals if s in MEMORY_SIGNALS]
            cause = (" under memory pressure (a kernel OOM kill that took system_server)"
                     if memory else "")
            return Verdict(Outcome.DEVICE_LOST, f"the phone rebooted during the trial{cause}",
                           _with_tail(oom_evidence(obs, signals), tail), signals)
        return Verdict(Outcome.DEVICE_LOST, "the device went away during the trial", tail,
                       signals)
    if obs.timed_out:
        return Verdict(Outcome.TIMEOUT, "killed after the trial time limit", tail, signals)
    if obs.exit_code is None:
        return Verdict(Outcome.CRASHED, "the engine's exit status was not observed", tail,
                       signals)
    memory = [s for s in signals if s in MEMORY_SIGNALS]
    if _sigkill(obs) and memory:
        return Verdict(Outcome.OOM_KILLED,
                       f"SIGKILL under memory pressure ({', '.join(memory)})",
                       oom_evidence(obs, signals), signals)
    if obs.lmk_line is not None and obs.exit_code != 0:
        return Verdict(Outcome.OOM_KILLED, "killed by the low-memory killer",
                       oom_evidence(obs, signals), signals)
    if _sigkill(obs):
        return Verdict(Outcome.CRASHED, "killed by SIGKILL without memory pressure evidence",
                       tail, signals)
    if obs.exit_code in (1, 126) and obs.complete_records == 0 and tail \
            and any(sign in tail for sign in _FOREIGN_ELF):
        return Verdict(Outcome.ABI_MISMATCH, "the device cannot execute the engine binary "
                       "(another CPU ABI)", tail, signals)
    if obs.exit_code != 0:
        if obs.exit_code > 128:
            name = _signal_name(obs.exit_code - 128)
            return Verdict(Outcome.CRASHED, f"killed by {name}", tail, signals)
        return Verdict(Outcome.CRASHED, f"exit code {obs.exit_code}", tail, signals)
    if obs.complete_records == 0 and obs.expected_records:
        return Verdict(Outcome.CRASHED, "parse_error: the engine exited 0 but printed nothing "
                       "its adapter could read (the output's last lines are the evidence)",
                       tail, signals)
    if obs.complete_records < obs.expected_records:
        return Verdict(
            Outcome.CRASHED,
            f"engine reported {obs.complete_records} of {obs.expected_records} results",
            tail, signals,
        )
    if obs.mismatch:
        return Verdict(Outcome.ENGINE_MISMATCH, obs.mismatch, tail, signals)
    return Verdict(Outcome.OK, signals=signals)
