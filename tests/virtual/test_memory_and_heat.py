"""The phone's memory rules and thermal throttling act on real host processes.

Memory as on a stock phone: lmkd kills (simulated) background apps with its log lines; then the
kernel's OOM killer takes the largest real process and leaves nothing in logcat; or, with
system_server as its victim, the phone reboots.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import adbutils
import pytest
from fixtures_phones import PhoneFactory, VirtualPhone

from harness.profiles import find_profile
from harness.testing.adbserver import AdbServer
from harness.virtual.config import BackgroundApp
from virtual.procwait import alive, wait_for

SPIN = (
    "import time\n"
    "start = time.monotonic(); n = 0\n"
    "while time.monotonic() - start < 2.0:\n"
    "    n += 1\n"
    "print(n)\n"
)


def _sh(server: AdbServer, phone: VirtualPhone, command: str,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return server.adb("-s", phone.serial, "shell", command, timeout=timeout)


def _push(server: AdbServer, phone: VirtualPhone, program: Path) -> str:
    target = f"/data/local/tmp/{program.name}"
    pushed = server.adb("-s", phone.serial, "push", str(program), target)
    assert pushed.returncode == 0, pushed.stderr
    _sh(server, phone, f"chmod 755 {target}")
    return target


def _available_kb(server: AdbServer, phone: VirtualPhone) -> int:
    meminfo = _sh(server, phone, "cat /proc/meminfo").stdout
    return next(int(x.split()[1]) for x in meminfo.splitlines() if x.startswith("MemAvailable:"))


def _psi_totals(server: AdbServer, phone: VirtualPhone) -> tuple[int, int]:
    text = _sh(server, phone, "cat /proc/pressure/memory").stdout
    some, full = text.splitlines()
    assert some.startswith("some avg10=") and full.startswith("full avg10=")
    return int(some.rsplit("total=", 1)[1]), int(full.rsplit("total=", 1)[1])


APPS = (BackgroundApp("com.example.music", 20, 700), BackgroundApp("com.example.cached", 30, 900))


def test_lmkd_kills_apps_then_the_kernel_kills_the_largest_process_silently(
        adb_server: AdbServer, virtual_phones: PhoneFactory,
        phone_programs: dict[str, Path]) -> None:
    profile = find_profile("midrange-8gb")
    # a phone whose shell may read PSI (the stock policy denies it): the stalls are the point
    profile = replace(profile, android=replace(profile.android, background_apps=APPS,
                                               readable=("psi",)))
    (phone,) = virtual_phones(profile=profile, ram_mb=150)
    # the apps hold memory: MemAvailable is the limit less them and the phone's processes
    assert _available_kb(adb_server, phone) <= 100 * 1024
    summary = _sh(adb_server, phone, "dumpsys meminfo").stdout
    assert "com.example.cached (pid " in summary and "K: Cached" in summary
    before = _psi_totals(adb_server, phone)
    hog = _push(adb_server, phone, phone_programs["hog"])
    run = _sh(adb_server, phone, f"{hog} 400")
    assert run.returncode == 137  # the kernel's OOM killer: SIGKILL
    pid = run.stdout.split()[0]
    assert "allocated" not in run.stdout
    log = _sh(adb_server, phone, "logcat -d -b all").stdout
    kills = [x for x in log.splitlines() if "lowmemorykiller: Kill '" in x]
    assert len(kills) == 2, log
    assert "Kill 'com.example.cached' (" in kills[0] and ", oom_score_adj 900 to free 30720kB " \
        "rss, 0kB swap; reason: " in kills[0]
    assert "Kill 'com.example.music' (" in kills[1] and "oom_score_adj 700" in kills[1]
    assert all(int(x.split("uid ")[1].split(",")[0]) >= 10000 for x in kills)
    # nothing names the hog: a user build has no kernel lines in logcat
    assert f"({pid})" not in log and f" {pid} " not in log and "hog" not in log
    assert _psi_totals(adb_server, phone) > before
    # the apps restart some seconds after the pressure is gone
    assert wait_for(lambda: "com.example.cached (pid " in _sh(
        adb_server, phone, "dumpsys meminfo").stdout, 15, step=0.2)
    assert _available_kb(adb_server, phone) <= 100 * 1024


@pytest.mark.each_adb_client
def test_system_server_as_oom_victim_reboots_the_phone(
        adb_server: AdbServer, virtual_phones: PhoneFactory,
        phone_programs: dict[str, Path]) -> None:
    profile = find_profile("midrange-8gb")
    profile = replace(profile, android=replace(profile.android, background_apps=(),
                                               oom_victim="system_server"))
    (phone,) = virtual_phones(profile=profile, ram_mb=120)
    boot_id = _sh(adb_server, phone, "cat /proc/sys/kernel/random/boot_id").stdout.strip()
    assert len(boot_id) == 36 and boot_id.count("-") == 4
    def uptime_s() -> float:
        return float(_sh(adb_server, phone, "cat /proc/uptime").stdout.split()[0])

    # the phone's uptime runs: it reaches 2 s (the reboot below starts it again)
    assert wait_for(lambda: uptime_s() >= 2, 20, step=0.2)
    uptime = uptime_s()
    _sh(adb_server, phone, "log -t before hello")
    sleeper = _sh(adb_server, phone, "sleep 300 >/dev/null 2>&1 & echo $!").stdout.strip()
    hog = _push(adb_server, phone, phone_programs["hog"])
    run = _sh(adb_server, phone, f"{hog} 400")
    # the link dropped: not the hog's SIGKILL (137); adb 29.0.6 reports a stream that ends
    # without an exit status as 0, recent ones as an error; the new boot id below proves it
    assert run.returncode != 137 and "allocated" not in run.stdout
    assert not alive(int(sleeper)), "a process of the phone survived its reboot"

    def back() -> bool:
        try:
            return _sh(adb_server, phone, "echo up", timeout=5).stdout == "up\n"
        except subprocess.TimeoutExpired:
            return False

    assert wait_for(back, 60, step=0.2), "the phone did not come back after its reboot"
    assert _sh(adb_server, phone, "cat /proc/sys/kernel/random/boot_id").stdout.strip() \
        not in ("", boot_id)
    assert uptime_s() < uptime + 1
    log = _sh(adb_server, phone, "logcat -d").stdout
    assert "before" not in log and "rebooted" in log  # logd's ring did not survive the reboot


def test_a_hot_phone_runs_cpu_work_slower_and_reports_its_status(
        adb_server: AdbServer, virtual_phones: PhoneFactory) -> None:
    cool, hot = virtual_phones(count=2)
    hot.fault("thermal", 3)
    for phone in (cool, hot):
        (phone.root / "data/local/tmp/spin.py").write_text(SPIN)
    client = adbutils.AdbClient(host="127.0.0.1", port=adb_server.port)
    counts: dict[str, int] = {}

    def spin(serial: str) -> None:
        out = client.device(serial).shell(f"{sys.executable} /data/local/tmp/spin.py", timeout=30)
        counts[serial] = int(out.strip())

    # side by side, so both see the same host load
    threads = [threading.Thread(target=spin, args=(p.serial,)) for p in (cool, hot)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counts[hot.serial] < 0.8 * counts[cool.serial]
    thermal = client.device(hot.serial).shell("dumpsys thermalservice")
    assert "Thermal Status: 3" in thermal and "IsStatusOverride: true" in thermal
    capped = client.device(hot.serial).shell(
        "cat /sys/devices/system/cpu/cpu7/cpufreq/scaling_max_freq")
    assert int(capped) < 2400000
    assert "Thermal Status: 0" in client.device(cool.serial).shell("dumpsys thermalservice")
    hot.fault("thermal-release")
    assert "Thermal Status: 0" in client.device(hot.serial).shell("dumpsys thermalservice")
