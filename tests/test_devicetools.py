"""The pagecache tool: built per ABI and cached by content, and it tells page-cache residency.

Residency tests run the tool on files of this host's disk (tmp_path): eviction is only observable
on a block-device file system, so they skip on tmpfs, where the pages are the file. arm64 builds
need Debian's aarch64 cross compiler and run under qemu-aarch64; the last tests push the tools to
virtual phones and run them through the phone's mksh, as the harness will on a phone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures_phones import PhoneFactory, VirtualPhone

from harness.artifacts import devicetools
from harness.artifacts.devicetools import (
    PAGECACHE_SOURCE,
    Residency,
    cache_key,
    elf_machine,
    ensure_pagecache,
    find_compiler,
    pagecache_command,
    parse_residency,
)
from harness.device.adb import AdbDevice
from harness.errors import BuildError
from harness.virtual.userland import ABI_MACHINES, host_abi

HOST = host_abi() or "unknown"
CROSS_GCC = shutil.which("aarch64-linux-gnu-gcc")
QEMU = shutil.which("qemu-aarch64")
PAGE = os.sysconf("SC_PAGESIZE")
WINDOW = 64 << 20  # pagecache.c maps files in windows of this size

needs_host = pytest.mark.skipif(host_abi() is None or shutil.which("cc") is None,
                                reason="needs a C compiler for a host ABI a phone can have")
needs_cross = pytest.mark.skipif(CROSS_GCC is None,
                                 reason="needs aarch64-linux-gnu-gcc (gcc-aarch64-linux-gnu)")


def _run(tool: Path | str, action: str, *files: Path | str,
         prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, str(tool), action, *map(str, files)],
                          capture_output=True, text=True, timeout=120, check=False)


def _residency(tool: Path, action: str, path: Path, prefix: tuple[str, ...] = ()) -> Residency:
    result = _run(tool, action, path, prefix=prefix)
    assert result.returncode == 0, result.stderr
    (found,) = parse_residency(result.stdout)
    assert found.path == str(path)
    return found


def _fs_type(path: Path) -> str:
    """The type of the file system holding ``path`` (longest mount point that contains it)."""
    best, kind = "", "unknown"
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        point = fields[1].replace("\\040", " ")
        inside = str(path).startswith(point.rstrip("/") + "/") or str(path) == point
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


def _random_file(path: Path, size: int) -> Path:
    path.write_bytes(os.urandom(size))
    return path


@pytest.fixture(scope="module")
def host_tool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if host_abi() is None or shutil.which("cc") is None:
        pytest.skip("needs a C compiler for a host ABI a phone can have")
    return ensure_pagecache(HOST, cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def arm64_tool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if CROSS_GCC is None:
        pytest.skip("needs aarch64-linux-gnu-gcc (apt-get install gcc-aarch64-linux-gnu)")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("ANDROID_NDK", raising=False)  # Debian's cross gcc, not an NDK
        return ensure_pagecache("arm64-v8a", cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.fixture
def disk_dir(tmp_path: Path) -> Path:
    """tmp_path, when evicting pages there is observable (not tmpfs or ramfs)."""
    kind = _fs_type(tmp_path.resolve())
    if kind in ("tmpfs", "ramfs"):
        pytest.skip(f"{tmp_path} is on {kind}: its pages are the file, eviction is unobservable")
    return tmp_path


@pytest.fixture
def no_ndk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANDROID_NDK", raising=False)


# --- parsing and command lines (pure) ----------------------------------------------------------


def test_parse_residency_reads_lines_and_skips_junk() -> None:
    text = ("WARNING: linker: something\r\n"
            "4096 10001 /data/local/tmp/a.gguf\r\n"
            "pagecache: /x: No such file or directory\n"
            "0 0 /data/local/tmp/empty\n"
            "12 34\n"  # no path
            "99 10 /bigger-than-the-file\n"
            "-1 10 /negative\n"
            "10 20 /data/local/tmp/with two  spaces \n"
            "\n")
    assert parse_residency(text) == [
        Residency("/data/local/tmp/a.gguf", 4096, 10001),
        Residency("/data/local/tmp/empty", 0, 0),
        Residency("/data/local/tmp/with two  spaces ", 10, 20),
    ]
    assert parse_residency("") == []


def test_residency_fraction_and_validation() -> None:
    assert Residency("a", 25, 100).fraction == 0.25
    assert Residency("a", 0, 0).fraction == 1.0  # nothing to load: as warm as it gets
    with pytest.raises(ValueError, match="outside"):
        Residency("a", 101, 100)
    with pytest.raises(ValueError, match="outside"):
        Residency("a", -1, 100)


def test_pagecache_command_quotes_every_word() -> None:
    line = pagecache_command("/data/local/tmp/harness/pagecache", "evict",
                             ["/sdcard/my model.gguf", "it's", "$HOME", "plain.gguf"])
    assert line == ("/data/local/tmp/harness/pagecache evict '/sdcard/my model.gguf' "
                    "'it'\"'\"'s' '$HOME' plain.gguf")


def test_pagecache_command_refuses_unknown_actions_and_no_files() -> None:
    with pytest.raises(ValueError, match="unknown pagecache action"):
        pagecache_command("pagecache", "drop", ["a"])
    with pytest.raises(ValueError, match="one or more files"):
        pagecache_command("pagecache", "warm", [])
    with pytest.raises(ValueError, match="one or more files"):
        pagecache_command("pagecache", "warm", "a.gguf")  # a str is not a list of files


# --- compilers and the cache key --------------------------------------------------------------


def test_cache_key_changes_with_source_abi_compiler_and_flags() -> None:
    base = cache_key(b"int main;", "x86_64", "cc 12", ["-O2"])
    assert base == cache_key(b"int main;", "x86_64", "cc 12", ["-O2"])
    others = {
        cache_key(b"int main ;", "x86_64", "cc 12", ["-O2"]),
        cache_key(b"int main;", "arm64-v8a", "cc 12", ["-O2"]),
        cache_key(b"int main;", "x86_64", "cc 13", ["-O2"]),
        cache_key(b"int main;", "x86_64", "cc 12", ["-O1"]),
    }
    assert base not in others and len(others) == 4


def test_unknown_abi_is_a_build_error() -> None:
    with pytest.raises(BuildError, match="no pagecache for ABI 'mips'"):
        find_compiler("mips")


def test_missing_cross_compiler_names_the_package(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path, no_ndk: None) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    foreign = "arm64-v8a" if HOST != "arm64-v8a" else "x86_64"
    with pytest.raises(BuildError) as caught:
        ensure_pagecache(foreign, cache_dir=tmp_path / "cache")
    message = str(caught.value)
    assert "\n" not in message
    package = devicetools.CROSS[foreign][1]
    assert f"apt-get install {package}" in message
    assert not (tmp_path / "cache").exists()


def test_a_folder_that_is_not_an_ndk_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="not an Android NDK"):
        find_compiler("arm64-v8a", ndk=tmp_path)


def _fake_ndk(root: Path, compiler: str) -> Path:
    """An NDK layout whose clang records its arguments and compiles with ``compiler``."""
    (root / "build" / "cmake").mkdir(parents=True)
    (root / "build" / "cmake" / "android.toolchain.cmake").write_text("# fake\n")
    clang = root / "toolchains" / "llvm" / "prebuilt" / "linux-x86_64" / "bin" / "clang"
    clang.parent.mkdir(parents=True)
    clang.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{root}/argv"\n'
        'if [ "$1" = --version ]; then echo "Android clang version 0 (fake)"; exit 0; fi\n'
        'shift\n'  # --target=...: the stand-in compiler knows its target
        f'exec {compiler} -static "$@"\n')
    clang.chmod(0o755)
    return root


@needs_cross
def test_ndk_clang_is_used_for_arm64_with_the_android_target(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ndk = _fake_ndk(tmp_path / "ndk", str(CROSS_GCC))
    monkeypatch.setenv("ANDROID_NDK", str(ndk))  # taken when no ndk is passed
    tool = ensure_pagecache("arm64-v8a", cache_dir=tmp_path / "cache")
    argv = (ndk / "argv").read_text()
    assert "--target=aarch64-linux-android24 -std=c99 -O2" in argv
    assert "-static" not in argv  # bionic builds link libc.so, present on every phone
    assert elf_machine(tool) == ABI_MACHINES["arm64-v8a"]
    # another compiler is another key: the cross build does not reuse the NDK's product
    monkeypatch.delenv("ANDROID_NDK")
    assert ensure_pagecache("arm64-v8a", cache_dir=tmp_path / "cache").parent != tool.parent


@needs_host
def test_a_product_for_the_wrong_machine_is_refused_and_not_cached(tmp_path: Path) -> None:
    ndk = _fake_ndk(tmp_path / "ndk", str(shutil.which("cc")))  # makes host binaries
    if HOST == "arm64-v8a":
        pytest.skip("the host compiler makes arm64 binaries here")
    with pytest.raises(BuildError, match=r"ELF machine 62, not arm64-v8a \(183\)"):
        ensure_pagecache("arm64-v8a", cache_dir=tmp_path / "cache", ndk=ndk)
    assert not [path for path in (tmp_path / "cache").rglob("*") if path.name != ".lock"
                and path.is_file()]


def test_elf_machine_of_a_non_elf_file_is_none(tmp_path: Path) -> None:
    assert elf_machine(_random_file(tmp_path / "x", 3)) is None
    (tmp_path / "script").write_text("#!/bin/sh\necho hi\n")
    assert elf_machine(tmp_path / "script") is None


@pytest.mark.parametrize("compiler", ["cc", "aarch64-linux-gnu-gcc"])
def test_the_source_is_warning_free_c99(compiler: str, tmp_path: Path) -> None:
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed")
    result = subprocess.run(
        [compiler, "-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-O2", "-c",
         "-o", str(tmp_path / "pagecache.o"), str(PAGECACHE_SOURCE)],
        capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


# --- the host build ---------------------------------------------------------------------------


@needs_host
def test_host_build_is_cached_by_content(tmp_path: Path, no_ndk: None,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    tool = ensure_pagecache(HOST)
    assert tool.parent.parent == tmp_path / "cache" / "devicetools"
    assert tool.name == "pagecache" and os.access(tool, os.X_OK)
    assert elf_machine(tool) == ABI_MACHINES[HOST]
    made = tool.stat().st_mtime_ns

    def no_compiling(*args: object, **kwargs: object) -> None:
        raise AssertionError("compiled again")

    monkeypatch.setattr(devicetools, "_compile", no_compiling)
    assert ensure_pagecache(HOST) == tool
    assert tool.stat().st_mtime_ns == made
    assert {path.name for path in tool.parent.iterdir()} == {"pagecache", ".lock"}


@needs_host
def test_compile_errors_are_build_errors_with_the_compilers_words(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "pagecache.c"
    broken.write_text("int main(void) { return missing; }\n")
    monkeypatch.setattr(devicetools, "PAGECACHE_SOURCE", broken)
    with pytest.raises(BuildError, match=r"compiling pagecache for .* failed") as caught:
        ensure_pagecache(HOST, cache_dir=tmp_path / "cache")
    assert "missing" in str(caught.value)
    assert not list((tmp_path / "cache").rglob("pagecache"))


def test_host_tool_is_static(host_tool: Path) -> None:
    """A static binary runs on any kernel of the ABI: a phone, an emulator, a virtual phone."""
    header = host_tool.read_bytes()
    assert b"/lib64/ld-linux" not in header and b"/lib/ld-linux" not in header


def _warmed(found: Residency, size: int) -> bool:
    """Warm read the whole file in: all of it is resident, bar what the kernel reclaimed before
    the count. A machine short of memory, or a test run in a memory cgroup at its limit (CI seen
    here: 659 pages of a 128 MiB file gone between the read and mincore), reclaims some of a file
    just read; the tool reports what is resident, so the test allows that, up to a tenth. A warm
    that stopped early, or counted a window twice, is still caught: the residency's page counting
    is held exactly by the tests that read single pages."""
    return found.file_bytes == size and 0.9 * size <= found.resident_bytes <= size


def test_warm_then_evict_moves_the_file_in_and_out(host_tool: Path, disk_dir: Path) -> None:
    path = _random_file(disk_dir / "model.gguf", 8 << 20)
    warm = _residency(host_tool, "warm", path)
    assert warm.path == str(path) and _warmed(warm, 8 << 20), warm
    assert _warmed(_residency(host_tool, "resident", path), 8 << 20)
    evicted = _residency(host_tool, "evict", path)
    assert evicted.resident_bytes == 0, "a freshly written file's dirty pages stayed cached"
    assert _residency(host_tool, "resident", path).fraction == 0.0


def test_residency_counts_every_window_and_the_last_partial_page(
        host_tool: Path, disk_dir: Path) -> None:
    """A sparse file past two 64 MiB windows: one page read in each window is counted, the last
    page by the bytes of the file it holds (readahead is off for the reads)."""
    path = disk_dir / "sparse.gguf"
    size = 2 * WINDOW + 5 * PAGE + 123
    with open(path, "wb") as handle:
        handle.truncate(size)
    assert _residency(host_tool, "evict", path).resident_bytes == 0
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        for offset in (0, WINDOW + 2 * PAGE, size - 1):
            os.pread(fd, 1, offset)
    finally:
        os.close(fd)
    assert _residency(host_tool, "resident", path).resident_bytes == 2 * PAGE + 123
    assert _warmed(_residency(host_tool, "warm", path), size)
    assert _residency(host_tool, "evict", path).resident_bytes == 0


def test_empty_file_and_several_files(host_tool: Path, disk_dir: Path) -> None:
    empty = disk_dir / "empty"
    empty.touch()
    odd = _random_file(disk_dir / "odd name.bin", 10001)
    result = _run(host_tool, "warm", empty, odd)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout == f"0 0 {empty}\n10001 10001 {odd}\n"


def test_failures_are_reported_per_file_and_the_rest_processed(
        host_tool: Path, tmp_path: Path) -> None:
    good = _random_file(tmp_path / "good", 100)
    result = _run(host_tool, "resident", tmp_path / "absent", tmp_path, good)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"pagecache: {tmp_path / 'absent'}: No such file or directory",
        f"pagecache: {tmp_path}: Is a directory",
    ]
    assert [r.path for r in parse_residency(result.stdout)] == [str(good)]


@pytest.mark.parametrize("argv", [[], ["resident"], ["drop", "x"]])
def test_bad_usage_exits_2_with_the_usage_line(host_tool: Path, argv: list[str]) -> None:
    result = subprocess.run([str(host_tool), *argv], capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == "usage: pagecache resident|evict|warm FILE...\n"


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder another user can reach (pytest's tmp_path is private to this one)."""
    with tempfile.TemporaryDirectory(prefix="pagecache-") as name:
        os.chmod(name, 0o755)
        yield Path(name)


def test_another_users_unwritable_file_is_an_error_not_a_lie(
        host_tool: Path, shared_dir: Path) -> None:
    """The kernel says every page is resident to a user who may not write the file; the tool
    refuses to print that, but the eviction itself still works for such a user."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to run the tool as another user")
    if _fs_type(shared_dir) in ("tmpfs", "ramfs"):
        pytest.skip(f"{shared_dir} is on tmpfs: eviction is unobservable")
    tool = Path(shutil.copy(host_tool, shared_dir / "pagecache"))
    path = _random_file(shared_dir / "model.gguf", 1 << 20)
    path.chmod(0o644)
    nobody = (setpriv, "--reuid=65534", "--regid=65534", "--clear-groups")
    assert _warmed(_residency(tool, "warm", path), 1 << 20)
    result = _run(tool, "evict", path, prefix=nobody)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(f"pagecache: {path}: residency hidden")
    assert _residency(tool, "resident", path).resident_bytes == 0  # evicted all the same
    os.chown(path, 65534, 65534)  # their own file: the truth
    assert _warmed(_residency(tool, "warm", path, prefix=nobody), 1 << 20)


def test_command_line_runs_under_mksh_with_awkward_names(host_tool: Path, disk_dir: Path) -> None:
    mksh = shutil.which("mksh")
    if mksh is None:
        pytest.skip("needs mksh (apt-get install mksh), Android's shell")
    names = [disk_dir / "my model.gguf", disk_dir / "it's", disk_dir / "$HOME;x"]
    for name in names:
        _random_file(name, 5000)
    line = pagecache_command(str(host_tool), "warm", [str(name) for name in names])
    result = subprocess.run([mksh, "-c", line], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert parse_residency(result.stdout) == [Residency(str(n), 5000, 5000) for n in names]


# --- arm64 ------------------------------------------------------------------------------------


def test_arm64_build_is_an_aarch64_elf(arm64_tool: Path) -> None:
    assert elf_machine(arm64_tool) == 183


def test_arm64_tool_runs_under_qemu(arm64_tool: Path, disk_dir: Path) -> None:
    if QEMU is None:
        pytest.skip("needs qemu-aarch64 (apt-get install qemu-user) to run arm64 binaries")
    path = _random_file(disk_dir / "model.gguf", 3 << 20)
    qemu = (QEMU,)
    assert _warmed(_residency(arm64_tool, "warm", path, qemu), 3 << 20)
    assert _residency(arm64_tool, "evict", path, qemu).resident_bytes == 0
    assert _residency(arm64_tool, "resident", path, qemu).resident_bytes == 0


# --- on virtual phones -------------------------------------------------------------------------


def _on_phone(phone: VirtualPhone, tool: Path, scratch: Path) -> tuple[AdbDevice, Path]:
    """Push the tool and a 2 MiB file with a space in its name; (device, file on the host)."""
    device = AdbDevice(phone.serial)
    device.push(tool, "/data/local/tmp/pagecache")
    local = _random_file(scratch / "model file.gguf", 2 << 20)
    device.push(local, "/data/local/tmp/model file.gguf")
    return device, phone.root / "data" / "local" / "tmp" / "model file.gguf"


def _phone_residency(device: AdbDevice, action: str) -> Residency:
    line = pagecache_command("/data/local/tmp/pagecache", action,
                             ["/data/local/tmp/model file.gguf"])
    result = device.shell(line, timeout=60)
    assert result.ok, result.stderr
    (found,) = parse_residency(result.stdout)
    # the virtual phone rewrites device paths to its sandbox before its shell sees the line
    assert found.path.endswith("/data/local/tmp/model file.gguf"), found.path
    return found


def test_tool_runs_on_a_virtual_phone_through_its_shell(
        host_tool: Path, virtual_phones: PhoneFactory, tmp_path: Path) -> None:
    (phone,) = virtual_phones(abi=HOST)
    device, stored = _on_phone(phone, host_tool, tmp_path)
    if _fs_type(stored.resolve()) in ("tmpfs", "ramfs"):
        pytest.skip("the phone's storage is on tmpfs: eviction is unobservable")
    assert _warmed(_phone_residency(device, "warm"), 2 << 20)
    assert _phone_residency(device, "evict").resident_bytes == 0
    resident = _phone_residency(device, "resident")
    assert (resident.resident_bytes, resident.file_bytes) == (0, 2 << 20)


@needs_cross
def test_arm64_tool_runs_on_an_arm64_virtual_phone(
        arm64_tool: Path, virtual_phones: PhoneFactory, tmp_path: Path) -> None:
    if QEMU is None:
        pytest.skip("an arm64 virtual phone needs qemu-aarch64 (apt-get install qemu-user)")
    (phone,) = virtual_phones(abi="arm64-v8a")
    device, _ = _on_phone(phone, arm64_tool, tmp_path)
    assert _warmed(_phone_residency(device, "warm"), 2 << 20)
    assert _phone_residency(device, "evict").resident_bytes == 0

