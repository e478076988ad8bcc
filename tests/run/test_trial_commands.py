"""The launch line quotes every word, and the watcher's file reads back as memory."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from harness.run.trial import launch_command, watcher_memory


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


def test_watcher_records_the_peak_of_a_short_process(tmp_path: Path) -> None:
    """Run the real launch line in sh on this host: a 0.3 s process that touches 40 MB."""
    program = "b = bytearray(40 * 1024 * 1024); import time; time.sleep(0.3)"
    line = launch_command(str(tmp_path / "w"), [sys.executable, "-c", program], None, 0.02)
    done = subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    time.sleep(0.1)  # the watcher's last write lands as the process is reaped
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
