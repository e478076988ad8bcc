"""One directory per virtual phone, and the mapping of device paths into it.

Layout of a phone directory::

    root/     what the phone calls "/": data/local/tmp, sdcard, system/bin, proc/meminfo,
              proc/cpuinfo, proc/uptime, proc/pressure/memory, proc/sys/kernel/random/boot_id,
              sys/class/thermal, sys/devices/system/cpu, sys/class/kgsl (a readable GPU)
    state/    config.json (profile snapshot), logcat.log, sessions, thermal.json, control/,
              gpu/ (the GPU memory layer's reports, harness.virtual.gpu)

Why rewriting: commands run in the phone's shell, a real mksh (so ``; echo X4EXIT:$?`` and every
POSIX construct work) without root or namespaces. Well-known absolute device prefixes in a
command are rewritten to their sandbox location before the shell sees them; sync maps the same
prefixes, so a file pushed to ``/data/local/tmp/x`` is what ``cat /data/local/tmp/x`` prints.
Process ids are host ids, so ``/proc/<pid>`` is the host's own (the real memory of the real
process).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

# device prefix -> path relative to root/ ; longest first so /sdcard wins over /s...
_PREFIXES: tuple[tuple[str, str], ...] = (
    ("/storage/emulated/0", "sdcard"),
    ("/storage/self/primary", "sdcard"),
    ("/sys/devices/system/cpu", "sys/devices/system/cpu"),
    ("/sys/class/thermal", "sys/class/thermal"),
    ("/sys/class/kgsl", "sys/class/kgsl"),  # a readable GPU's; absent otherwise (ENOENT)
    ("/sys/class/devfreq", "sys/class/devfreq"),  # a readable GPU's devfreq device
    ("/sys/class/power_supply", "sys/class/power_supply"),
    ("/proc/sys/kernel/random/boot_id", "proc/sys/kernel/random/boot_id"),
    ("/proc/pressure/memory", "proc/pressure/memory"),
    ("/proc/meminfo", "proc/meminfo"),
    ("/proc/uptime", "proc/uptime"),
    ("/proc/cpuinfo", "proc/cpuinfo"),
    ("/system/bin", "system/bin"),
    ("/sdcard", "sdcard"),
    ("/data", "data"),
)
_BEFORE = r"(?<![\w./~-])"  # not inside a longer word or path
_AFTER = r"(?=$|[/\s'\";|&)<>:`}])"
_PATTERN = re.compile(_BEFORE + "(" + "|".join(re.escape(p) for p, _ in _PREFIXES) + ")" + _AFTER)
TOOLS = ("getprop", "setprop", "dumpsys", "logcat", "log", "settings", "cmd", "dmesg", "id",
         "getenforce", "pm", "uname")
STOPPED_WHY = "stopped_why"  # in state/: why the phone stopped itself (execshim.c)


@dataclass(frozen=True)
class Sandbox:
    """Paths of one phone directory (creating nothing until ``create`` is called)."""

    path: Path

    @property
    def root(self) -> Path:
        return self.path / "root"

    @property
    def state(self) -> Path:
        return self.path / "state"

    @property
    def control(self) -> Path:
        return self.state / "control"

    @property
    def bin(self) -> Path:
        return self.root / "system" / "bin"

    @property
    def storage_dirs(self) -> tuple[Path, ...]:
        """What counts against the virtual disk."""
        return (self.root / "data", self.root / "sdcard")

    def create(self) -> None:
        for sub in ("data/local/tmp", "sdcard/Download", "proc/sys/kernel/random",
                    "proc/pressure", "sys/class/thermal", "sys/devices/system/cpu", "system/bin"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.control.mkdir(parents=True, exist_ok=True)
        self.write_tool_shims()

    def write_tool_shims(self) -> None:
        """``/system/bin/<tool>``: tiny sh scripts that call the phone's services process for
        the tool (harness.virtual.zygote, through its client phonecall.c), as a phone's
        ``dumpsys`` asks system_server. The tools stand for Android's system services, which
        the shell user's limits (the preloaded rules of execshim.c) do not bind, and whose
        memory is not the shell's: they run in the services process's children, outside the
        phone's cgroups."""
        from harness.virtual.userland import phone_call
        from harness.virtual.zygote import socket_name

        client, name = shlex.quote(str(phone_call())), shlex.quote(socket_name(self.state))
        for tool in TOOLS:
            script = f'#!/bin/sh\nexec {client} {name} {tool} "$@"\n'
            target = self.bin / tool
            if target.is_symlink():  # an applet link of an older phone: never write through it
                target.unlink()
            target.write_text(script)
            target.chmod(0o755)

    def write_python(self) -> None:
        """A Python at /data/local/tmp/python, as someone measuring llama-cpp-python pushes one.

        It is this host's interpreter (the one serving the phone, with whatever llama_cpp it
        has), started from a script under the phone's root: it runs in the shell's session, so
        the phone counts its memory and its low-memory killer can kill it, like any engine. A
        phone's own Python would be built for the phone's ABI; this one is the host's, so only
        phones of the host's ABI get it (docs/virtual-phone.md).
        """
        folder = self.root / "data/local/tmp/python/bin"
        folder.mkdir(parents=True, exist_ok=True)
        script = f"#!/bin/sh\nexec {shlex.quote(sys.executable)} \"$@\"\n"
        for name in ("python3", "python"):
            target = folder / name
            target.write_text(script)
            target.chmod(0o755)

    def host_path(self, device_path: str) -> Path:
        """Where a device path lives on the host (used by sync; never escapes the sandbox).

        ``/proc/<pid>/...`` is the host's /proc (pids are host pids); anything else not under a
        mapped prefix lands under root/ as well, so sync cannot write outside the phone.
        """
        parts = [p for p in device_path.split("/") if p not in ("", ".")]
        clean: list[str] = []
        for part in parts:
            if part == "..":
                if clean:
                    clean.pop()
            else:
                clean.append(part)
        normal = "/" + "/".join(clean)
        for prefix, rel in _PREFIXES:
            if normal == prefix or normal.startswith(prefix + "/"):
                return self.root / rel / normal[len(prefix):].lstrip("/")
        if len(clean) >= 2 and clean[0] == "proc" and clean[1].isdigit():
            return Path("/proc").joinpath(*clean[1:])
        return self.root.joinpath(*clean) if clean else self.root

    def rewrite_command(self, command: str) -> str:
        """Rewrite well-known absolute device paths in a shell command to sandbox paths."""
        return rewrite_paths(command, self.root)

    def shell_env(self) -> dict[str, str]:
        """The device shell's environment: its PATH is the phone's /system/bin alone."""
        return {
            "PATH": str(self.bin),
            "HOME": str(self.root),
            "TMPDIR": str(self.root / "data" / "local" / "tmp"),
            "ANDROID_DATA": "/data",
            "ANDROID_ROOT": "/system",
            "EXTERNAL_STORAGE": "/sdcard",
            "USER": "shell",
            "LANG": "C.UTF-8",
            "HARNESS_SIM_STATE": str(self.state),
        }


def rewrite_paths(command: str, root: Path) -> str:
    def replace(match: re.Match[str]) -> str:
        prefix = match.group(1)
        rel = dict(_PREFIXES)[prefix]
        return str(root / rel)

    return _PATTERN.sub(replace, command)


def disk_used_bytes(sandbox: Sandbox) -> int:
    total = 0
    for top in sandbox.storage_dirs:
        for dirpath, _dirs, files in os.walk(top):
            for name in files:
                try:
                    total += os.lstat(os.path.join(dirpath, name)).st_size
                except OSError:
                    continue
    return total


def write_atomic(path: Path, text: str) -> None:
    """Readers (tools, sync) never see half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
