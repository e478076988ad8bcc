"""Where a trial's model ran is what the engine's log says it did, not what llama-bench echoes
(issue 48): on the virtual GPU phone, a llama-bench whose load offloads fewer layers than the
cell asks stores a trial that is ``config_not_applied``, with both counts, and invalid.

How the engine comes to offload fewer layers: llama.cpp's own fit (llama-bench's ``-fitt``,
``common_fit_params``) sizes the offload to the device's free memory less a margin, setting
aside the ``-ngl`` it was given, while llama-bench's JSON still echoes that ``-ngl``. The build
here is the host Vulkan build with its llama-bench behind a two-line script that adds ``-fitt``
to every command line, as a llama-bench that fits by default would (llama.cpp's server and CLI
already do). Everything else is real: llama.cpp decides the layers and logs them. lavapipe
reports 2048 MiB free; a margin of 2030 MiB leaves 18, less than bench Q4_0's 37 MiB of
offloadable weights (2026-12-07: 2 of 9 layers run on the host, 3 on the virtual phone).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from test_gpu_e2e import GPU_PHONE, MATRIX

from harness import store
from harness.artifacts.builds import Build, copy_build, write_build
from harness.device import get_device
from harness.run.runner import RunOptions, execute

pytestmark = pytest.mark.slow

FIT_MARGIN_MIB = 2030
# POSIX sh: the virtual phone runs a script's #! with the host's kernel
FITTING = f"""#!/bin/sh
exec "${{0%/*}}/llama-bench.bin" "$@" -fitt {FIT_MARGIN_MIB}
"""


def _wrapped_build(vulkan: Build, root: Path, scratch: Path, name: str, script: str,
                   source: str) -> Build:
    """The Vulkan build under another name, its llama-bench behind ``script`` (which runs the
    real one, ``llama-bench.bin`` beside it)."""
    wrapper = scratch / f"{name}-llama-bench"
    wrapper.write_text(script)
    wrapper.chmod(0o755)
    bin_dir = vulkan.path / "bin"
    manifest = vulkan.manifest
    return write_build(root, name,
                       {"bin/llama-bench": wrapper, "bin/llama-bench.bin": bin_dir / "llama-bench",
                        "bin/harness-generate": bin_dir / "harness-generate"},
                       engine=manifest.engine, abi=str(manifest.abi), version=manifest.version,
                       commit=manifest.commit, backends=manifest.backends,
                       source=f"{vulkan.path.name} {source}")


def _run_on_gpu_phone(virtual_phones: Any, tmp_path: Path, builds: Path,
                      replacements: dict[str, str]) -> pd.DataFrame:
    """The GPU matrix with ``replacements`` made in its text, run on one GPU phone."""
    text = MATRIX.read_text()
    for old, new in replacements.items():
        text = text.replace(old, new)
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(text)
    (phone,) = virtual_phones(1, profile=GPU_PHONE)
    results = tmp_path / "r"
    execute(matrix, [get_device(phone.serial)],
            RunOptions(results=results, builds=builds, reserve_bytes=0))
    return store.read_table(results, "trials")


def test_a_load_that_offloaded_fewer_layers_than_asked_is_config_not_applied(
        virtual_phones: Any, tmp_path: Path, vulkan_build: Build, bench_ladder: Any) -> None:
    """The same cell on the Vulkan build and on its fitting copy: the same echo, two loads."""
    builds = tmp_path / "builds"
    copy_build(vulkan_build, builds, "host-vulkan")
    _wrapped_build(vulkan_build, builds, tmp_path, "host-vulkan-fit", FITTING,
                   f"with llama-bench -fitt {FIT_MARGIN_MIB}")
    trials = _run_on_gpu_phone(virtual_phones, tmp_path, builds, {
        "build: [host-vulkan]": "build: [host-vulkan, host-vulkan-fit]",
        "quant: [Q8_0, Q4_0]": "quant: [Q4_0]",
        "n_gpu_layers: [0, half, all]": "n_gpu_layers: [all]",
        "device: [none, Vulkan0]": "device: [Vulkan0]"}).set_index("build_id")
    for build in ("host-vulkan", "host-vulkan-fit"):
        row = trials.loc[build]
        assert row["outcome"] == "ok", row["error"]
        # llama-bench's JSON echoes the cell on both: every layer, on Vulkan0
        echoed = json.loads(str(row["engine_record"]))
        assert {(r["n_gpu_layers"], r["devices"]) for r in echoed} == {(-1, "Vulkan0")}
        assert row["model_layers"] == 9
    plain, fit = trials.loc["host-vulkan"], trials.loc["host-vulkan-fit"]
    assert plain["offloaded_layers"] == 9 and pd.isna(plain["config_not_applied"])
    assert bool(plain["valid"]), plain["invalid_reason"]
    # the fit's load put fewer of bench's 9 layers on the device, and the log says so
    offloaded = int(fit["offloaded_layers"])
    assert 0 < offloaded < 9
    assert fit["config_not_applied"] == (
        f"asked 9/9 layers on Vulkan0, the engine's log says offloaded {offloaded}/9 layers; "
        f"{offloaded}/9 layers assigned to a device")
    assert not bool(fit["valid"]) and "config not applied" in str(fit["invalid_reason"])


# An older llama-bench, before -dev and --list-devices: the Vulkan build's own, answering those
# two flags as llama-bench answers any flag it lacks (an error line on stderr, its usage on
# stdout, exit 1), its usage the real one less their two lines.
OLD = """#!/bin/sh
for a in "$@"; do
  case $a in --list-devices|-dev|--device)
    echo "error: invalid parameter for argument: $a" >&2
    "${0%/*}/llama-bench.bin" --help | grep -v -e --device -e --list-devices
    exit 1;;
  esac
done
exec "${0%/*}/llama-bench.bin" "$@"
"""


def test_a_gpu_build_too_old_for_dev_runs_no_cell_it_cannot_place(
        virtual_phones: Any, tmp_path: Path, vulkan_build: Build, bench_ladder: Any) -> None:
    """Its CPU cell is not run with -ngl 0 alone (which still sends big batches to the GPU:
    docs/gpu.md), nor its device cell without -dev: both are unsupported, saying why."""
    builds = tmp_path / "builds"
    _wrapped_build(vulkan_build, builds, tmp_path, "host-vulkan-old", OLD,
                   "without -dev and --list-devices")
    trials = _run_on_gpu_phone(virtual_phones, tmp_path, builds, {
        "build: [host-vulkan]": "build: [host-vulkan-old]",
        "quant: [Q8_0, Q4_0]": "quant: [Q4_0]",
        "n_gpu_layers: [0, half, all]": "n_gpu_layers: [0]"}).set_index("compute_device")
    assert sorted(trials.index) == ["Vulkan0", "none"]
    assert set(trials["outcome"]) == {"unsupported"}, trials[["outcome", "error"]]
    assert "-ngl 0 alone still sends" in str(trials.loc["none", "error"])
    assert "vulkan" in str(trials.loc["none", "error"]).lower()  # its backend
    assert "has no -dev/--device" in str(trials.loc["Vulkan0", "error"])
