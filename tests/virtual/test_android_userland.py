"""The virtual phone speaks Android: mksh + toybox, real ABIs, adbd's process rules.

Everything here goes through the real adb path: the private adb server, its transport and the
phone's daemon. What a stock phone does is in ../shared/design/VIRTUAL_PHONE.md ("Android
fidelity").
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from fixtures_phones import PhoneFactory, VirtualPhone

from harness.device.adb import AdbDevice
from harness.errors import DeviceError
from harness.run.ondevice import Rates
from harness.run.trial import launch_command
from harness.testing.adbserver import AdbServer
from harness.virtual.userland import SUBSTITUTES
from virtual.procwait import alive, wait_for

FAST = Rates(memory_s=0.02, tick_s=0.02)  # the sampler at its quickest


def _sh(server: AdbServer, phone: VirtualPhone, command: str,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return server.adb("-s", phone.serial, "shell", command, timeout=timeout)


def test_device_shell_is_mksh_with_toybox_and_nothing_else(
        adb_server: AdbServer, virtual_phone: VirtualPhone) -> None:
    # as Android's builds say of themselves: mksh with AOSP's vendor suffix, toybox 0.8.11
    version = _sh(adb_server, virtual_phone, "echo $KSH_VERSION")
    assert re.fullmatch(r"@\(#\)MIRBSD KSH R\d+\w? \d{4}/\d{2}/\d{2} Android\n", version.stdout)
    assert _sh(adb_server, virtual_phone, "toybox --version").stdout == "toybox 0.8.11-android\n"
    assert _sh(adb_server, virtual_phone, "toybox echo hi").stdout == "hi\n"  # still toybox
    for tool in ("bash", "python3", "python", "perl", "awk", "gawk"):
        found = _sh(adb_server, virtual_phone, f"command -v {tool}")
        assert found.stdout == "", f"{tool} is reachable from the device shell: {found.stdout}"
    for applet in ("ls", "grep", "cat", "sha256sum", "sleep"):
        said = _sh(adb_server, virtual_phone, f"{applet} --version").stdout
        assert said.startswith("toybox "), (applet, said)
    # Android's toybox has these; Debian's lacks them: busybox stands in, never GNU
    for name in SUBSTITUTES:
        helped = _sh(adb_server, virtual_phone, f"{name} --help 2>&1 | head -n 1")
        assert "BusyBox" in helped.stdout, (name, helped.stdout)
    assert _sh(adb_server, virtual_phone, "echo abc | tr b x").stdout == "axc\n"
    assert _sh(adb_server, virtual_phone, "expr 6 \\* 7").stdout == "42\n"
    # mksh syntax rules: no ** in arithmetic (a shell script written for bash fails here)
    power = _sh(adb_server, virtual_phone, "echo $((2**10))")
    assert power.returncode != 0


def test_shell_child_is_a_session_leader(adb_server: AdbServer,
                                         virtual_phone: VirtualPhone) -> None:
    """adbd calls setsid() for its shell child: the shell's session id is its own pid."""
    out = _sh(adb_server, virtual_phone, "echo $$; cat /proc/$$/stat").stdout.splitlines()
    pid = out[0].strip()
    fields = out[1].rsplit(")", 1)[1].split()
    assert fields[3] == pid  # session


def _old_launch_line(workdir: str, engine: str) -> str:
    """The launch line the harness used before: backgrounded subshell in an and-list."""
    return (f"mkdir -p {workdir} && cd {workdir} && echo $$ > pid && "
            "(while [ -d /proc/$$ ]; do sleep 0.05; done) > /dev/null 2>&1 & "
            f"exec {engine}")


@pytest.mark.parametrize("shell", ["mksh", "dash"])
def test_launch_line_and_watcher_finish_under_mksh_and_dash(
        adb_server: AdbServer, virtual_phones: PhoneFactory, shell: str) -> None:
    phone = virtual_phones(shell=shell)[0]
    workdir = "/data/local/tmp/harness/trials/t1"
    started = time.monotonic()
    result = _sh(adb_server, phone, launch_command(workdir, ["sleep", "1"], None, FAST),
                 timeout=20)
    took = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert took < 10, f"the launch line took {took:.1f} s under {shell}"
    # the watcher saw the engine and ends once the phone has reaped it
    memory = _sh(adb_server, phone, f"sleep 0.5; cat {workdir}/mem; cat {workdir}/pid").stdout
    *fields, pid = memory.split()  # mem: VmHWM, largest VmRSS (then what else the watcher keeps)
    peak, largest = fields[:2]
    assert int(peak) > 0 and int(largest) > 0
    assert wait_for(lambda: not alive(int(pid)), 5)


def test_phone_reaps_only_at_eof_so_a_watcher_holding_the_streams_hangs_under_mksh(
        adb_server: AdbServer, virtual_phone: VirtualPhone) -> None:
    """The fidelity that made the old launch line fail: mksh keeps the shell's stdout/stderr in
    a backgrounded and-list, adbd waits for EOF before it reaps, so the engine stays a zombie the
    watcher waits for. The same line finishes under dash (kinder than Android)."""
    line = _old_launch_line("/data/local/tmp/old", "sleep 0.5")
    with pytest.raises(subprocess.TimeoutExpired):
        _sh(adb_server, virtual_phone, line, timeout=6)
    pid = int(Path(virtual_phone.root, "data/local/tmp/old/pid").read_text())
    assert Path(f"/proc/{pid}").exists()  # unreaped: a zombie engine, as on a phone
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    assert state == "Z"


def test_closed_stream_hangs_up_the_direct_child_only(
        adb_server: AdbServer, virtual_phone: VirtualPhone) -> None:
    device = AdbDevice(virtual_phone.serial)
    script = ("cd /data/local/tmp; echo $$ > shell.pid; "
              "trap 'echo hup > got; exit 0' HUP; "
              "sleep 60 > /dev/null 2>&1 < /dev/null & echo $! > orphan.pid; "
              "while true; do sleep 0.1; done")
    with pytest.raises(DeviceError):
        device.shell(script, timeout=2)  # the client gives up and closes the stream
    tmp = Path(virtual_phone.root, "data/local/tmp")
    assert wait_for(lambda: (tmp / "got").is_file(), 10), "the shell never got SIGHUP"
    assert (tmp / "got").read_text() == "hup\n"
    orphan = int((tmp / "orphan.pid").read_text())
    try:
        assert alive(orphan), "the group was signalled: the orphan died with its shell"
    finally:
        device.shell(f"kill -9 {orphan}", timeout=10)


def test_lost_connection_leaves_the_engine_to_sighup(
        adb_server: AdbServer, virtual_phone: VirtualPhone) -> None:
    """A dropped transport closes every stream: the engine (the shell, exec'ed) gets SIGHUP."""
    device = AdbDevice(virtual_phone.serial)
    workdir = "/data/local/tmp/harness/trials/lost"
    errors: list[Exception] = []

    def launch() -> None:
        try:
            device.shell(launch_command(workdir, ["sleep", "60"], None, FAST), timeout=60)
        except DeviceError as error:
            errors.append(error)

    runner = threading.Thread(target=launch)
    runner.start()
    pid_file = Path(virtual_phone.root, "data/local/tmp/harness/trials/lost/pid")
    assert wait_for(pid_file.is_file, 20)
    pid = int(pid_file.read_text())
    assert alive(pid)
    virtual_phone.fault("drop", 1)
    runner.join(30)
    assert not runner.is_alive() and errors, "the launch did not see the connection drop"
    assert wait_for(lambda: not alive(pid), 10), "the engine survived the lost connection"


@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-gcc") is None,
                    reason="needs g++-aarch64-linux-gnu (./dev installs it)")
def test_phone_runs_its_abi_and_refuses_another(adb_server: AdbServer,
                                                virtual_phones: PhoneFactory,
                                                tmp_path: Path) -> None:
    source = tmp_path / "hello.c"
    source.write_text('#include <stdio.h>\nint main(void){puts("hello phone");return 3;}\n')
    arm = tmp_path / "hello-arm64"
    x86 = tmp_path / "hello-x86_64"
    subprocess.run(["aarch64-linux-gnu-gcc", "-static", "-O1", str(source), "-o", str(arm)],
                   check=True)
    subprocess.run(["cc", "-O1", str(source), "-o", str(x86)], check=True)
    arm64_phone = virtual_phones(abi="arm64-v8a")[0]
    x86_phone = virtual_phones(abi="x86_64")[0]
    for phone in (arm64_phone, x86_phone):
        for binary in (arm, x86):
            pushed = adb_server.adb("-s", phone.serial, "push", str(binary), "/data/local/tmp/")
            assert pushed.returncode == 0, pushed.stderr
        _sh(adb_server, phone, "chmod 755 /data/local/tmp/hello-*")
    runs = _sh(adb_server, arm64_phone, "/data/local/tmp/hello-arm64")
    assert (runs.returncode, runs.stdout) == (3, "hello phone\n")
    refused = _sh(adb_server, arm64_phone, "/data/local/tmp/hello-x86_64")
    assert refused.returncode == 1 and "not executable: 64-bit ELF file" in refused.stderr
    assert _sh(adb_server, arm64_phone, "getprop ro.harness.emulated_cpu").stdout.strip() \
        == "qemu-aarch64"
    assert _sh(adb_server, arm64_phone, "getprop ro.product.cpu.abi").stdout.strip() \
        == "arm64-v8a"
    # through toybox (execvp) as well as the shell (execve)
    via_env = _sh(adb_server, arm64_phone, "env /data/local/tmp/hello-x86_64")
    assert via_env.returncode != 0 and "hello" not in via_env.stdout
    native = _sh(adb_server, x86_phone, "/data/local/tmp/hello-x86_64")
    assert (native.returncode, native.stdout) == (3, "hello phone\n")
    assert _sh(adb_server, x86_phone, "/data/local/tmp/hello-arm64").returncode == 1
    assert _sh(adb_server, x86_phone, "getprop ro.harness.emulated_cpu").stdout.strip() == ""


def test_shells_get_sighup_at_its_default_when_the_phone_was_started_ignoring_it(
        adb_server: AdbServer, virtual_phones: PhoneFactory) -> None:
    """Started from `nohup` (SIGHUP ignored, inherited by every child), the phone's shells must
    still see SIGHUP at its default, as adbd's do: else no closed stream could end them."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        (phone,) = virtual_phones()
    finally:
        signal.signal(signal.SIGHUP, previous)
    result = AdbDevice(phone.serial).shell("cat /proc/self/status", timeout=30)
    ignored = next(line.split()[1] for line in result.stdout.splitlines()
                   if line.startswith("SigIgn:"))
    assert int(ignored, 16) & (1 << (signal.SIGHUP - 1)) == 0
