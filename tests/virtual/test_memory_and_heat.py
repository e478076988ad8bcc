"""The phone's low-memory killer and thermal throttling act on real host processes."""

from __future__ import annotations

import sys
import threading

import adbutils
from fixtures_phones import PhoneFactory

from harness.testing.adbserver import AdbServer

GROW = (
    "import time\n"
    "chunks = []\n"
    "for _ in range(12):\n"
    "    chunks.append(b'\\x01' * (32 << 20))\n"
    "    time.sleep(0.05)\n"
    "time.sleep(30)\n"
)
SPIN = (
    "import time\n"
    "start = time.monotonic(); n = 0\n"
    "while time.monotonic() - start < 2.0:\n"
    "    n += 1\n"
    "print(n)\n"
)


def test_a_process_growing_past_ram_is_killed_with_sigkill(adb_server: AdbServer,
                                                           virtual_phones: PhoneFactory) -> None:
    phone = virtual_phones(ram_mb=160)[0]
    (phone.root / "data/local/tmp/grow.py").write_text(GROW)
    run = adb_server.adb("-s", phone.serial, "shell",
                         f"{sys.executable} /data/local/tmp/grow.py", timeout=60)
    assert run.returncode == 137
    log = adb_server.adb("-s", phone.serial, "shell", "logcat -d -s lowmemorykiller").stdout
    line = next(x for x in log.splitlines() if "lowmemorykiller" in x)
    assert "Kill 'python" in line and "uid 2000, oom_score_adj 0 to free " in line
    assert "kB rss, 0kB swap; reason: " in line


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
