"""`harness build import` of an official llama.cpp release archive (release_import.py)."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.artifacts.builds import Build, list_builds, load_manifest
from harness.artifacts.release_import import backends_of, elf_abi, release_tag
from harness.cli import main

TAG = "b10375"
# an ELF header up to e_machine: 64-bit, little-endian, ET_EXEC, EM_AARCH64 (183)
ARM64_ELF = b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + b"\x02\x00" + (183).to_bytes(2, "little")
# what the android job's build/bin holds (release.yml), with the backend modules of PR #29007
RELEASE_LIBS = ("libllama.so", "libggml.so", "libggml-base.so", "libmtmd.so",
                "libggml-cpu-android_armv8.0_1.so", "libggml-cpu-android_armv8.2_2.so",
                "libggml-opencl.so", "libggml-hexagon.so", "libggml-htp-v79.so")


def _release_folder(tmp_path: Path, bench: bytes | Path | None, libs: tuple[str, ...]) -> Path:
    """build/bin as the release job leaves it: tools, libraries, LICENSE."""
    folder = tmp_path / "build-bin"
    folder.mkdir()
    if isinstance(bench, Path):
        shutil.copy(bench, folder / "llama-bench")
    elif bench is not None:
        (folder / "llama-bench").write_bytes(bench + b"\x00" * 44)
    for tool in ("llama-cli", "llama-server"):
        (folder / tool).write_bytes(ARM64_ELF)
        (folder / tool).chmod(0o755)
    if (folder / "llama-bench").exists():
        (folder / "llama-bench").chmod(0o755)
    for lib in libs:
        (folder / lib).write_bytes(lib.encode())
    (folder / "LICENSE").write_text("MIT\n")
    return folder


def _tar(folder: Path, archive: Path, top: str) -> Path:
    """tar -czf ARCHIVE --transform "s,^\\.,TOP," -C FOLDER . (the workflow's pack step)."""
    with tarfile.open(archive, "w:gz") as t:
        t.add(folder, arcname=top)
    return archive


def _zip(folder: Path, archive: Path, top: str) -> Path:
    with zipfile.ZipFile(archive, "w") as z:
        for path in sorted(folder.iterdir()):
            info = zipfile.ZipInfo(f"{top}/{path.name}")
            info.external_attr = (path.stat().st_mode & 0o777) << 16
            z.writestr(info, path.read_bytes())
    return archive


def _import(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["build", "import", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize("pack, suffix", [(_tar, ".tar.gz"), (_zip, ".zip")])
def test_release_archive_becomes_a_build_with_tag_backends_and_abi(
    tmp_path: Path, pack: object, suffix: str
) -> None:
    folder = _release_folder(tmp_path, ARM64_ELF, RELEASE_LIBS)
    archive = pack(folder, tmp_path / f"llama-{TAG}-bin-android-arm64{suffix}",  # type: ignore[operator]
                   f"llama-{TAG}")
    root = tmp_path / "builds"
    code, output = _import(str(archive), "--builds", str(root), "--json")
    assert code == 0, output
    assert json.loads(output)["name"] == f"llama-{TAG}-android-arm64"
    manifest = load_manifest(root / f"llama-{TAG}-android-arm64")
    assert manifest.version == TAG
    assert manifest.abi == "arm64-v8a"
    assert manifest.backends == ("hexagon", "opencl")
    assert dict(manifest.env) == {"ADSP_LIBRARY_PATH": "{lib}"}
    assert manifest.source == archive.name
    paths = {f.path for f in manifest.files}
    # backend modules beside llama-bench, where ggml's loader looks; linked libraries in lib/
    assert {"bin/llama-bench", "bin/llama-cli", "bin/libggml-opencl.so",
            "bin/libggml-cpu-android_armv8.2_2.so", "lib/libllama.so",
            "lib/libggml-base.so"} <= paths
    assert not any(p.endswith("LICENSE") for p in paths)


def test_a_cpu_only_release_records_no_backend_and_named_build_wins(tmp_path: Path) -> None:
    libs = tuple(lib for lib in RELEASE_LIBS
                 if not lib.startswith(("libggml-opencl", "libggml-hexagon", "libggml-htp")))
    folder = _release_folder(tmp_path, ARM64_ELF, libs)
    archive = _tar(folder, tmp_path / f"llama-{TAG}-bin-android-arm64.tar.gz", f"llama-{TAG}")
    code, output = _import(str(archive), "--name", "cpu-only", "--builds", str(tmp_path / "b"))
    assert code == 0, output
    manifest = load_manifest(tmp_path / "b" / "cpu-only")
    assert manifest.backends == () and manifest.env == ()


@pytest.mark.parametrize("case", ["no-bench", "not-an-archive", "traversal", "no-name",
                                  "folder-no-name"])
def test_bad_release_archives_are_one_line_exit_2_and_nothing_half_made(
    tmp_path: Path, case: str
) -> None:
    archive = tmp_path / f"llama-{TAG}-bin-android-arm64.tar.gz"
    if case == "no-bench":
        _tar(_release_folder(tmp_path, None, RELEASE_LIBS), archive, f"llama-{TAG}")
        expected = "no llama-bench"
    elif case == "not-an-archive":
        archive.write_bytes(b"this is not gzip")
        expected = "cannot be unpacked"
    elif case == "traversal":
        with tarfile.open(archive, "w:gz") as t:
            data = ARM64_ELF + b"\x00" * 44
            info = tarfile.TarInfo("../../llama-bench")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        expected = "leaves the archive's folder"
    elif case == "no-name":
        archive = _tar(_release_folder(tmp_path, ARM64_ELF, RELEASE_LIBS),
                       tmp_path / "my-build.tar.gz", f"llama-{TAG}")
        expected = "--name"
    else:
        archive = _release_folder(tmp_path, ARM64_ELF, RELEASE_LIBS)
        expected = "--name NAME"
    root = tmp_path / "builds"
    code, output = _import(str(archive), "--builds", str(root))
    assert code == 2
    assert expected in output
    assert len(output.strip().splitlines()) == 1 and "Traceback" not in output
    assert not (tmp_path.parent / "llama-bench").exists()
    assert not root.exists() or (list(root.iterdir()) == [] and list_builds(root) == [])


def test_release_tag_elf_abi_and_backends_from_names() -> None:
    assert release_tag(f"llama-{TAG}-bin-ubuntu-vulkan-x64.tar.gz", None) == TAG
    assert release_tag("renamed.tar.gz", f"llama-{TAG}") == TAG
    assert release_tag("renamed.tar.gz", "bin") is None
    assert elf_abi(ARM64_ELF) == "arm64-v8a"
    assert elf_abi(b"#!/bin/sh\n" + b"\x00" * 20) is None
    assert backends_of(["libggml-vulkan.so", "libggml-cpu-haswell.so", "libggml-base.so"]) == (
        "vulkan",)


def test_imported_host_release_runs_list_devices(tmp_path: Path, host_build: Build) -> None:
    """A release archive laid out as llama.cpp packs it, around a llama-bench built here."""
    bench = host_build.path / "bin" / "llama-bench"
    folder = _release_folder(tmp_path, bench, ())
    for lib in (bench.parent.parent / "lib").glob("*.so*"):
        shutil.copy(lib, folder / lib.name)
    archive = _tar(folder, tmp_path / f"llama-{TAG}-bin-ubuntu-x64.tar.gz", f"llama-{TAG}")
    code, output = _import(str(archive), "--builds", str(tmp_path / "b"))
    assert code == 0, output
    built = tmp_path / "b" / f"llama-{TAG}-ubuntu-x64"
    assert load_manifest(built).abi == "x86_64"
    result = subprocess.run(
        [str(built / "bin" / "llama-bench"), "--list-devices"], capture_output=True, text=True,
        timeout=60, env={**os.environ, "LD_LIBRARY_PATH": str(built / "lib")}, check=False)
    assert result.returncode == 0, result.stderr
    assert "Available devices" in result.stdout + result.stderr
