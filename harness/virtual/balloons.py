"""A cached background app as real memory in the phone's cgroup (the cgroup memory model).

With the kernel enforcing the phone's memory, an app's memory must be real for the kernel to
weigh it: each live app is a small process that joins the phone's memory cgroup, takes the app's
``oom_score_adj`` and holds the app's RSS as touched anonymous memory, then sleeps. When the phone
runs out of memory the kernel's OOM killer picks its victim by that score, as on a phone: cached
apps (adj 700-999) long before a shell-started engine (adj -950), which goes only when no app is
left. The daemon sees a balloon die of SIGKILL and writes lmkd's lines for its app.

Its interpreter starts in the daemon's cgroup and moves before it allocates, so what the phone
is charged for is the app's memory alone (cgroup v1 leaves earlier charges where they were).

The kernel weighs a process by its RSS plus ``oom_score_adj / 1000`` of the memory limit, so an
app's Android score (0-999) is compressed into 990-999 here (``kernel_adj``): with a host that
cannot lower the shell's score to adbd's -950 (no CAP_SYS_RESOURCE, as on this project's
machines, where it stays 0), an app at 700 would otherwise lose to an engine holding most of the
phone. Compressed, every app outweighs any engine that fits the limit, and apps keep Android's
order among themselves (higher score first; where two compress alike, the bigger goes first).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys

READY_S = 10.0  # a balloon that has not touched its memory by then is given up
MARKER = "harness-app-balloon"  # its last argument: how a leak check knows one

# argv: the phone's memory cgroup.procs file, the app's oom_score_adj, its RSS in kB
_CODE = r"""
import mmap, os, signal, sys
procs, adj, kb = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open('/proc/self/oom_score_adj', 'w') as f:
    f.write(adj)
with open(procs, 'w') as f:
    f.write(str(os.getpid()))
held = mmap.mmap(-1, kb * 1024)
for offset in range(0, kb * 1024, 4096):
    held[offset] = 1
sys.stdout.write('ok\n')
sys.stdout.flush()
while True:
    signal.pause()
"""


def kernel_adj(adj: int) -> int:
    """An Android oom_score_adj (0-999 for apps) as the kernel is given it: 990-999."""
    return 990 + max(0, min(999, adj)) // 100


def kill_order(adj: int, rss_kb: int) -> tuple[int, int]:
    """The kernel's order among the phone's apps (first killed first): the higher kernel score,
    then the bigger (a balloon's badness is its RSS plus its score's share of the limit)."""
    return -kernel_adj(adj), -rss_kb


def spawn(procs_file: str, adj: int, rss_kb: int) -> subprocess.Popen[bytes] | None:
    """Start a balloon holding ``rss_kb`` at kernel score ``adj`` and wait until it holds its
    memory; None if it could not (the kernel may have killed it already: no room for it)."""
    process = subprocess.Popen(
        [sys.executable, "-S", "-c", _CODE, procs_file, str(adj), str(rss_kb), MARKER],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        start_new_session=True)
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], READY_S)
    line = process.stdout.readline() if ready else b""
    process.stdout.close()
    if line.strip() == b"ok":
        return process
    stop(process)
    return None


def killed(process: subprocess.Popen[bytes]) -> bool:
    """The balloon is gone (reaped here); the kernel's OOM killer ends it with SIGKILL."""
    return process.poll() is not None


def stop(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)
