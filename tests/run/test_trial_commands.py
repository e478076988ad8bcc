"""The launch line quotes every word, and the watcher's files read back as memory and affinity."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from virtual.procwait import wait_for

from harness.run.affinity import parse_readback
from harness.run.ondevice import Rates
from harness.run.trial import launch_command, watcher_memory
from harness.run.watch import watcher_threads

FAST = Rates(memory_s=0.02, tick_s=0.02)  # the sampler at its quickest


def test_every_engine_word_is_quoted() -> None:
    line = launch_command("/data/local/tmp/harness/trials/x", [
        "/data/bin/llama-bench", "-m", "/m/x; touch /tmp/pwned #.gguf"], "/data/lib", None)
    assert "'/m/x; touch /tmp/pwned #.gguf'" in line
    assert "env LD_LIBRARY_PATH=/data/lib /data/bin/llama-bench" in line
    assert "while" not in line  # no watcher when sampling is off


def test_watcher_file_reads_as_peak_and_largest_rss() -> None:
    memory = watcher_memory("20512 20100\n")
    assert memory is not None
    assert (memory.vm_hwm_kb, memory.rss_kb, memory.source) == (20512, 20100, "device-watch")
    assert watcher_memory("") is None
    assert watcher_memory("0 0") is None  # the engine never had memory to report
    assert watcher_memory("garbage") is None
    three = watcher_memory("20512 20100 5\n")  # with the most threads seen
    assert three is not None and three.vm_hwm_kb == 20512
    assert watcher_threads("20512 20100 5\n") == "5" and watcher_threads("1 2") == ""
    # appended as it grows: the last line counts
    grown = watcher_memory("1024 1000 1\n20512 20100 5\n")
    assert grown is not None and grown.vm_hwm_kb == 20512 and grown.rss_kb == 20100
    assert watcher_threads("1024 1000 1\n20512 20100 5\n") == "5"


def test_watcher_records_the_peak_of_a_short_process(tmp_path: Path) -> None:
    """Run the real launch line in sh on this host: a 0.3 s process that touches 40 MB."""
    program = "b = bytearray(40 * 1024 * 1024); import time; time.sleep(0.3)"
    line = launch_command(str(tmp_path / "w"), [sys.executable, "-c", program], None, FAST)
    done = subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # the watcher's last write lands as the process is reaped; t1 is the sampler's last one
    assert wait_for(lambda: (tmp_path / "w" / "t1").is_file(), 10)
    memory = watcher_memory((tmp_path / "w" / "mem").read_text())
    assert memory is not None and memory.vm_hwm_kb is not None and memory.rss_kb is not None
    assert memory.vm_hwm_kb >= 40 * 1024
    assert memory.rss_kb >= 0.9 * memory.vm_hwm_kb


def test_dumpsys_meminfo_of_the_engine_reads_as_a_memory_sample() -> None:
    from harness.run.trial import dumpsys_memory
    from harness.virtual.formats import meminfo_process

    text = meminfo_process(4242, "llama-bench", {"Rss": 20000, "Pss": 15000, "SwapPss": 12},
                           {"VmStk": 132}, sdk=34, uptime_ms=1000)
    memory = dumpsys_memory(text)
    assert memory is not None
    assert (memory.pss_kb, memory.rss_kb, memory.swap_kb, memory.source) == (
        15000, 20000, 12, "dumpsys")
    assert dumpsys_memory("No process found for: 4242\n") is None


PINNED = """
import os, threading, time
def work():
    os.sched_setaffinity(0, {CPU})
    end = time.time() + 0.8
    while time.time() < end:
        pass
os.sched_setaffinity(0, {CPU})
threads = [threading.Thread(target=work) for _ in range(3)]
[t.start() for t in threads]
[t.join() for t in threads]
"""


@pytest.mark.parametrize("shell", ["mksh", "dash"])
def test_watcher_reads_back_each_threads_cpus_and_the_thread_count(
        tmp_path: Path, shell: str, shell_env: Callable[[str], dict[str, str]]) -> None:
    """The real launch line in Android's shell (and dash) on this host: 4 threads pinned to one
    CPU; the watcher's files say which CPUs they were allowed and how many ran."""
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    cpu = max(os.sched_getaffinity(0))
    program = PINNED.replace("CPU", str(cpu))
    line = launch_command(str(tmp_path / "w"), [sys.executable, "-c", program], None, FAST)
    done = subprocess.run([shell, "-c", line], capture_output=True, text=True, timeout=60,
                          env=shell_env(shell))
    assert done.returncode == 0, done.stderr
    assert wait_for(lambda: (tmp_path / "w" / "t1").is_file(), 10)  # the sampler's last write
    mem = (tmp_path / "w" / "mem").read_text()
    readback = parse_readback(watcher_threads(mem), (tmp_path / "w" / "aff").read_text())
    assert readback.threads_seen == 4
    assert readback.applied_cpus == frozenset({cpu})


def test_dumpsys_of_a_live_engine_that_lists_no_native_pid_gives_a_reason() -> None:
    from harness.run.ondevice import script
    from harness.run.watch import ALIVE, DUMPSYS_NOT_FOUND, dumpsys_unreadable

    assert dumpsys_unreadable(f"No process found for: 4242\n{ALIVE}\n") == (DUMPSYS_NOT_FOUND,)
    # the engine had exited by then: a race, not a phone that hides native pids
    assert dumpsys_unreadable("No process found for: 4242\n") == ()
    assert dumpsys_unreadable(f"** MEMINFO in pid 4242 [llama-bench] **\n{ALIVE}\n") == ()
    assert ALIVE in script(Rates(dumpsys_s=5))
