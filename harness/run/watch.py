"""The engine's launch line, and the readers of what its on-device sampler leaves behind.

The engine runs in the foreground of one adb shell (shell protocol v2 gives its exit status,
137 for SIGKILL); its own shell writes its pid to a file first and then ``exec``s the engine, so
the sampler (``harness.run.ondevice``) and the timeout watchdog address the engine itself.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from harness.android.meminfo import parse_meminfo
from harness.run.ondevice import Rates, start_command
from harness.run.state import ProcessMemory


def launch_line(argv: Sequence[str], lib_dir: str | None,
                env: Mapping[str, str] | None = None) -> str:
    """``env LD_LIBRARY_PATH=... K=V ... argv``, every word quoted: how an engine of a build
    starts on the phone (its ``lib/`` first on the loader's path, the build's environment)."""
    settings = {**({"LD_LIBRARY_PATH": lib_dir} if lib_dir else {}), **(env or {})}
    prefix = ["env", *(f"{k}={v}" for k, v in sorted(settings.items()))] if settings else []
    return " ".join(shlex.quote(word) for word in [*prefix, *argv])


def launch_command(workdir: str, argv: Sequence[str], lib_dir: str | None,
                   sampler: Rates | None = None, env: Mapping[str, str] | None = None,
                   prelude: str = "") -> str:
    """The shell line that records its pid and becomes the engine (every word quoted), with the
    on-device sampler (``harness.run.ondevice``) started just before, unless ``sampler`` is None.

    Written for Android's mksh as much as for dash. The pid file and ``t0`` (the phone's uptime
    at the launch: the clock of the samples, the end stamp ``t1`` and the power readings) are
    written first; then the sampler starts and the shell ``exec``s the engine, so the engine's
    pid is the shell's ``$$``. ``prelude`` (already quoted) runs in the trial's folder before
    ``t0``: the page cache set as the cell asks (``harness.run.trial.cache_prelude``), right
    before the engine, with nothing in between that could change it.
    """
    words = launch_line(argv, lib_dir, env)
    folder = shlex.quote(workdir)
    first = f"{prelude}; " if prelude else ""
    setup = (f"mkdir -p {folder} && cd {folder} && echo $$ > pid || exit 1; {first}"
             "read -r u _ < /proc/uptime; echo \"$u\" > t0")
    if sampler is None:
        return f"{setup}; exec {words}"
    # the sampler's FIFO to nap on is made here, before the engine starts, so the sampler
    # itself starts no process while the engine runs
    return f"{setup}; mkfifo nap 2>/dev/null; {start_command(sampler)}; exec {words}"


def _last_line(text: str) -> list[str]:
    lines = text.strip().splitlines()
    return lines[-1].split() if lines else []


def watcher_memory(text: str) -> ProcessMemory | None:
    """The watcher's `mem` file: lines of "<VmHWM kB> <largest VmRSS kB> [<most threads>]",
    appended as they grow; the last one counts."""
    parts = _last_line(text)
    if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts) or parts[0] == "0":
        return None
    return ProcessMemory(rss_kb=int(parts[1]), vm_hwm_kb=int(parts[0]), source="device-watch")


def watcher_threads(text: str) -> str:
    """The third field of the last line of the watcher's `mem` file (most threads seen), or ""."""
    parts = _last_line(text)
    return parts[2] if len(parts) == 3 else ""


ALIVE = "==alive"  # the sampler's mark after a dumpsys of an engine still alive after it
DUMPSYS_NOT_FOUND = "dumpsys meminfo <pid>: No process found"


def dumpsys_memory(text: str) -> ProcessMemory | None:
    """Android's own account of the engine (TOTAL PSS/RSS/SWAP), a cross-check of procfs."""
    info = parse_meminfo(text)
    if info is None or info.pss_kb is None:
        return None
    return ProcessMemory(pss_kb=info.pss_kb, rss_kb=info.rss_kb, swap_kb=info.swap_pss_kb,
                         source="dumpsys")


def dumpsys_unreadable(text: str) -> tuple[str, ...]:
    """Why ``dumpsys meminfo`` of a live engine gave nothing: some builds list no native pid."""
    if ALIVE in text and "No process found" in text:
        return (DUMPSYS_NOT_FOUND,)
    return ()
