"""The on-device sampler: its file reads back as samples, and the real script, run in Android's
shell (and dash) on this host, samples a live process without forking while it runs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from virtual.procwait import wait_for

from harness.run.ondevice import SOURCE, Rates, parse, script
from harness.run.trial import launch_command
from harness.run.watch import watcher_memory

SMP = """z thermal_zone0 cpu-0-0
z thermal_zone2 skin-therm
m 100.05 20480 20600 15000 9000 6000 12 0 5 3 1
s 100.05 1800000 2400000 2400000 80 312 - 45000 36000
m 100.10 40960 41000 - - - - - 7 9 2
s 100.60 1200000 1500000 2400000 79 315 2 52000 -
m 100.6
c 4 2 1 0
"""


def test_the_sampler_file_reads_back_as_memory_and_state_samples() -> None:
    sampled = parse(SMP, 100.0, "W: mksh: /sys/class/thermal/thermal_zone1/temp: open: "
                                "Permission denied\n")
    memory = [t for t in sampled.ticks if t.memory]
    states = [t for t in sampled.ticks if t.state]
    assert [t.t_ms for t in memory] == [50, 100]  # ms since the launch, on the phone's clock
    first = memory[0].memory
    assert first is not None
    assert (first.rss_kb, first.vm_hwm_kb, first.pss_kb, first.pss_anon_kb, first.pss_file_kb,
            first.swap_kb, first.source) == (20480, 20600, 15000, 9000, 6000, 12, SOURCE)
    second = memory[1].memory
    assert second is not None and second.pss_kb is None  # not read: absent, not zero
    cool, hot = (t.state for t in states)
    assert cool is not None and hot is not None
    assert (cool.big_cur_khz, cool.big_max_khz, cool.big_hw_max_khz) == (1800000, 2400000,
                                                                       2400000)
    assert (cool.battery_level, cool.battery_temp_c, cool.thermal_status) == (80, 31.2, None)
    assert cool.max_temp_c == 45.0 and hot.max_temp_c == 52.0 and hot.thermal_status == 2
    assert sampled.engine_cpu_s == pytest.approx(0.11)  # its last reading: 9 + 2 ticks
    assert sampled.sampler_cpu_s == pytest.approx(0.07)
    assert sampled.unreadable == ("thermal_zone1/temp: Permission denied",)
    assert sampled.lines == 5  # the line cut short by the kill is skipped


def test_meminfo_and_gpuservice_outputs_read_back_apart_by_their_marks() -> None:
    dm = ("==dm 100.50\n** MEMINFO in pid 42 [llama-bench] **\n TOTAL PSS: 900\n==alive\n"
          "==gm 100.50 42\nMemory snapshot for GPU 0:\nGlobal total: 4096\n"
          "Proc 42 total: 4096\n==dm 101.50\nNo process found for: 42\n==gm 101.50 42\n"
          "Failed to initialize GPU memory eBPF\n==gm 102.5")  # the last one cut by the kill
    sampled = parse("m 100.0 1 1 - - - - - 1 0 0\n", 100.0, "", dm)
    assert [t for t, _ in sampled.dumpsys] == [500, 1500]
    assert sampled.dumpsys[0][1].endswith("TOTAL PSS: 900\n==alive")  # the alive mark stays
    assert "Memory snapshot" not in sampled.dumpsys[0][1]
    assert [(t, pid) for t, pid, _ in sampled.gpumem] == [(500, 42), (1500, 42)]
    assert sampled.gpumem[1][2] == "Failed to initialize GPU memory eBPF"


def test_rates_become_ticks_and_the_script_holds_only_numbers_and_paths() -> None:
    rates = Rates(memory_s=0.5, state_s=2.0, status_s=10.0, fast_s=2.0, big_cpu=7)
    assert (rates.every(0.5), rates.every(2.0), rates.every(10), rates.every(0)) == (10, 40,
                                                                                     200, 0)
    text = script(rates)
    assert "{" + "cpu}" not in text and "/sys/devices/system/cpu/cpu7/cpufreq" in text
    # dumpsys meminfo: never (a device cell's, on a phone without kgsl, every second)
    assert "dumpsys meminfo" in text and "D=0; [ -z \"$K\" ] && [ $D -eq 0 ] && D=0;" in text
    gpu = script(Rates(gpu_dumpsys_s=1.0))
    assert "D=0; [ -z \"$K\" ] && [ $D -eq 0 ] && D=100;" in gpu
    assert "current_now" not in text and "current_now" in script(Rates(power=True))
    # after the fast start a calmer tick, but not with battery readings or a faster memory rate
    assert "else d=0.1; fi" in text and "else d=0.05; fi" in script(Rates(power=True))
    assert "else d=0.05; fi" in script(Rates(memory_s=0.05))


# busy for 1.2 s and at least 0.6 s of its own CPU time: on a loaded host (the fresh machine's
# test run, two test processes beside a background compile) 1.2 s of wall time gave 0.45 s
PROGRAM = """
import time
b = bytearray(48 * 1024 * 1024)
end = time.time() + 1.2
while time.time() < end or time.process_time() < 0.6:
    pass
"""


def _sample(workdir: Path, program: str, rates: Rates, shell: str,
            shell_env: Callable[[str], dict[str, str]]) -> None:
    """Run ``program`` (Python) as the engine of a launch line in ``shell``, and wait for the
    sampler's end mark."""
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    line = launch_command(str(workdir), [sys.executable, "-c", program], None, rates)
    done = subprocess.run([shell, "-c", line], capture_output=True, text=True, timeout=60,
                          env=shell_env(shell))
    assert done.returncode == 0, done.stderr
    # the sampler notices the exit within a tick, then writes t1
    assert wait_for(lambda: (workdir / "t1").is_file(), 10)


def _swapped_in() -> int:
    """This host's swap-ins so far, in bytes (/proc/vmstat pswpin)."""
    for line in Path("/proc/vmstat").read_text().splitlines():
        if line.startswith("pswpin "):
            return int(line.split()[1]) * os.sysconf("SC_PAGE_SIZE")
    raise AssertionError("no pswpin in /proc/vmstat")


@pytest.mark.parametrize("shell", ["mksh", "dash"])
def test_the_real_sampler_samples_a_live_process(
        tmp_path: Path, shell: str, shell_env: Callable[[str], dict[str, str]]) -> None:
    workdir = tmp_path / "w"
    before = _swapped_in()
    _sample(workdir, PROGRAM, Rates(memory_s=0.1, state_s=0.3, status_s=0, fast_s=0.3), shell,
            shell_env)
    after = _swapped_in()
    t0 = float((workdir / "t0").read_text().split()[0])
    sampled = parse((workdir / "smp").read_text(), t0)
    memory = [t.memory for t in sampled.ticks if t.memory]
    assert len(memory) >= 8  # every 0.1 s for about 1.2 s
    assert max(m.rss_kb or 0 for m in memory) >= 48 * 1024
    # the phone's swap-ins (pswpin, in bytes of the page size the sampler read from its own
    # smaps at the start), read with every memory line
    swap_ins = [m.swap_in_bytes for m in memory]
    assert all(v is not None and before <= v <= after for v in swap_ins), (before, swap_ins)
    assert any(t.state for t in sampled.ticks)
    assert sampled.engine_cpu_s is not None and sampled.engine_cpu_s >= 0.5
    assert sampled.sampler_cpu_s is not None
    if shell == "mksh":  # at these quick rates a few % of what it watched (bench figure 1
        # measures the default rates); dash forks a sleep per tick and reads byte by byte
        assert sampled.sampler_cpu_s <= 0.05 * sampled.engine_cpu_s, sampled
    end = float((workdir / "t1").read_text())
    assert 1.0 < end - t0 < 5.0


SPIKE = """
import time
time.sleep(0.4)
b = bytearray(64 * 1024 * 1024)
time.sleep(0.4)
del b
time.sleep(0.8)
"""


@pytest.mark.parametrize("shell", ["mksh", "dash"])
def test_a_spike_between_memory_lines_is_in_the_largest_rss(
        tmp_path: Path, shell: str, shell_env: Callable[[str], dict[str, str]]) -> None:
    """Memory lines only at the start and after the exit; the 64 MB held for 0.4 s in between
    is seen by the per-tick reads (statm's resident pages under mksh) and lands in ``mem``."""
    workdir = tmp_path / "w"
    _sample(workdir, SPIKE, Rates(memory_s=5.0, state_s=5.0, status_s=0, fast_s=0), shell,
            shell_env)
    memory = [t.memory for t in parse((workdir / "smp").read_text(), None).ticks if t.memory]
    assert memory and max(m.rss_kb or 0 for m in memory) < 64 * 1024  # the lines missed it
    peak = watcher_memory((workdir / "mem").read_text())
    assert peak is not None and peak.rss_kb is not None and peak.vm_hwm_kb is not None
    assert peak.rss_kb >= 64 * 1024, peak
    assert peak.vm_hwm_kb >= 64 * 1024, peak  # the status kept from before the exit


@pytest.mark.skipif(shutil.which("strace") is None or shutil.which("mksh") is None,
                    reason="needs strace and mksh")
def test_under_mksh_the_running_sampler_forks_nothing(tmp_path: Path) -> None:
    """Every process the launch line starts, traced: the set-up's mkdir and mkfifo, the
    sampler's shell and the engine (exec'd by the launching shell); the sampler itself starts
    nothing: no sleep, cat or dumpsys while the engine runs."""
    workdir = tmp_path / "w"
    rates = Rates(memory_s=0.1, state_s=0.2, status_s=0, fast_s=0.2)
    line = launch_command(str(workdir), ["sleep", "1.5"], None, rates)
    trace = tmp_path / "trace"
    bin_dir = tmp_path / "bin"  # sh is mksh, as on a phone
    bin_dir.mkdir()
    (bin_dir / "sh").symlink_to(shutil.which("mksh") or "mksh")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(["strace", "-f", "-qq", "-e", "trace=execve", "-o", str(trace),
                           "mksh", "-c", line], capture_output=True, text=True, timeout=60,
                          env=env)
    assert done.returncode == 0, done.stderr
    assert wait_for(lambda: (workdir / "t1").is_file(), 10)  # the sampler's last write
    programs = re.findall(r'execve\("([^"]+)"', trace.read_text())
    names = [Path(p).name for p in programs]
    assert names.count("sleep") == 1, names  # the engine itself, not the sampler's naps
    assert sorted(names) == ["mkdir", "mkfifo", "mksh", "sh", "sleep"], names

