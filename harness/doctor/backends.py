"""``harness doctor --build NAME``: push a build and ask it which compute devices this phone
gives it (``llama-bench --list-devices``), as a run asks before its first GPU cell."""

from __future__ import annotations

from harness.artifacts.builds import Build
from harness.device.base import Device
from harness.engines.devices import Capability, capability_from_output, list_devices_command
from harness.errors import DeviceError
from harness.run.deploy import build_artifacts, ensure_artifacts
from harness.run.watch import launch_line


def build_backends(device: Device, build: Build) -> Capability:
    """The devices ``build`` sees on ``device`` (the CPU is always there and never listed)."""
    files, binary, lib_dir = build_artifacts(build)
    ensure_artifacts(device, files)
    try:
        result = device.shell(launch_line(list_devices_command(binary), lib_dir), timeout=120)
    except DeviceError as error:
        return Capability(build.name, unknown=f"--list-devices did not finish: {error}")
    return capability_from_output(build.name, result.exit_code, result.stdout, result.stderr)


def backends_json(found: Capability) -> dict[str, object]:
    return {"build": found.build, "unknown": found.unknown,
            "devices": [{"name": d.name, "description": d.description,
                         "total_mib": d.total_mib, "free_mib": d.free_mib}
                        for d in found.devices]}
