"""The phone's userland: Android's shell and applets, and its exec rules.

A stock phone's ``/system/bin/sh`` is mksh and its applets are toybox; no bash, GNU coreutils,
awk, perl or python is reachable from ``adb shell``. The virtual phone gets the same from Debian's
``mksh`` and ``toybox`` packages: ``system/bin`` holds one link per toybox applet, ``sh`` is
mksh, and the phone's own tools (getprop, dumpsys, ...) sit beside them; the shell's PATH is that
folder alone. Debian's toybox lacks four applets Android's has (tr, expr, dd, diff): those come
from Debian's busybox, never from GNU.

Exec rules (which ABI runs, natively or in qemu-user, and adbd's ``oom_score_adj``), the shell
user's limits (unreadable paths, a kernel without smaps_rollup) and ignored affinity calls live
in a small preloaded library (``execshim.c``), compiled once per machine with the host's C
compiler and cached by the hash of its source.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.artifacts.llama_source import cache_root
from harness.errors import DeviceError

SHIM_SOURCE = Path(__file__).with_name("execshim.c")
CALL_SOURCE = Path(__file__).with_name("phonecall.c")
# Applets Android's toybox has and Debian's build lacks, taken from busybox instead.
SUBSTITUTES = ("tr", "expr", "dd", "diff")
ADBD_OOM_ADJ = -950
SHELLS = ("mksh", "dash")
# ELF e_machine of each ABI a virtual phone can have.
ABI_MACHINES = {"arm64-v8a": 183, "x86_64": 62}
ABI_QEMU = {"arm64-v8a": "qemu-aarch64", "x86_64": "qemu-x86_64"}
HOST_ABIS = {"x86_64": "x86_64", "aarch64": "arm64-v8a", "arm64": "arm64-v8a"}
ABI_LISTS = {"arm64-v8a": "arm64-v8a,armeabi-v7a,armeabi", "x86_64": "x86_64,x86"}


def host_abi() -> str | None:
    return HOST_ABIS.get(os.uname().machine)


def _need(program: str, package: str, why: str, instead: str = "") -> str:
    found = shutil.which(program)
    if not found:
        raise DeviceError(f"virtual phones need {program} ({why}); "
                          f"install it: apt-get install {package}" + instead)
    return found


def exec_shim() -> Path:
    """The compiled exec-rules library for this machine (built once, keyed by its source)."""
    return _compiled(SHIM_SOURCE, "libharness-phone.so", ["-shared", "-fPIC"], ["-ldl"],
                     "its exec rules")


def phone_call() -> Path:
    """The phone's tool client (phonecall.c, harness.virtual.zygote), compiled once."""
    return _compiled(CALL_SOURCE, "phonecall", [], [], "its system-service tools")


def _compiled(source_path: Path, name: str, flags: list[str], libs: list[str],
              what: str) -> Path:
    """``name`` compiled from ``source_path`` with the host's C compiler, once per machine,
    in the cache keyed by the source's hash."""
    source = source_path.read_bytes()
    key = hashlib.sha256(source + os.uname().machine.encode()).hexdigest()[:16]
    target = cache_root() / "vphone" / key / name
    if target.is_file():
        return target
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise DeviceError(f"virtual phones need a C compiler for {what}; "
                          "install one: apt-get install gcc")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        result = subprocess.run(
            [compiler, *flags, "-O2", "-Wall", "-o", str(out), str(source_path), *libs],
            capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise DeviceError(f"cannot compile the virtual phone's {what}: "
                              + (result.stderr.strip().splitlines() or ["no output"])[-1])
        os.replace(out, target)
    return target


def toybox_applets(toybox: str) -> list[str]:
    listing = subprocess.run([toybox], capture_output=True, text=True, check=False).stdout
    return sorted({word for word in listing.split() if word.isidentifier() or "-" in word}
                  | {"["})


@dataclass(frozen=True)
class Userland:
    """What a phone's shell runs: its shell binary and the folder of applets."""

    shell: str  # the host binary behind /system/bin/sh
    applets: dict[str, str]  # name in /system/bin -> host binary it links to


# What Android's own builds say of themselves: AOSP builds mksh with the vendor suffix
# " Android" (external/mksh/Android.bp: KSH_VERSIONNAME_VENDOR_EXT), and Android 15 ships toybox
# 0.8.11 as "0.8.11-android". The phone's shell is the host's mksh with its vendor suffix
# (" +Debian", same length) read as Android's; its `toybox --version` answers as Android 15's
# (its applets stay this host's toybox 0.8.x and busybox: docs/virtual-phone.md).
ANDROID_TOYBOX = "toybox 0.8.11-android"
_MKSH_VENDOR = re.compile(rb"(KSH_VERSION=@\(#\)MIRBSD KSH R\d+\w? \d{4}/\d{2}/\d{2})"
                          rb"( \+\w+)\x00")


def android_mksh(binary: str) -> str:
    """A copy of the host's mksh whose KSH_VERSION ends in " Android", as a phone's does
    (cached by the binary's hash); the host's own when its version string has no vendor
    suffix of the same length to take the place of."""
    data = Path(binary).read_bytes()
    match = _MKSH_VENDOR.search(data)
    suffix = b" Android"
    if match is None or len(match.group(2)) != len(suffix):
        return binary
    key = hashlib.sha256(data).hexdigest()[:16]
    target = cache_root() / "vphone" / key / "mksh"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        start = match.start(2)
        patched = data[:start] + suffix + data[start + len(suffix):]
        tmp = target.with_name(f"mksh.{os.getpid()}.part")
        tmp.write_bytes(patched)
        tmp.chmod(0o755)
        tmp.replace(target)
    return str(target)


def toybox_script(toybox: str) -> str:
    """``toybox``: Android's version line for ``--version``, the host's toybox otherwise."""
    return (f'#!/bin/sh\nif [ "$1" = --version ] && [ $# -eq 1 ]; then echo {ANDROID_TOYBOX!r}; '
            f'exit 0; fi\nexec {shlex.quote(toybox)} "$@"\n')


def resolve_userland(shell: str) -> Userland:
    """mksh (Android's shell) or dash (a kinder shell, for comparison), toybox, busybox."""
    if shell not in SHELLS:
        raise DeviceError(f"unknown phone shell '{shell}' (known: {', '.join(SHELLS)})")
    if shell == "mksh":
        binary = android_mksh(_need("mksh", "mksh", "Android's /system/bin/sh"))
    else:
        binary = _need("dash", "dash", "the kinder comparison shell")
    toybox = _need("toybox", "toybox", "Android's applets")
    busybox = _need("busybox", "busybox", f"stands in for toybox's {', '.join(SUBSTITUTES)}")
    applets = {name: toybox for name in toybox_applets(toybox)}
    applets["toybox"] = toybox
    for name in SUBSTITUTES:
        applets.setdefault(name, busybox)
    return Userland(shell=binary, applets=applets)


def install_userland(bin_dir: Path, userland: Userland, keep: set[str]) -> None:
    """Links in ``bin_dir`` for the shell and each applet; ``keep`` are the phone's own tools."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    wanted = {**userland.applets, "sh": userland.shell}
    for name, target in wanted.items():
        if name in keep:
            continue
        if name == "toybox":  # a script, not a link: it answers --version as Android's
            script, text = bin_dir / name, toybox_script(target)
            if script.is_symlink():
                script.unlink()
            if not script.is_file() or script.read_text() != text:
                script.write_text(text)
                script.chmod(0o755)
            continue
        link = bin_dir / name
        if link.is_symlink() and os.readlink(link) == target:
            continue
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to(target)
    for stale in bin_dir.iterdir():
        if stale.is_symlink() and stale.name not in wanted and stale.name not in keep:
            stale.unlink()


# Paths a kernel before 4.14 lacks (smaps_rollup arrived in 4.14).
NO_SMAPS_ROLLUP = ("/proc/*/smaps_rollup", "/proc/*/task/*/smaps_rollup")


def exec_env(root: Path, abi: str, unreadable: tuple[str, ...] = (), smaps_rollup: bool = True,
             affinity: str = "honoured", cgroup_procs: tuple[str, ...] = (),
             others_denied: bool = False) -> dict[str, str]:
    """Environment of the phone's shell that sets its exec rules and the shell user's limits:
    ``unreadable`` device-path globs (EACCES), no smaps_rollup (ENOENT), whether a phone
    binary's own affinity calls are ``ignored``, and the cgroups (their ``cgroup.procs`` files)
    the shell joins before it runs anything, whether other processes' memory maps and io are
    ``others_denied`` (see execshim.c)."""
    if abi not in ABI_MACHINES:
        raise DeviceError(f"virtual phones run {', '.join(ABI_MACHINES)}, not '{abi}'")
    if len("\n".join(unreadable)) >= 4000:  # the library keeps PATH_MAX bytes of them
        raise DeviceError("a virtual phone's unreadable globs must total under 4000 characters")
    qemu = ""
    if host_abi() != abi:
        native = host_abi()
        qemu = _need(ABI_QEMU[abi], "qemu-user", f"runs {abi} binaries on this host",
                     f", or start a phone of this host's ABI (--abi {native})" if native else "")
    return {
        "LD_PRELOAD": str(exec_shim()),
        "HARNESS_PHONE_ROOT": str(root.resolve()),
        "HARNESS_PHONE_MACHINE": str(ABI_MACHINES[abi]),
        "HARNESS_PHONE_QEMU": qemu,
        "HARNESS_PHONE_OOM_ADJ": str(ADBD_OOM_ADJ),
        "HARNESS_PHONE_EACCES": "\n".join(unreadable),
        "HARNESS_PHONE_ENOENT": "" if smaps_rollup else "\n".join(NO_SMAPS_ROLLUP),
        "HARNESS_PHONE_AFFINITY": affinity,
        "HARNESS_PHONE_CGROUPS": "\n".join(cgroup_procs),
        "HARNESS_PHONE_OTHERS": "denied" if others_denied else "",
    }
