"""Engine builds: a folder ``builds/<name>/`` with ``bin/``, ``lib/`` and ``manifest.json``.

A manifest says what a build is (engine, version, commit, ABI, cmake flags, the CPU features its
code was compiled for) and lists every file
with its size and sha256, so results can name the exact bytes that produced them and the push
cache can skip bytes a phone already holds. Manifests are validated on load: a hand-edited or
foreign manifest fails with the file and key named, and no listed path may leave the build folder.
Builds are assembled in a hidden temporary folder and renamed into place, so a half-written build
is never listed.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from harness.artifacts.cpu_features import CpuFeatures, cpu_features_from_dict
from harness.artifacts.hashing import file_sha256
from harness.errors import BuildError, ConfigError

MANIFEST = "manifest.json"
# 2 added "cpu" (CpuFeatures); 3 "backends" and "env". Older formats still load; what they lack
# reads as unknown (None, or no backend named and no environment).
MANIFEST_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
#: the placeholder in a manifest's env for the build's lib/ folder on the device
LIB_PLACEHOLDER = "{lib}"
FILE_DIRS = ("bin", "lib")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# "version: 0.5.0-dev (build 0, commit 0c1e570)" (2025+) or "version: 4589 (3e4b7a6d)" (older).
_VERSION_NEW = re.compile(r"version:\s*(\S+)\s*\(build\s*(\d+),\s*commit\s*([0-9A-Za-z]+)\)")
_VERSION_OLD = re.compile(r"version:\s*(\S+)\s*\(([0-9A-Za-z]+)\)")


@dataclass(frozen=True)
class BuildFile:
    path: str  # relative to the build folder, POSIX separators, e.g. "bin/llama-bench"
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    name: str
    engine: str  # "llama.cpp"
    version: str | None
    commit: str | None
    abi: str  # "x86_64" for this host, "arm64-v8a" for phones
    cmake_flags: tuple[str, ...]  # "-DKEY=VALUE" as passed to cmake; empty for imports
    files: tuple[BuildFile, ...]
    created_at: str  # ISO 8601, UTC
    host: str  # machine that made the build
    source: str | None = None  # where the code came from (path or sdist name)
    cpu: CpuFeatures | None = None  # None: unknown (imports, format-1 manifests)
    format: int = MANIFEST_VERSION
    # ggml backends compiled in besides the CPU's ("vulkan", "opencl", "hexagon"); () for a CPU
    # build and for manifests from before format 3
    backends: tuple[str, ...] = ()
    # the environment a launch on the device needs ({lib}: the build's lib/ folder there), e.g.
    # ADSP_LIBRARY_PATH for the Hexagon backend's DSP libraries
    env: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> str:
        data = asdict(self)
        data["cmake_flags"] = list(self.cmake_flags)
        data["backends"] = list(self.backends)
        data["env"] = dict(self.env)
        data["cpu"] = self.cpu.to_dict() if self.cpu else None
        return json.dumps(data, indent=2) + "\n"

    def file(self, path: str) -> BuildFile | None:
        return next((f for f in self.files if f.path == path), None)


@dataclass(frozen=True)
class Build:
    """A build on disk: its folder and its validated manifest."""

    path: Path
    manifest: Manifest = field(repr=False)

    @property
    def name(self) -> str:
        return self.manifest.name

    def binary(self, tool: str = "llama-bench") -> Path:
        path = self.path / "bin" / tool
        if self.manifest.file(f"bin/{tool}") is None:
            raise BuildError(f"{self.path / MANIFEST}: build {self.name!r} has no bin/{tool}")
        return path


def builds_root(explicit: Path | str | None = None) -> Path:
    """``--builds DIR``, else ``$HARNESS_BUILDS``, else ``./builds``."""
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("HARNESS_BUILDS") or "builds")


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise BuildError(f"build name {name!r}: use letters, digits, '.', '_' and '-' only")
    return name


def scan_files(build_dir: Path) -> tuple[BuildFile, ...]:
    """Every regular file under bin/ and lib/, sorted, with size and sha256."""
    found = []
    for sub in FILE_DIRS:
        for path in sorted((build_dir / sub).rglob("*")):
            if path.is_file():
                rel = path.relative_to(build_dir).as_posix()
                found.append(BuildFile(rel, path.stat().st_size, file_sha256(path)))
    return tuple(found)


def parse_version_output(text: str) -> tuple[str | None, str | None]:
    """(version, commit) from ``llama-bench --version`` output of any llama.cpp era."""
    match = _VERSION_NEW.search(text)
    if match:
        return match.group(1), _known(match.group(3))
    match = _VERSION_OLD.search(text)
    if match:
        return match.group(1), _known(match.group(2))
    return None, None


def _known(commit: str) -> str | None:
    return None if commit == "unknown" else commit


def git_commit(source: Path) -> str | None:
    """HEAD of a git checkout, or None when ``source`` is not one (or git is missing)."""
    if shutil.which("git") is None:
        return None
    result = subprocess.run(
        ["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        return None
    # A tree inside another repository (e.g. extracted under a checkout) is not its own checkout.
    top = subprocess.run(
        ["git", "-C", str(source), "rev-parse", "--show-toplevel"],
        capture_output=True, text=True, check=False,
    )
    if Path(top.stdout.strip()).resolve() != source.resolve():
        return None
    return result.stdout.strip()


def tool_version(binary: Path) -> tuple[str | None, str | None]:
    """Ask a host-runnable tool for its version; (None, None) when it cannot run here."""
    try:
        result = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    return parse_version_output(result.stdout + "\n" + result.stderr)


def load_manifest(build_dir: Path) -> Manifest:
    path = build_dir / MANIFEST
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no manifest; make the build with `harness build`") from None
    except json.JSONDecodeError as error:
        raise ConfigError(f"{path}: not valid JSON ({error})") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid JSON (nested too deeply)") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not a text file ({error.reason})") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read ({error.strerror or error})") from None
    manifest = manifest_from_dict(data, path)
    root = build_dir.resolve()
    for index, entry in enumerate(manifest.files):  # a symlink must not lead out of the build
        if not (build_dir / entry.path).resolve().is_relative_to(root):
            raise ConfigError(f"{path}: key 'files[{index}].path' ({entry.path!r}) resolves "
                              "outside the build folder (a symlink); builds hold plain files")
    return manifest


def manifest_from_dict(data: Any, where: Path) -> Manifest:
    """Validate a parsed manifest; every error names the file and the key."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a JSON object")

    def need(key: str, kind: type | tuple[type, ...], optional: bool = False) -> Any:
        value = data.get(key)
        if value is None and optional:
            return None
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
            raise ConfigError(f"{where}: key {key!r} is missing or not {_kind_name(kind)}")
        return value

    fmt = data.get("format", 1)
    if fmt not in READABLE_VERSIONS or isinstance(fmt, bool):
        readable = ", ".join(str(v) for v in READABLE_VERSIONS)
        raise ConfigError(f"{where}: key 'format' is {fmt!r}; this harness reads {readable}")
    cpu = None
    if data.get("cpu") is not None:
        try:
            cpu = cpu_features_from_dict(data["cpu"])
        except ValueError as error:
            raise ConfigError(f"{where}: key 'cpu': {error}") from None
    flags = need("cmake_flags", list)
    if not all(isinstance(flag, str) for flag in flags):
        raise ConfigError(f"{where}: key 'cmake_flags' must be a list of strings")
    files = tuple(_file_entry(entry, i, where) for i, entry in enumerate(need("files", list)))
    backends = data.get("backends") or []
    if not isinstance(backends, list) or not all(isinstance(b, str) for b in backends):
        raise ConfigError(f"{where}: key 'backends' must be a list of backend names")
    env = data.get("env") or {}
    if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and _ENV_NAME.match(k)
            for k, v in env.items()):
        raise ConfigError(f"{where}: key 'env' must map variable names to strings")
    name = need("name", str)
    if not _NAME.match(name):
        raise ConfigError(f"{where}: key 'name' ({name!r}) must use letters, digits, '.', '_' "
                          "and '-' only")
    return Manifest(
        name=name,
        engine=need("engine", str),
        version=need("version", str, optional=True),
        commit=need("commit", str, optional=True),
        abi=need("abi", str),
        cmake_flags=tuple(flags),
        files=files,
        created_at=need("created_at", str),
        host=need("host", str),
        source=need("source", str, optional=True),
        cpu=cpu,
        format=fmt,
        backends=tuple(backends),
        env=tuple(sorted(env.items())),
    )


def _file_entry(entry: Any, index: int, where: Path) -> BuildFile:
    key = f"files[{index}]"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: key {key!r} must be an object with path, size, sha256")
    rel = entry.get("path")
    if not isinstance(rel, str) or not _inside(rel):
        raise ConfigError(
            f"{where}: key '{key}.path' ({rel!r}) must be a relative path inside the build"
        )
    size = entry.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ConfigError(f"{where}: key '{key}.size' must be a non-negative integer")
    sha = entry.get("sha256")
    if not isinstance(sha, str) or not _SHA256.match(sha):
        raise ConfigError(f"{where}: key '{key}.sha256' must be 64 lowercase hex digits")
    return BuildFile(rel, size, sha)


def _inside(rel: str) -> bool:
    pure = PurePosixPath(rel)
    return bool(rel) and not pure.is_absolute() and ".." not in pure.parts and "\\" not in rel


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", list: "a list", dict: "an object"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def open_build(root: Path, name: str) -> Build:
    folder = root / check_name(name)
    if not folder.is_dir():
        known = ", ".join(b.name for b in list_builds(root)) or "none"
        raise BuildError(f"{folder}: no such build (known: {known})")
    return Build(folder, load_manifest(folder))


def list_builds(root: Path) -> list[Build]:
    """Every build folder under ``root`` with a manifest; a broken manifest raises."""
    if not root.is_dir():
        return []
    found = []
    for folder in sorted(root.iterdir()):
        if folder.name.startswith(".") or not (folder / MANIFEST).is_file():
            continue
        found.append(Build(folder, load_manifest(folder)))
    return found


def verify_build(build: Build) -> list[str]:
    """Problems found by re-hashing the files (empty when the build is intact)."""
    problems = []
    for entry in build.manifest.files:
        path = build.path / entry.path
        if not path.is_file():
            problems.append(f"{entry.path}: missing")
        elif path.stat().st_size != entry.size or file_sha256(path) != entry.sha256:
            problems.append(f"{entry.path}: content differs from the manifest")
    return problems


def write_build(
    root: Path,
    name: str,
    files: Mapping[str, Path],
    *,
    engine: str,
    abi: str,
    version: str | None = None,
    commit: str | None = None,
    cmake_flags: Iterable[str] = (),
    source: str | None = None,
    cpu: CpuFeatures | None = None,
    replace: bool = False,
    backends: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
) -> Build:
    """Copy ``{"bin/x": src, "lib/y": src}`` into ``root/name`` with a manifest, atomically.

    Sources are dereferenced (a symlinked ``libfoo.so.0`` becomes a regular file) so that every
    file of a build is plain bytes with one sha256, which is what the push cache deals in.
    When no version is given and ``bin/llama-bench`` runs here, its ``--version`` fills it in.
    """
    check_name(name)
    target = root / name
    if target.exists() and not replace:
        raise BuildError(f"{target}: build exists; pick another --name or pass --replace")
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    try:
        for rel, src in files.items():
            if not _inside(rel) or PurePosixPath(rel).parts[0] not in FILE_DIRS:
                raise BuildError(f"{rel}: build files go under bin/ or lib/")
            dest = tmp / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)  # follows symlinks
        for sub in FILE_DIRS:
            (tmp / sub).mkdir(exist_ok=True)
        bench = tmp / "bin" / "llama-bench"
        if (version is None or commit is None) and bench.is_file():
            found_version, found_commit = tool_version(bench)
            version = version or found_version
            commit = commit or found_commit
        manifest = Manifest(
            name=name, engine=engine, version=version, commit=commit, abi=abi,
            cmake_flags=tuple(cmake_flags), files=scan_files(tmp),
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
            host=platform.node(), source=source, cpu=cpu, backends=tuple(backends),
            env=tuple(sorted((env or {}).items())),
        )
        (tmp / MANIFEST).write_text(manifest.to_json())
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return Build(target, manifest)


def import_build(
    source: Path, root: Path, name: str, *, abi: str, engine: str = "llama.cpp",
    replace: bool = False,
) -> Build:
    """Wrap prebuilt binaries (a CI artefact) into a build.

    ``source`` either has ``bin/`` and ``lib/`` folders, or holds the files flat: executables go
    to bin/, shared libraries (``*.so*``) to lib/.
    """
    if not source.is_dir():
        raise BuildError(f"{source}: not a folder of prebuilt binaries")
    files: dict[str, Path] = {}
    if (source / "bin").is_dir() or (source / "lib").is_dir():
        for sub in FILE_DIRS:
            for path in sorted((source / sub).rglob("*")) if (source / sub).is_dir() else []:
                if path.is_file():
                    files[f"{sub}/{path.relative_to(source / sub).as_posix()}"] = path
    else:
        for path in sorted(source.iterdir()):
            if path.is_file() and _is_library(path.name):
                files[f"lib/{path.name}"] = path
            elif path.is_file() and os.access(path, os.X_OK):
                files[f"bin/{path.name}"] = path
    if not any(rel.startswith("bin/") for rel in files):
        raise BuildError(f"{source}: no executables found (expected bin/ or executable files)")
    return write_build(root, name, files, engine=engine, abi=abi, source=str(source.resolve()),
                       replace=replace)


def _is_library(filename: str) -> bool:
    return ".so" in filename and re.search(r"\.so(\.\d+)*$", filename) is not None


def copy_build(build: Build, root: Path, name: str) -> Build:
    """Copy a build under another name (e.g. from the cache); reuse a copy whose files match."""
    existing = root / name
    if (existing / MANIFEST).is_file():
        try:
            current = Build(existing, load_manifest(existing))
        except ConfigError:
            current = None
        if (current and current.manifest.files == build.manifest.files
                and current.manifest.cpu == build.manifest.cpu
                and current.manifest.backends == build.manifest.backends
                and current.manifest.env == build.manifest.env and not verify_build(current)):
            return current
    m = build.manifest
    return write_build(
        root, name, {f.path: build.path / f.path for f in m.files}, engine=m.engine, abi=m.abi,
        version=m.version, commit=m.commit, cmake_flags=m.cmake_flags, source=m.source,
        cpu=m.cpu, replace=True, backends=m.backends, env=dict(m.env),
    )


def launch_env(manifest: Manifest, lib_dir: str | None) -> dict[str, str]:
    """The build's launch environment on a device whose copy of ``lib/`` is ``lib_dir``."""
    return {key: value.replace(LIB_PLACEHOLDER, lib_dir or ".") for key, value in manifest.env}
