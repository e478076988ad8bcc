"""The engine's launch line, its on-device watcher, and the memory reads of a running engine.

The engine runs in the foreground of one adb shell (shell protocol v2 gives its exit status,
137 for SIGKILL); its own shell writes its pid to a file first and then ``exec``s the engine, so
the sampler and the timeout watchdog address the engine process itself.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from harness.android.meminfo import parse_meminfo
from harness.run.energy import BATTERY
from harness.run.state import ProcessMemory

# An on-device watcher of the engine's /proc status, started by the launching shell just before it
# becomes the engine (the shell's $$, passed as $1, is the engine's pid after exec). Shell
# builtins only, except one `sleep` per round (every 10 ms for the first 100 rounds, while loading
# and the first graph set the peak, then every `watch_s`), so it costs little. It keeps the
# kernel's peak (VmHWM), the largest VmRSS and the most threads (Threads:) it saw in the file
# `mem`, so even a sub-second trial, too short for samples over adb, has its peak. Every 5th
# round at first, every 20th later (about once a second), it also reads each thread's
# Cpus_allowed_list and appends "<threads> <distinct lists>" to the file `aff` when that
# changed (a few lines a trial): the affinity the kernel applied. A thread that ends between
# the glob and the read only costs that read. A zombie's status has no Vm lines: the last values
# stay. It ends when the engine's /proc entry does, i.e. once adbd has reaped it.
_WATCH = (
    "m=0; h=0; t=0; n=0; p=; while [ -d /proc/$1 ]; do "
    "while read -r k v u; do case $k in VmHWM:) h=$v;; "
    "VmRSS:) [ \"$v\" -gt \"$m\" ] && m=$v;; "
    "Threads:) [ \"$v\" -gt \"$t\" ] && t=$v;; esac; done < /proc/$1/status; "
    "echo \"$h $m $t\" > mem; n=$((n+1)); "
    "if [ $((n<100 ? n%5 : n%20)) -eq 1 ]; then a=; c=0; "
    "for s in /proc/$1/task/*/status; do c=$((c+1)); "
    "while read -r k v; do case $k in Cpus_allowed_list:) "
    "case \" $a \" in *\" $v \"*) ;; *) a=\"$a $v\";; esac; break;; esac; "
    "done 2>/dev/null < $s; done; "
    "[ \"$c$a\" = \"$p\" ] || { p=\"$c$a\"; echo \"$p\" >> aff; }; fi; "
    "{power}"
    "if [ $n -lt 100 ]; then sleep 0.01; else sleep {interval}; fi; done; "
    "read -r u _ < /proc/uptime; echo \"$u\" > t1"
)
# With energy measured, each round (every 5th of the fast first rounds) also appends one battery
# reading "<uptime> <current_now> <voltage_now> <status>" to the file `pwr`
# (harness.run.energy); a field it cannot read stays empty, and the line is skipped.
_POWER = (
    "if [ $((n<100 ? n%5 : 0)) -eq 0 ]; then c=; v=; s=; read -r u _ < /proc/uptime; "
    "read -r c < {battery}/current_now; read -r v < {battery}/voltage_now; "
    "read -r s < {battery}/status; echo \"$u $c $v $s\" >> pwr; fi 2>/dev/null; "
)


def launch_command(workdir: str, argv: Sequence[str], lib_dir: str | None,
                   watch_s: float | None = 0.05, env: Mapping[str, str] | None = None,
                   power: bool = False) -> str:
    """The shell line that records its pid and becomes the engine (every word quoted).

    Written for Android's mksh as much as for dash: the watcher is its own ``sh -c`` started
    from a brace group, with its streams on /dev/null, after the set-up has finished. mksh keeps
    copies of the shell's stdout/stderr (fds 10/11) in a backgrounded and-list or subshell; a
    watcher holding them would keep adbd's stream open after the engine exits, adbd reaps only
    at EOF, and the engine would stay a zombie the watcher waits for, forever.
    """
    settings = {**({"LD_LIBRARY_PATH": lib_dir} if lib_dir else {}), **(env or {})}
    prefix = ["env", *(f"{k}={v}" for k, v in sorted(settings.items()))] if settings else []
    words = " ".join(shlex.quote(word) for word in [*prefix, *argv])
    folder = shlex.quote(workdir)
    # t0: the phone's uptime at the launch (the clock of the watcher's t1 and power readings)
    setup = (f"mkdir -p {folder} && cd {folder} && echo $$ > pid || exit 1; "
             "read -r u _ < /proc/uptime; echo \"$u\" > t0")
    if not watch_s:
        return f"{setup}; exec {words}"
    readings = _POWER.replace("{battery}", BATTERY) if power else ""
    script = shlex.quote(_WATCH.replace("{interval}", str(float(watch_s)))
                         .replace("{power}", readings))
    watcher = f"{{ sh -c {script} watch $$ > /dev/null 2>&1 < /dev/null & }}"
    return f"{setup}; {watcher}; exec {words}"


def watcher_memory(text: str) -> ProcessMemory | None:
    """The watcher's `mem` file: "<VmHWM kB> <largest VmRSS kB> [<most threads>]"."""
    parts = text.split()
    if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts) or parts[0] == "0":
        return None
    return ProcessMemory(rss_kb=int(parts[1]), vm_hwm_kb=int(parts[0]), source="device-watch")


def watcher_threads(text: str) -> str:
    """The third field of the watcher's `mem` file (most threads seen), or ""."""
    parts = text.split()
    return parts[2] if len(parts) == 3 else ""


ALIVE = "@@harness:alive"
DUMPSYS_NOT_FOUND = "dumpsys meminfo <pid>: No process found"


def dumpsys_command(workdir: str) -> str:
    """``dumpsys meminfo`` of the engine, then a mark when the engine was still alive after it
    (so "No process found" of a live engine is told from a race with its exit)."""
    pid_file = shlex.quote(f"{workdir}/pid")
    return (f"p=$(cat {pid_file} 2>/dev/null); [ -n \"$p\" ] && dumpsys meminfo \"$p\" && "
            f"[ -d /proc/$p ] && echo {ALIVE}")


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


def memory_read_command(workdir: str) -> str:
    """The engine's smaps_rollup and status; a file it cannot read says why on stderr."""
    pid_file = shlex.quote(f"{workdir}/pid")
    return (
        f"p=$(cat {pid_file} 2>/dev/null); [ -n \"$p\" ] || exit 0; "
        "echo @@harness:rollup; cat /proc/$p/smaps_rollup; "
        "echo @@harness:status; cat /proc/$p/status"
    )
