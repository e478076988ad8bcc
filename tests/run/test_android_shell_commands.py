"""Every device command the harness sends runs under Android's shell: mksh with toybox applets.

A recording wrapper around the adb device keeps each command line and its result while the
harness does everything it does to a phone (facts, lease, push, cooldown gate, trials with the
default sampling, the watcher, dumpsys, logcat, clean-up); then no command may have tripped over
the shell or an applet (a bashism, a GNU-only flag, a tool a phone lacks).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from pathlib import Path

import pytest

from harness import store
from harness.artifacts.builds import Build
from harness.device.adb import AdbDevice
from harness.device.base import ShellResult, shell_command
from harness.device.lease import DeviceLease
from harness.doctor.coverage import covered_by, references
from harness.run.ondevice import Rates, parse, script
from harness.run.probe import split_sections
from harness.run.runner import RunOptions, execute
from harness.run.watch import dumpsys_memory

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "matrices" / "smoke.yaml"
# What mksh, toybox and busybox print when a command line is not theirs.
TRIPPED = re.compile(
    r"not found|syntax error|bad substitution|unexpected|unknown option|invalid option|"
    r"unknown command|usage:|not executable|exec format error|bad number|bad mask|bad %|"
    r"no such applet|illegal option", re.IGNORECASE)
# Lines written for bash or GNU that a phone refuses: each must trip the check above.
NOT_FOR_A_PHONE = ("echo $((2**10))", "printf %q x", "taskset -c 0 true", "taskset 0x1 true",
                   "awk 1 < /dev/null", "grep -P x /dev/null", "stat --printf=%s /data")


class RecordingDevice(AdbDevice):
    """An AdbDevice that keeps every shell command it ran (its own methods' too) and the result."""

    def __init__(self, serial: str) -> None:
        super().__init__(serial)
        self.ran: list[tuple[str, ShellResult]] = []

    def shell(self, cmd: str | Sequence[str], timeout: float | None = None) -> ShellResult:
        result = super().shell(cmd, timeout=timeout)
        self.ran.append((shell_command(cmd), result))
        return result


def test_every_device_command_runs_under_mksh_and_toybox(
        virtual_phone, tmp_path: Path, host_build: Build, tiny_ladder: dict[str, Path]) -> None:
    device = RecordingDevice(virtual_phone.serial)
    assert "MIRBSD KSH" in device.shell("echo $KSH_VERSION").stdout
    results = tmp_path / "results"
    summary = execute(SMOKE, [device], RunOptions(results=results,
                                                  builds=host_build.path.parent))
    assert dict(summary.outcomes()) == {"ok": 16}
    trials = store.read_table(results, "trials")
    assert trials["vm_hwm_bytes"].notna().all()  # the watcher ran under mksh
    assert trials["cache_resident_bytes"].notna().all()  # the page-cache tool ran under mksh
    assert trials["read_bytes"].notna().all()  # and the sampler read /proc/PID/io
    with DeviceLease(device, run="audit") as lease:
        lease.renew()
    started = device.shell("sh -c 'exec sleep 30' >/data/local/tmp/o.txt "
                           "2>/data/local/tmp/e.txt </dev/null & echo $!")
    pid = int(started.stdout.split()[-1])
    assert device.shell(f"test -d /proc/{pid}").ok
    # the sampler with every read a short trial does not reach (thermal status, dumpsys
    # meminfo, power), in the foreground so that anything it trips over shows on its stderr
    workdir = "/data/local/tmp/harness/trials/audit"
    rates = Rates(memory_s=0.1, state_s=0.2, status_s=0.2, dumpsys_s=0.2, fast_s=0.2,
                  power=True)
    watcher = device.shell(f"mkdir -p {workdir} && cd {workdir} || exit 1; "
                           f"(sleep 1.5; kill -9 {pid}) > /dev/null 2>&1 < /dev/null & "
                           f"sh -c {shlex.quote(script(rates))} sample {pid}", timeout=60)
    assert watcher.ok and watcher.stderr == "", watcher.stderr
    files = split_sections(device.shell(
        f"cd {workdir} && for f in smp err dm.txt pwr; do echo @@harness:$f; cat $f; done; "
        f"rm -rf {workdir}").stdout)
    sampled = parse(files["smp"], None, files["err"], files["dm.txt"])
    assert any(t.memory and t.memory.pss_kb for t in sampled.ticks)
    assert any(t.state and t.state.thermal_status is not None for t in sampled.ticks)
    assert sampled.dumpsys and dumpsys_memory(sampled.dumpsys[0][1]) is not None
    assert files["pwr"].strip() and sampled.sampler_cpu_s is not None
    assert device.shell("cat < /data/local/tmp/o.txt").stdout == ""

    kinds = {
        "launch": "exec ", "watcher": "sh -c ", "gate": "dumpsys thermalservice",
        "memory": "smaps_rollup", "dumpsys": "dumpsys meminfo", "logcat": "logcat -d",
        "sampler files": "/smp",
        "checksum": "sha256sum", "move": "mv -f", "lease": "set -C", "cpu facts": "==> $f <==",
        "storage": "df -k", "kill": "kill -",
        # issue 13: what a stock phone lets the shell read, instead of root-only evidence
        "pre-flight power": "dumpsys power", "battery saver": "settings get global low_power",
        "stay awake": "settings get global stay_on_while_plugged_in",
        "doze": "dumpsys deviceidle get deep", "boot id": "/proc/sys/kernel/random/boot_id",
        "uptime": "/proc/uptime", "meminfo": "cat /proc/meminfo",
        "pressure": "/proc/pressure/memory", "thermal zones": "grep -H '' /sys/class/thermal",
        "affinity read-back": "Cpus_allowed_list", "watcher files": "/aff",
        # issue 29: the model's page cache at every launch, and the engine's storage reads
        "page cache": "/pagecache resident ", "cache file": "> cache 2>&1",
    }
    for kind, sign in kinds.items():
        assert any(sign in command for command, _ in device.ran), f"no {kind} command recorded"
    tripped = [(command, result.stderr) for command, result in device.ran
               if TRIPPED.search(result.stderr)]
    assert not tripped, "\n\n".join(f"{c}\n-> {e}" for c, e in tripped)
    # `harness doctor` probes every service and path these commands reached (the static
    # check of tests/doctor/test_coverage.py, on what was sent)
    unprobed = sorted({ref for command, _ in device.ran for ref in references(command)
                       if covered_by(ref) is None})
    assert not unprobed, unprobed
    # and the check does catch a line a phone refuses
    for line in NOT_FOR_A_PHONE:
        said = device.shell(line).stderr
        assert TRIPPED.search(said), (line, said)
