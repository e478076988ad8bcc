"""Small native tools the harness pushes to phones, compiled here per ABI and cached by content.

Cold and warm model loads need, on an unrooted phone, how much of a file is in the page cache,
a way to evict it and a way to warm it; stock Android has no tool for the first two. ``pagecache``
(``pagecache.c`` beside this file) does all three; ``ensure_pagecache`` compiles it once per
(source, ABI, compiler) into ``<cache root>/devicetools/<key>/pagecache``.

Compilers, and why:
- The host's ABI: the host ``cc -static``. A static glibc binary runs on any Linux kernel of the
  architecture, an x86_64 Android emulator's included, and on the virtual phone.
- ``arm64-v8a`` with an NDK (``ndk`` or ``$ANDROID_NDK``): the NDK's clang with
  ``--target=aarch64-linux-android24``, linked dynamically against bionic. ``libc.so`` is part of
  Android's stable platform ABI on every phone from API 24 (Android 7) on, PIE is the default for
  Android targets, and the product carries no libc of its own; ``-static`` against the NDK's
  ``libc.a`` is possible but buys nothing for a program that needs only libc. Such a build is for
  real phones: a virtual arm64 phone has no ``/system/bin/linker64`` to start it (it runs the
  next build under qemu).
- ``arm64-v8a`` without an NDK: Debian's ``aarch64-linux-gnu-gcc -static``, the same static-glibc
  reasoning as the host build; it runs on a phone's kernel and under ``qemu-aarch64`` here.
The product's ELF machine is checked against the ABI before it is cached.

``pagecache_command`` and ``parse_residency`` are the pure halves of using it on a device. The
kernel shows a file's residency only to its owner or a user who may write it (anyone else is told
every page is resident): the tool reports such a file as an error rather than a line.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from harness.artifacts.cmake_build import NDK_TOOLCHAIN
from harness.artifacts.ladder import atomic_output, default_cache_root, exclusive
from harness.errors import BuildError
from harness.virtual.userland import ABI_MACHINES, host_abi

__all__ = [
    "ACTIONS",
    "PAGECACHE_SOURCE",
    "Compiler",
    "Residency",
    "cache_key",
    "elf_machine",
    "ensure_pagecache",
    "find_compiler",
    "pagecache_command",
    "parse_residency",
]

PAGECACHE_SOURCE = Path(__file__).with_name("pagecache.c")
ACTIONS = ("resident", "evict", "warm")
ANDROID_API = 24  # the oldest Android (7.0) the NDK build runs on
# Only arm64 goes through the NDK: x86_64 phones are emulators and virtual phones, which run the
# static host build (a virtual phone has no bionic linker for a dynamic NDK binary).
NDK_TARGETS = {"arm64-v8a": "aarch64-linux-android"}
# Debian's cross compilers (C only) and the package holding the target's static libc.
CROSS = {
    "arm64-v8a": ("aarch64-linux-gnu", "gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross"),
    "x86_64": ("x86_64-linux-gnu", "gcc-x86-64-linux-gnu", "libc6-dev-amd64-cross"),
}
COMMON_FLAGS = ("-std=c99", "-O2", "-Wall", "-Wextra", "-s")
COMPILE_TIMEOUT_S = 300

_LINE = re.compile(r"^(\d+) (\d+) (.+)$")


@dataclass(frozen=True)
class Compiler:
    """How to compile for one ABI: the compiler, its flags, and what a missing libc needs."""

    path: str
    flags: tuple[str, ...]  # every flag but -o and the source
    libc_hint: str  # what to install when the link cannot find libc


def _need(program: str, abi: str, package: str) -> str:
    found = shutil.which(program)
    if found is None:
        ndk = " or pass an Android NDK (--ndk PATH or $ANDROID_NDK)" if abi in NDK_TARGETS else ""
        raise BuildError(f"pagecache for {abi} needs {program}, which is not on PATH: "
                         f"install {package} (apt-get install {package}){ndk}")
    return found


def ndk_clang(ndk: Path) -> Path:
    """The NDK's clang for this host (``toolchains/llvm/prebuilt/<os>-<arch>/bin/clang``)."""
    if not (ndk / NDK_TOOLCHAIN).is_file():
        raise BuildError(f"{ndk}: not an Android NDK (no {NDK_TOOLCHAIN}); check --ndk")
    found = sorted((ndk / "toolchains" / "llvm" / "prebuilt").glob("*/bin/clang"))
    # macOS NDKs name their one prebuilt folder darwin-x86_64, Apple silicon included
    mine = [path for path in found if path.parent.parent.name.startswith(platform.system().lower())]
    if not (mine or found):
        raise BuildError(f"{ndk}: no toolchains/llvm/prebuilt/*/bin/clang; is the NDK complete?")
    return (mine or found)[0]


def find_compiler(abi: str, ndk: Path | None = None) -> Compiler:
    """The compiler for ``abi``: the NDK's clang, the host's cc, or Debian's cross gcc.

    A missing compiler is a one-line BuildError naming the package to install.
    """
    if abi not in ABI_MACHINES:
        raise BuildError(f"no pagecache for ABI {abi!r}; known: {', '.join(ABI_MACHINES)}")
    if ndk is not None and abi in NDK_TARGETS:
        target = f"--target={NDK_TARGETS[abi]}{ANDROID_API}"
        return Compiler(str(ndk_clang(ndk)), (target, *COMMON_FLAGS), "a complete Android NDK")
    if abi == host_abi():
        compiler = shutil.which("cc") or _need("gcc", abi, "gcc")
        return Compiler(compiler, (*COMMON_FLAGS, "-static"), "libc6-dev")
    triple, package, libc = CROSS[abi]
    return Compiler(_need(f"{triple}-gcc", abi, package), (*COMMON_FLAGS, "-static"), libc)


@lru_cache(maxsize=16)
def compiler_identity(path: str) -> str:
    """The first line of ``<compiler> --version``: what the cache key knows of the compiler."""
    try:
        result = subprocess.run([path, "--version"], capture_output=True, text=True,
                                timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise BuildError(f"{path} --version failed: {error}") from error
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise BuildError(f"{path} --version failed (exit {result.returncode}); is it a compiler?")
    return lines[0]


def cache_key(source: bytes, abi: str, identity: str, flags: Sequence[str]) -> str:
    """Content key of one product: the source's bytes, the ABI, the compiler and its flags.

    Where the compiler or the cache lives does not enter it.
    """
    text = json.dumps([hashlib.sha256(source).hexdigest(), abi, identity, list(flags)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def elf_machine(path: Path) -> int | None:
    """``e_machine`` of an ELF file (62 x86_64, 183 aarch64), or None when it is not ELF."""
    with open(path, "rb") as handle:
        header = handle.read(20)
    if len(header) < 20 or header[:4] != b"\x7fELF" or header[5] not in (1, 2):
        return None
    return int.from_bytes(header[18:20], "little" if header[5] == 1 else "big")


def ensure_pagecache(abi: str, cache_dir: Path | None = None, ndk: Path | None = None) -> Path:
    """The ``pagecache`` tool for ``abi``, compiled on first use and cached by content.

    ``cache_dir`` replaces the cache root ($HARNESS_CACHE or ~/.cache/harness); ``ndk`` (else
    ``$ANDROID_NDK``) selects the NDK's clang for an Android ABI.
    """
    if ndk is None and os.environ.get("ANDROID_NDK"):
        ndk = Path(os.environ["ANDROID_NDK"])
    compiler = find_compiler(abi, ndk)
    source = PAGECACHE_SOURCE.read_bytes()
    key = cache_key(source, abi, compiler_identity(compiler.path), compiler.flags)
    root = cache_dir if cache_dir is not None else default_cache_root()
    target = root / "devicetools" / key / "pagecache"
    if target.is_file():
        return target
    with exclusive(target.parent):
        if target.is_file():  # another process made it while this one waited
            return target
        # Holding the lock, no one else is writing here: temporaries are from a killed run.
        for stale in target.parent.glob(f".{target.name}.tmp-*"):
            stale.unlink()
        with atomic_output(target) as tmp:
            _compile(compiler, abi, tmp)
            tmp.chmod(0o755)
    return target


def _compile(compiler: Compiler, abi: str, out: Path) -> None:
    argv = [compiler.path, *compiler.flags, "-o", str(out), str(PAGECACHE_SOURCE)]
    try:
        result = subprocess.run(argv, capture_output=True, text=True,
                                timeout=COMPILE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise BuildError(f"compiling pagecache for {abi}: {error}") from error
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-5:])
        hint = f" (install {compiler.libc_hint})" if "cannot find -lc" in result.stderr else ""
        raise BuildError(f"compiling pagecache for {abi} failed (exit {result.returncode})"
                         f"{hint}: {shlex.join(argv)}\n{tail}")
    machine = elf_machine(out)
    if machine != ABI_MACHINES[abi]:
        raise BuildError(f"{compiler.path} made a binary for ELF machine {machine}, not {abi} "
                         f"({ABI_MACHINES[abi]}); is it the right compiler?")


# --- using it on a device ----------------------------------------------------------------------


@dataclass(frozen=True)
class Residency:
    """How much of one file the page cache held when the tool looked."""

    path: str
    resident_bytes: int
    file_bytes: int

    def __post_init__(self) -> None:
        if not 0 <= self.resident_bytes <= self.file_bytes:
            raise ValueError(f"{self.path}: resident {self.resident_bytes} bytes is outside "
                             f"0..{self.file_bytes}")

    @property
    def fraction(self) -> float:
        """Resident share of the file; an empty file has nothing to load, so counts as 1.0."""
        return self.resident_bytes / self.file_bytes if self.file_bytes else 1.0


def parse_residency(text: str) -> list[Residency]:
    """The ``<resident> <size> <path>`` lines of pagecache's output, in order.

    Anything else (a shell's warnings, the tool's own errors if both streams were merged, a
    line whose figures cannot be a residency) is skipped. CRLF line ends (an old adb's pty) are
    accepted.
    """
    found = []
    for line in text.split("\n"):
        match = _LINE.match(line.removesuffix("\r"))
        if match is None:
            continue
        resident, size = int(match.group(1)), int(match.group(2))
        if resident <= size:
            found.append(Residency(match.group(3), resident, size))
    return found


def pagecache_command(tool_path: str, action: str, files: Sequence[str]) -> str:
    """The device shell line running ``pagecache ACTION FILE...``, every word quoted (mksh-safe)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown pagecache action {action!r}; use one of {', '.join(ACTIONS)}")
    if isinstance(files, str) or not files:
        raise ValueError("pagecache needs a sequence of one or more files")
    return " ".join(shlex.quote(word) for word in (tool_path, action, *files))
