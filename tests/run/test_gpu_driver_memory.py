"""A GPU build's drivers in the host memory the planner predicts (issue 48, item 3b), on the
demo's GPU phone (devices/virtual/gpu-phone.yaml) with host-vulkan: its CPU cells load the
Vulkan loader and lavapipe whatever they ask, which the run's --list-devices probe measures
once and every prediction of the build's cells carries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness import store
from harness.artifacts.builds import Build
from harness.device import get_device
from harness.run.runner import RunOptions, execute

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
GPU_PHONE = str(REPO / "devices" / "virtual" / "gpu-phone.yaml")
MiB = 2**20


def test_the_cpu_cells_of_a_vulkan_build_are_predicted_with_its_drivers(
        virtual_phones: Any, tmp_path: Path, vulkan_build: Build, bench_ladder: Any) -> None:
    matrix = tmp_path / "cpu.yaml"
    matrix.write_text((REPO / "matrices" / "gpu.yaml").read_text()
                      .replace("device: [none, Vulkan0]", "device: [none]")
                      .replace("n_gpu_layers: [0, half, all]", "n_gpu_layers: [0]"))
    (phone,) = virtual_phones(1, profile=GPU_PHONE)
    results = tmp_path / "r"
    execute(matrix, [get_device(phone.serial)],
            RunOptions(results=results, builds=vulkan_build.path.parent, reserve_bytes=0))
    trials = store.read_table(results, "trials")
    assert len(trials) == 2 and set(trials["outcome"]) == {"ok"}, trials[["outcome", "error"]]
    for row in trials.itertuples():
        assert row.accelerator_memory_bytes == 0  # a CPU cell: nothing on the GPU
        measured, predicted = row.host_memory_bytes, row.predicted_host_bytes
        assert abs(predicted / measured - 1) <= 0.10, (row.quant, measured / MiB,
                                                      predicted / MiB)
        assert row.predicted_peak_bytes == predicted  # the driver is the host's, not the GPU's
    # one probe per (build, phone): the same figure on both cells, the loader and lavapipe
    # with LLVM
    (driver,) = set(trials["driver_host_bytes"])
    assert driver > 0
