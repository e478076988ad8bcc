"""On the Mali-class virtual phone (devices/virtual/gpu-phone-mali.yaml: no kgsl, no memtrack),
``harness recommend`` never ranks an offloaded config by its host memory alone (issue 48, item
2): the device's memory is added as GpuService read it, or, on a kernel without GpuService's
tracepoint, as the predictor split it, and the pick says so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from harness import store
from harness.artifacts.builds import Build
from harness.cli import main
from harness.device import get_device
from harness.run.offload import GPUMEM_SOURCE, NO_GPU_MEMORY
from harness.run.runner import RunOptions, execute

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
MALI_PHONE = REPO / "devices" / "virtual" / "gpu-phone-mali.yaml"
SAYS = "accelerator memory predicted, not read"


def _cpu_and_full_offload(tmp_path: Path) -> Path:
    matrix = tmp_path / "mali.yaml"
    matrix.write_text((REPO / "matrices" / "gpu.yaml").read_text()
                      .replace("quant: [Q8_0, Q4_0]", "quant: [Q4_0]")
                      .replace("n_gpu_layers: [0, half, all]", "n_gpu_layers: [0, all]"))
    return matrix


def _run(phone: Any, results: Path, build: Build) -> pd.Series:
    """The full offload's trial, of a run of a CPU config and a full offload."""
    execute(_cpu_and_full_offload(results.parent), [get_device(phone.serial)],
            RunOptions(results=results, builds=build.path.parent, reserve_bytes=0))
    trials = store.read_table(results, "trials")
    full = trials[(trials["compute_device"] == "Vulkan0") & (trials["n_gpu_layers"] == -1)]
    assert len(full) == 1 and full.iloc[0]["outcome"] == "ok", trials[["outcome", "error"]]
    return full.iloc[0]


def _recommend(phone: Any, results: Path, *memory: str) -> dict[str, Any]:
    found = CliRunner().invoke(main, ["recommend", "--device", phone.serial, "--results",
                                      str(results), "--reserve", "0", "--json", *memory])
    assert found.exit_code == 0, found.output
    return dict(json.loads(found.stdout))


def _process_peak(row: pd.Series) -> int:
    return int(max(v for v in (row["peak_pss_bytes"], row["vm_hwm_bytes"]) if pd.notna(v)))


def test_gpuservice_s_accelerator_memory_is_added_to_the_process_peak(
        virtual_phones: Any, tmp_path: Path, vulkan_build: Build, bench_ladder: Any) -> None:
    (phone,) = virtual_phones(1, profile=str(MALI_PHONE))
    full = _run(phone, tmp_path / "r", vulkan_build)
    answer = _recommend(phone, tmp_path / "r")
    assert full["accelerator_memory_source"] == GPUMEM_SOURCE and pd.isna(full["host_memory_bytes"])
    pick = next(p for p in answer["picks"] if p["config_id"] == full["config_id"])
    assert full["accelerator_memory_bytes"] > 0
    assert pick["peak_bytes"] == _process_peak(full) + full["accelerator_memory_bytes"]
    assert pick["accelerator_memory"] == "read" and SAYS not in pick["explanation"]


def test_an_unreadable_device_is_predicted_and_decides_the_fit(
        virtual_phones: Any, tmp_path: Path, vulkan_build: Build, bench_ladder: Any) -> None:
    profile = tmp_path / "mali-without-gpumem.yaml"
    profile.write_text(MALI_PHONE.read_text().replace(
        "  readable: false", "  readable: false\n  gpumem: false"))
    (phone,) = virtual_phones(1, profile=str(profile))
    full = _run(phone, tmp_path / "r", vulkan_build)
    answer = _recommend(phone, tmp_path / "r")
    assert full["accelerator_memory_source"] == NO_GPU_MEMORY
    assert pd.isna(full["accelerator_memory_bytes"])
    predicted = int(full["predicted_accelerator_bytes"])
    assert predicted > 0
    pick = next(p for p in answer["picks"] if p["config_id"] == full["config_id"])
    assert pick["peak_bytes"] == _process_peak(full) + predicted
    assert pick["accelerator_memory"] == "predicted"
    assert pick["explanation"].startswith(f"on Vulkan0 with n_gpu_layers all ({SAYS}); ")
    # memory for its process but not for its device's share as well: rejected, saying why
    memory = _process_peak(full) + predicted // 2
    tight = _recommend(phone, tmp_path / "r", "--memory", str(memory))
    rejected = {r["config_id"]: r for r in tight["rejected"]}
    assert full["config_id"] not in {p["config_id"] for p in tight["picks"]}
    assert rejected[full["config_id"]]["reason_code"] == "over_budget"
    assert SAYS in rejected[full["config_id"]]["reason"]
