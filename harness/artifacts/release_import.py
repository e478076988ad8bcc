"""Import an official llama.cpp release archive (``harness build import llama-b10375-...tar.gz``).

What the archive looks like is read from llama.cpp's release workflow,
``.github/workflows/release.yml`` of ggml-org/llama.cpp at commit
002efcd4e56d7e23bf53fb472a15bdb493f223d1 (job ``android-arm64``; the ubuntu jobs pack the same
way):

* the name is ``llama-<tag>-bin-<platform>.tar.gz`` (``<platform>`` e.g. ``android-arm64``,
  ``ubuntu-x64``; Windows jobs publish ``.zip``), ``<tag>`` the release tag (``b10375``);
* inside, cmake's ``build/bin`` folder under one top folder ``llama-<tag>/``
  (``tar --transform "s,^\\.,llama-<tag>,"``): the tools (``llama-bench``, ...), their shared
  libraries (``libllama.so``, ``libggml-base.so``, ...) and, as the job builds with
  ``-DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON``, one loadable module per backend
  (``libggml-cpu-android_armv8.2_2.so``, ...), plus ``LICENSE``.

The backend modules are named by ``ggml_add_backend_library(ggml-<backend> ...)`` in each
``ggml/src/ggml-<backend>/CMakeLists.txt`` (``libggml-opencl.so``, ``libggml-hexagon.so``,
``libggml-vulkan.so``), and with ``GGML_BACKEND_DL`` they are written beside the executables
(``ggml/src/CMakeLists.txt``), where ggml's loader looks for them; so they stay in ``bin/`` next to
llama-bench here, and the other libraries go to ``lib/``.

Assumption, stated: the stored snapshot's android job builds the CPU backend only; the change that
adds the Adreno OpenCL and Hexagon backends to it (llama.cpp PR #29007) is not in it. This module
assumes that change keeps the archive name and the one-folder layout and adds the backends'
modules under the names above; a backend is recorded only when its module is in the archive.
"""

from __future__ import annotations

import re
import tarfile
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from harness.artifacts.builds import Build, _is_library, write_build
from harness.artifacts.cmake_build import BACKEND_ENV
from harness.errors import BuildError

ARCHIVE_NAME = re.compile(
    r"^llama-(?P<tag>[A-Za-z0-9._-]+?)-bin-(?P<platform>[A-Za-z0-9._-]+?)\.(?:tar\.gz|tgz|zip)$")
TOP_FOLDER = re.compile(r"^llama-(?P<tag>[A-Za-z0-9._-]+)$")
# backend module (ggml_add_backend_library name) -> the manifest's backend name
BACKEND_MODULES = {"ggml-opencl": "opencl", "ggml-hexagon": "hexagon", "ggml-vulkan": "vulkan"}
# libraries every ggml build links (not loadable backend modules)
_LINKED = {"libggml.so", "libggml-base.so"}
# ELF e_machine -> the ABI name builds use
ELF_ABIS = {183: "arm64-v8a", 62: "x86_64"}
USAGE = ("expected an official llama.cpp release archive, llama-<tag>-bin-<platform>.tar.gz or "
         ".zip, holding llama-<tag>/llama-bench")


def is_archive(path: Path) -> bool:
    return path.is_file() and path.name.endswith((".tar.gz", ".tgz", ".zip"))


def release_tag(archive_name: str, top_folder: str | None) -> str | None:
    """The release tag from the archive's name, else from its top folder ``llama-<tag>``."""
    found = ARCHIVE_NAME.match(archive_name)
    if found:
        return found["tag"]
    top = TOP_FOLDER.match(top_folder or "")
    return top["tag"] if top else None


def default_name(archive_name: str) -> str:
    """``llama-b10375-android-arm64`` for ``llama-b10375-bin-android-arm64.tar.gz``."""
    found = ARCHIVE_NAME.match(archive_name)
    if not found:
        raise BuildError(f"{archive_name}: {USAGE}; or give the build a --name")
    return f"llama-{found['tag']}-{found['platform']}"


def is_backend_module(filename: str) -> bool:
    """A loadable ggml backend (``libggml-opencl.so``, ``libggml-cpu-haswell.so``), as opposed to
    a library the tools link."""
    return (filename.startswith("libggml-") and filename.endswith(".so")
            and filename not in _LINKED)


def backends_of(filenames: list[str]) -> tuple[str, ...]:
    """The device backends whose modules are among ``filenames`` (the CPU's is not named)."""
    present = {name.removeprefix("lib").removesuffix(".so") for name in filenames}
    return tuple(sorted(backend for module, backend in BACKEND_MODULES.items()
                        if module in present))


def elf_abi(header: bytes) -> str | None:
    """The ABI of an ELF file from its header's e_machine; None when not ELF or unknown."""
    if len(header) < 20 or header[:4] != b"\x7fELF":
        return None
    machine = header[18:20]
    return ELF_ABIS.get(int.from_bytes(machine, "little" if header[5] == 1 else "big"))


def _check_member(archive: Path, name: str) -> None:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        raise BuildError(f"{archive}: member {name!r} leaves the archive's folder; "
                         f"not a llama.cpp release archive ({USAGE})")


def extract(archive: Path, into: Path) -> None:
    """Unpack a zip or tar.gz into ``into``; a member that would land outside it (absolute, ``..``,
    a link out) is a BuildError before anything is written."""
    try:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as z:
                for info in z.infolist():
                    _check_member(archive, info.filename)
                z.extractall(into)
                for info in z.infolist():  # zipfile drops the modes; the executables need theirs
                    mode = (info.external_attr >> 16) & 0o777
                    if mode and not info.is_dir():
                        (into / info.filename).chmod(mode)
            return
        with tarfile.open(archive, "r:gz") as t:
            for member in t.getmembers():
                _check_member(archive, member.name)
            t.extractall(into, filter="data")
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as error:
        raise BuildError(f"{archive}: cannot be unpacked ({error}); {USAGE}") from error


def _bench_folder(archive: Path, root: Path) -> Path:
    found = sorted(p for p in root.rglob("llama-bench") if p.is_file())
    if not found:
        raise BuildError(f"{archive}: no llama-bench in it; {USAGE} (or import a folder of "
                         f"binaries)")
    return found[0].parent


def release_files(folder: Path) -> dict[str, Path]:
    """The build files of an unpacked release folder: executables and backend modules in bin/
    (ggml loads the modules from the executable's folder), other shared libraries in lib/."""
    files: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        if not path.is_file():
            continue
        if is_backend_module(path.name):
            files[f"bin/{path.name}"] = path
        elif _is_library(path.name):
            files[f"lib/{path.name}"] = path
        elif path.stat().st_mode & 0o111:
            files[f"bin/{path.name}"] = path
    return files


def import_release(archive: Path, root: Path, name: str | None = None, *,
                   replace: bool = False) -> Build:
    """Make a build from a llama.cpp release archive: tag as version, backends from its modules,
    ABI from llama-bench's ELF header. Nothing is left behind when it fails."""
    if not is_archive(archive):
        raise BuildError(f"{archive}: not a .tar.gz or .zip; {USAGE}")
    name = name or default_name(archive.name)
    with tempfile.TemporaryDirectory(prefix="harness-release-") as tmp:
        unpacked = Path(tmp)
        extract(archive, unpacked)
        folder = _bench_folder(archive, unpacked)
        top = folder.relative_to(unpacked).parts
        with open(folder / "llama-bench", "rb") as bench:
            abi = elf_abi(bench.read(20))
        if abi is None:
            raise BuildError(f"{archive}: its llama-bench is not an arm64 or x86_64 ELF "
                             f"executable; {USAGE}")
        (folder / "llama-bench").chmod(0o755)
        files = release_files(folder)
        backends = backends_of([Path(rel).name for rel in files])
        env = {k: v for b in backends for k, v in BACKEND_ENV.get(b, {}).items()}
        return write_build(
            root, name, files, engine="llama.cpp", abi=abi,
            version=release_tag(archive.name, top[0] if top else None),
            source=archive.name, backends=backends, env=env, replace=replace,
        )

