"""A virtual phone's cores are its own: its processes run ahead of the host's other work.

A real phone's CPUs are not shared with a compile on the same desk; a virtual phone's are, and a
second CPU-bound job on a 2-core host slows a two-thread engine several times over (ggml's
threads spin at barriers, so one preempted thread stalls the other). A sustained series whose
host load changes mid-way then shows a "throttle" or a "recovery" that the phone never had.

So the phone's daemon lowers its nice value to ``PHONE_NICE`` before it starts anything, and
every shell, engine and background app it forks inherits it. At nice -10 a phone thread weighs
9548 against a nice-0 task's 1024 (the kernel's ``sched_prio_to_weight``): about 90% of a core it
shares with one. With the kernel's autogroups on (``/proc/sys/kernel/sched_autogroup_enabled``,
for tasks in the root CPU cgroup) a task's nice only counts within its session, and sessions
share the CPUs as equals; every shell of the phone leads a session of its own (as adbd's do), so
each session the phone starts gets the same nice for its autogroup (``/proc/PID/autogroup``).
Lowering nice needs root, CAP_SYS_NICE or an RLIMIT_NICE that allows it; where none does, the
phone shares the host's CPUs as before and says so (``harness sim status``).
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

PHONE_NICE = -10
CAP_SYS_NICE = 23  # linux/capability.h


def _effective_caps(status: str) -> int:
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def blocked(nice: int = PHONE_NICE) -> str | None:
    """Why this host cannot run a phone at ``nice`` (None: it can), from the kernel's rules:
    root, CAP_SYS_NICE, or RLIMIT_NICE's soft limit of at least 20 - nice."""
    if os.geteuid() == 0:
        return None
    try:
        caps = _effective_caps(Path("/proc/self/status").read_text())
    except OSError:
        caps = 0
    if caps >> CAP_SYS_NICE & 1:
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_NICE)
    if soft == resource.RLIM_INFINITY or soft >= 20 - nice:
        return None
    return ("raising a phone's priority needs root, CAP_SYS_NICE or `ulimit -e "
            f"{20 - nice}`")


def note(nice: int | None, reason: str) -> str:
    """The words ``harness sim status`` shows for the phone's CPUs."""
    if nice is not None:
        return f"own (nice {nice}, ahead of the host's other work)"
    return f"shared with the host's other work ({reason})"


def claim(nice: int | None) -> None:
    """Run this process, and all it starts from now on, at ``nice`` (None: leave it).

    Called by the phone's daemon before its first thread or child; an error here is one the
    host's rules said would not happen (``blocked``), so it stops the phone's start."""
    if nice is not None:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
        lead_session(os.getpid(), nice)


def lead_session(pid: int, nice: int | None) -> str | None:
    """Give the session ``pid`` leads the phone's weight among the host's sessions (its
    autogroup's nice); None when done or when the kernel has no autogroups, else why not."""
    if nice is None:
        return None
    try:
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))
    except (FileNotFoundError, ProcessLookupError):
        return None  # no autogroups in this kernel, or the session already ended
    except OSError as error:
        return f"the session of pid {pid} keeps the host's weight: {error.strerror}"
    return None
