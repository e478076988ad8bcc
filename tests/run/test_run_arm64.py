"""The smoke matrix on an arm64 phone: its arm64 llama-bench runs (in qemu-user), the host's
x86_64 build is refused before anything is pushed, and the trials say their CPU was emulated."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import store
from harness.artifacts.builds import Build
from harness.device import get_device
from harness.run.runner import RunOptions, execute

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "matrices" / "smoke.yaml"


def test_smoke_on_an_arm64_phone_runs_its_build_and_refuses_the_host_one(
    virtual_phones, tmp_path: Path, host_build: Build, arm64_build: Build,
    tiny_ladder: dict[str, Path],
) -> None:
    assert host_build.path.parent == arm64_build.path.parent
    text = SMOKE.read_text().replace("build: [host-release]",
                                     "build: [arm64-release, host-release]")
    assert "arm64-release" in text
    matrix = tmp_path / "smoke-arm64.yaml"
    matrix.write_text(text)
    (phone,) = virtual_phones(abi="arm64-v8a")
    results = tmp_path / "results"
    events: list[tuple[str, dict[str, object]]] = []
    summary = execute(matrix, [get_device(phone.serial)],
                      RunOptions(results=results, builds=arm64_build.path.parent),
                      on_event=lambda kind, serial, details: events.append((kind, details)))
    assert dict(summary.outcomes()) == {"ok": 16, "abi_mismatch": 16}
    trials = store.read_table(results, "trials")
    ran = trials[trials["build_id"] == "arm64-release"]
    refused = trials[trials["build_id"] == "host-release"]
    # default sampling, every arm64 trial ok, with its speed and its peak
    assert (ran["outcome"] == "ok").all()
    assert (ran["tg_tps"] > 0).all() and (ran["pp_tps"] > 0).all()
    assert ran["vm_hwm_bytes"].notna().all()
    assert (ran["cpu_emulation"] == "qemu-aarch64").all()
    assert (ran["device_abi"] == "arm64-v8a").all() and (ran["build_abi"] == "arm64-v8a").all()
    # the x86_64 build: refused with a one-line reason, never pushed, never a silent crash
    assert (refused["outcome"] == "abi_mismatch").all()
    reason = refused["error"].iloc[0]
    assert "x86_64" in reason and "arm64-v8a" in reason and "\n" not in reason
    assert any(kind == "abi_mismatch" for kind, _ in events)
    pushed = list(Path(phone.root, "data/local/tmp/harness/builds").iterdir())
    assert [p.name.startswith("arm64-release-") for p in pushed] == [True]
