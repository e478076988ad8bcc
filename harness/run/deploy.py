"""Content-addressed artefacts on the device: never push the same bytes twice.

Builds and models live under ``/data/local/tmp/harness/`` in folders named by their sha256. A file
already there whose checksum, computed on the device, matches is reused; otherwise it is pushed to
a temporary name, checked, and renamed into place, so an interrupted push never leaves a file
that looks complete.
"""

from __future__ import annotations

import contextlib
import hashlib
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from harness.artifacts.builds import Build
from harness.device.base import Device
from harness.errors import DeviceError

DEVICE_ROOT = "/data/local/tmp/harness"


@dataclass(frozen=True)
class Artifact:
    local: Path
    sha256: str
    remote: str  # where it lives on the device
    executable: bool = False


@dataclass(frozen=True)
class PushReport:
    bytes_pushed: int
    files_pushed: int
    files_reused: int


def model_remote_path(sha256: str, filename: str) -> str:
    return f"{DEVICE_ROOT}/models/{sha256}/{Path(filename).name}"


def build_remote_dir(build_digest: str) -> str:
    return f"{DEVICE_ROOT}/builds/{build_digest}"


class Ledger(Protocol):
    """What a caller remembers of files verified on the device (``harness.farm.phonestate``)."""

    def known(self, paths: Sequence[str]) -> dict[str, str]:
        """sha256 of those ``paths`` still as they were when verified, without reading them."""
        ...

    def verified(self, sums: Mapping[str, str]) -> None:
        """Files whose sha256 was just checked on the device, or that were just pushed."""
        ...


def build_digest(build: Build) -> str:
    """A digest of a build's files' checksums: its content, whatever its name."""
    return hashlib.sha256("|".join(f.sha256 for f in build.manifest.files).encode()).hexdigest()


def build_artifacts(build: Build, tool: str = "llama-bench") -> tuple[list[Artifact], str, str]:
    """Artefacts of a build, its binary and its library folder on the device (a folder named
    by the build and a digest of its files' checksums)."""
    remote_root = f"{DEVICE_ROOT}/builds/{build.name}-{build_digest(build)[:12]}"
    artifacts = [
        Artifact(build.path / f.path, f.sha256, f"{remote_root}/{f.path}",
                 executable=f.path.startswith("bin/"))
        for f in build.manifest.files
    ]
    build.binary(tool)  # fails clearly when the build has no such tool
    return artifacts, f"{remote_root}/bin/{tool}", f"{remote_root}/lib"


def remote_checksums(device: Device, paths: Sequence[str]) -> dict[str, str]:
    """sha256 of each path that exists on the device, computed there, in one round trip.

    Answers are keyed by position, not by the path the device prints back: a device (or a
    virtual phone's sandbox) may show the same file under another name.
    """
    if not paths:
        return {}
    quoted = " ".join(shlex.quote(p) for p in paths)
    result = device.shell(
        f"i=0; for f in {quoted}; do [ -f \"$f\" ] && echo \"$i $(sha256sum < \"$f\")\"; "
        "i=$((i+1)); done; true")
    sums: dict[str, str] = {}
    for line in result.stdout.splitlines():
        index, _, rest = line.strip().partition(" ")
        digest = rest.split(" ", 1)[0]
        if index.isdigit() and int(index) < len(paths) and len(digest) == 64:
            sums[paths[int(index)]] = digest
    return sums


def ensure_artifacts(
    device: Device,
    artifacts: Sequence[Artifact],
    progress: Callable[[str, int, int], None] | None = None,
    ledger: Ledger | None = None,
) -> PushReport:
    """Make every artefact present and verified on the device; push only what is missing.

    A ``ledger`` vouches for files it saw verified and unchanged since: those are not read
    again; it is told of every file checked or pushed here."""
    paths = [a.remote for a in artifacts]
    known = ledger.known(paths) if ledger is not None else {}
    present = {**known, **remote_checksums(device, [p for p in paths if p not in known])}
    pushed = files = reused = 0
    for artifact in artifacts:
        if present.get(artifact.remote) == artifact.sha256:
            reused += 1
            continue
        size = artifact.local.stat().st_size
        tmp = f"{artifact.remote}.part"
        folder = artifact.remote.rsplit("/", 1)[0]
        device.shell(f"mkdir -p {shlex.quote(folder)}")

        def tick(done: int, total: int, name: str = artifact.local.name) -> None:
            if progress is not None:
                progress(name, done, total)

        try:
            device.push(artifact.local, tmp, progress=tick)
        except DeviceError:
            # a full disk must not stay full of our own half file; a lost device keeps it
            with contextlib.suppress(DeviceError):
                device.shell(f"rm -f {shlex.quote(tmp)}", timeout=30)
            raise
        mode = "755" if artifact.executable else "644"
        check = device.shell(
            f"chmod {mode} {shlex.quote(tmp)} && sha256sum < {shlex.quote(tmp)}")
        got = check.stdout.strip().split(" ")[0]
        if got != artifact.sha256:
            device.shell(f"rm -f {shlex.quote(tmp)}")
            raise DeviceError(
                f"{artifact.local.name} arrived corrupted (sha256 {got[:12] or 'none'}, "
                f"expected {artifact.sha256[:12]}); check the device's storage", device.serial)
        moved = device.shell(f"mv -f {shlex.quote(tmp)} {shlex.quote(artifact.remote)}")
        if moved.exit_code != 0:
            raise DeviceError(f"cannot place {artifact.remote}: {moved.stderr.strip()}",
                              device.serial)
        pushed += size
        files += 1
    if ledger is not None:
        ledger.verified({a.remote: a.sha256 for a in artifacts
                         if known.get(a.remote) != a.sha256})
    return PushReport(bytes_pushed=pushed, files_pushed=files, files_reused=reused)
