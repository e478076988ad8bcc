"""``harness plan`` on a GPU matrix: host and accelerator memory per cell, and a fit verdict that
counts both against the phone's memory (a GPU's buffers are the phone's RAM)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from harness.cli import main

MATRIX = str(Path(__file__).resolve().parents[1] / "matrices" / "gpu.yaml")


def _plan(memory: str) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["plan", MATRIX, "--memory", memory, "--reserve", "0",
                                       "--json"])
    assert result.exit_code == 0, result.output
    plan: dict[str, Any] = json.loads(result.stdout)
    return plan


def _by(cells: list[dict[str, Any]]) -> dict[tuple[str, str, int], dict[str, Any]]:
    return {(c["quant"], c.get("compute_device", "none"), c.get("n_gpu_layers", 0)): c
            for c in cells}


def test_plan_splits_host_and_accelerator_and_counts_both(bench_ladder: Any) -> None:
    doc = _plan("4GiB")
    assert doc["schema_version"] == 2  # 2: predicted_device_bytes renamed
    cells = _by(doc["cells"])
    cpu = cells[("Q8_0", "none", 0)]
    assert cpu["predicted_accelerator_bytes"] == 0
    assert cpu["predicted_host_bytes"] == cpu["predicted_peak_bytes"]
    hosts = [cells[("Q8_0", "Vulkan0", n)]["predicted_host_bytes"] for n in (0, 4, -1)]
    devices = [cells[("Q8_0", "Vulkan0", n)]["predicted_accelerator_bytes"] for n in (0, 4, -1)]
    assert hosts == sorted(hosts, reverse=True) and devices == sorted(devices)
    for n in (0, 4, -1):
        cell = cells[("Q8_0", "Vulkan0", n)]
        assert cell["predicted_host_bytes"] + cell["predicted_accelerator_bytes"] == \
            cell["predicted_peak_bytes"]
    full = cells[("Q8_0", "Vulkan0", -1)]
    assert full["predicted_peak_bytes"] > cpu["predicted_peak_bytes"]  # the device's own buffer
    # a budget below what the device must hold: the full offload is refused (its device
    # buffers cannot page), while the CPU cell's mapped weights can page from storage
    budget = full["predicted_accelerator_bytes"] - 2**20
    tight = _by(_plan(f"{budget}B")["cells"])
    refused = tight[("Q8_0", "Vulkan0", -1)]
    assert refused["reason_code"] == "over_budget" and not refused["feasible"], refused
    assert tight[("Q8_0", "none", 0)]["reason_code"] == "runs_by_paging"


def test_the_table_shows_host_and_accelerator_columns(bench_ladder: Any) -> None:
    result = CliRunner().invoke(main, ["plan", MATRIX, "--memory", "4GiB", "--reserve", "0"],
                                env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if "peak" in line)
    assert "host" in header and "accelerator" in header
