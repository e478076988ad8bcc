"""The GPU as a matrix axis, end to end (issue 36): matrices/gpu.yaml on the virtual GPU phone
(devices/virtual/gpu-phone.yaml: Mesa's software Vulkan driver, its allocations counted by the
phone's Vulkan layer and reported through kgsl nodes) with the host Vulkan build of llama-bench.

lavapipe runs the "GPU" on the host's two cores: these tests use short workloads and never
judge a GPU speed, only where the work ran, what the phone reported and what the check found.
"""

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
from harness.run.offload import GPUMEM_SOURCE, KGSL_SOURCE, NO_GPU_MEMORY
from harness.run.runner import RunOptions, execute

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
MATRIX = REPO / "matrices" / "gpu.yaml"
GPU_PHONE = str(REPO / "devices" / "virtual" / "gpu-phone.yaml")
MALI_PHONE = str(REPO / "devices" / "virtual" / "gpu-phone-mali.yaml")
MiB = 2**20
# The phone's device share (kgsl's kernel_max: the most the layer counted at once) against the
# predictor's, measured 2026-12-07 on bench p16/g4: -11% with no layer offloaded (1.09 MiB, the
# pinned compute buffer, for 1.22 predicted), -5% and -8% at half, -2% and -3% with all.
DEVICE_BAND = (-0.15, 0.05)
# The host's memory the predictor leaves out on this phone: host_memory_bytes -
# predicted_host_bytes. The prediction counts the Vulkan build's runtime (driver_host_bytes: its
# --list-devices probe's VmHWM less a CPU-only probe's, 57.6 MiB here; the Vulkan loader,
# lavapipe and LLVM), so the CPU cells and the cells with no layer offloaded land within about
# 17 MiB of it (2026-12-07: -5 MiB on the CPU, +10 (Q8_0) and -17 (Q4_0) MiB with no layer
# offloaded). Offloading adds up to the device share on top: the offloaded weights' file pages,
# read through the mmap to upload them, are resident beside their device copies during the
# load, so the process's high-water mark holds both, and lavapipe's compiled pipelines grow its
# heap (docs/gpu.md): +22 to +47 MiB at half, +21 to +71 MiB with all layers.
HOST_UNPREDICTED = (-25 * MiB, 20 * MiB)


def _run(matrix: Path, serial: str, results: Path, build: Build) -> pd.DataFrame:
    execute(matrix, [get_device(serial)],
            RunOptions(results=results, builds=build.path.parent, reserve_bytes=0))
    return store.read_table(results, "trials")


def _one(trials: pd.DataFrame, quant: str, device: str, layers: int) -> pd.Series:
    rows = trials[(trials["quant"] == quant) & (trials["compute_device"] == device)
                  & (trials["n_gpu_layers"] == layers)]
    assert len(rows) == 1, rows[["quant", "compute_device", "n_gpu_layers"]]
    return rows.iloc[0]


def _record(row: pd.Series) -> list[dict[str, Any]]:
    return list(json.loads(str(row["engine_record"])))


def _host_as_predicted(row: pd.Series) -> None:
    """The host share the phone gave is the predicted one (the build's drivers included) plus
    HOST_UNPREDICTED, whose top grows by the predicted device share (the uploaded weights' file
    pages)."""
    assert row["driver_host_bytes"] > 20 * MiB, row["driver_host_bytes"]  # measured, not 0
    unpredicted = row["host_memory_bytes"] - row["predicted_host_bytes"]
    low, high = HOST_UNPREDICTED
    assert low <= unpredicted <= high + row["predicted_accelerator_bytes"], (
        row["quant"], row["compute_device"], row["n_gpu_layers"], unpredicted / MiB)


def _device_as_predicted(row: pd.Series) -> None:
    error = row["accelerator_memory_bytes"] / row["predicted_accelerator_bytes"] - 1
    assert DEVICE_BAND[0] <= error <= DEVICE_BAND[1], (
        row["quant"], row["n_gpu_layers"], row["accelerator_memory_bytes"],
        row["predicted_accelerator_bytes"])


def test_cpu_partial_and_full_offload_on_the_virtual_gpu_phone(
        virtual_phones: Any, tmp_path: Path, vulkan_build: Build, bench_ladder: Any) -> None:
    (phone,) = virtual_phones(1, profile=GPU_PHONE)
    results = tmp_path / "r"
    trials = _run(MATRIX, phone.serial, results, vulkan_build)
    assert len(trials) == 12
    assert set(trials["outcome"]) <= {"ok", "unsupported"}, trials[["outcome", "error"]]
    unsupported = trials[trials["outcome"] == "unsupported"]
    # device none with layers offloaded: nothing would run anywhere but the CPU
    assert (unsupported["compute_device"] == "none").all() and len(unsupported) == 4
    assert unsupported["error"].str.contains("device none runs every layer on the CPU").all()
    ok = trials[trials["outcome"] == "ok"]
    assert len(ok) == 8 and (ok["gpu_emulated"] == "lavapipe").all()
    assert ok["gpu_info"].str.contains("llvmpipe").all()  # the build's GPU, as llama-bench saw
    assert (ok["devices_used"] == ok["compute_device"]).all()
    for quant in ("Q8_0", "Q4_0"):
        # the CPU cell of the Vulkan build: what llama-bench says it ran (its -dev and -ngl)
        cpu = _one(trials, quant, "none", 0)
        for record in _record(cpu):
            assert record["devices"] == "none" and record["n_gpu_layers"] == 0
        assert cpu["accelerator_memory_bytes"] == 0
        assert cpu["accelerator_memory_source"] == KGSL_SOURCE
        assert cpu["offloaded_layers"] == 0 and cpu["predicted_accelerator_bytes"] == 0
        _host_as_predicted(cpu)
        hosts, measured_hosts = [], []
        for layers in (0, 4, -1):  # half of bench's 9 offloadable layers is 4
            gpu = _one(trials, quant, "Vulkan0", layers)
            assert {r["devices"] for r in _record(gpu)} == {"Vulkan0"}
            assert {r["n_gpu_layers"] for r in _record(gpu)} == {layers}
            assert str(gpu["gpu_driver"]).startswith("ggml_vulkan: 0 = llvmpipe")
            assert gpu["accelerator_memory_source"] == KGSL_SOURCE
            # with no layer offloaded too: llama.cpp's pinned compute buffer alone, which
            # lives for milliseconds and is in kgsl's kernel_max all the same
            _device_as_predicted(gpu)
            _host_as_predicted(gpu)
            hosts.append(gpu["predicted_host_bytes"])
            measured_hosts.append(gpu["host_memory_bytes"])
        assert hosts[0] > hosts[1] > hosts[2], hosts  # the predictor moves weights off the host
        # measured: from half to all layers the host's share falls (the last layers' weights
        # and the output leave it). From 0 to half it does not on this phone: lavapipe keeps
        # every compiled pipeline in the process's heap (+26 MB once the layers' ops run on
        # it, more than half of bench's weights; docs/gpu.md has the figures)
        assert measured_hosts[1] > measured_hosts[2], (quant, measured_hosts)
    assert set(ok["output_check"]) == {"match"}, ok[["compute_device", "n_gpu_layers",
                                                     "output_check", "output_check_detail"]]

    # recommend counts a configuration's unthrottled trials and rejects one whose trials all
    # throttled (one trial each here): all three offloads are ranked only while none throttles,
    # which this phone's profile holds (the emulated GPU's load keeps it below MODERATE, where
    # its clocks are capped; devices/virtual/gpu-phone.yaml)
    assert not ok["throttled"].astype(bool).any() and (ok["max_thermal_status"] < 2).all(), \
        ok[["compute_device", "n_gpu_layers", "max_thermal_status", "start_temp_c"]]
    found = CliRunner().invoke(main, ["recommend", "--device", phone.serial, "--results",
                                      str(results), "--reserve", "0", "--json"])
    assert found.exit_code == 0, found.output
    picks = json.loads(found.stdout)["picks"]
    # rejected: only the four by-design unsupported cells (device none with layers offloaded)
    assert sorted(r["reason_code"] for r in json.loads(found.stdout)["rejected"]) == \
        ["no_ok_trial"] * 4
    # CPU, GPU and partial offloads ranked together, each naming its device and layers
    assert {p["compute_device"] for p in picks} == {"none", "Vulkan0"}
    assert {p["n_gpu_layers"] for p in picks if p["compute_device"] == "Vulkan0"} == {0, 4, -1}
    for pick in picks:
        if pick["compute_device"] == "Vulkan0":
            assert "Vulkan0/ngl=" in pick["label"]
            assert pick["explanation"].startswith("on Vulkan0 with n_gpu_layers ")


def _one_offloaded_cell(tmp_path: Path) -> Path:
    matrix = tmp_path / "one.yaml"
    matrix.write_text(MATRIX.read_text().replace("quant: [Q8_0, Q4_0]", "quant: [Q4_0]")
                      .replace("n_gpu_layers: [0, half, all]", "n_gpu_layers: [all]")
                      .replace("device: [none, Vulkan0]", "device: [Vulkan0]"))
    return matrix


def test_a_mali_phone_says_its_gpu_memory_through_gpuservice(
        virtual_phones: Any, tmp_path: Path, vulkan_build: Build, bench_ladder: Any) -> None:
    """No kgsl and no memtrack HAL, but Android 14's GpuService (`dumpsys gpu --gpumem`)."""
    (phone,) = virtual_phones(1, profile=MALI_PHONE)
    trials = _run(_one_offloaded_cell(tmp_path), phone.serial, tmp_path / "r", vulkan_build)
    (row,) = trials.itertuples()
    assert row.outcome == "ok", row.error
    assert row.accelerator_memory_source == GPUMEM_SOURCE
    # the device buffers llama.cpp logged (model, KV, compute) against what the phone said
    assert abs(row.accelerator_memory_bytes / row.device_reported_bytes - 1) <= 0.10, (
        row.accelerator_memory_bytes, row.device_reported_bytes)
    assert pd.isna(row.host_memory_bytes)  # GpuService does not say how much is in its PSS


def test_a_phone_that_cannot_say_its_gpu_memory_stores_unreadable(
        virtual_phones: Any, tmp_path: Path, vulkan_build: Build, bench_ladder: Any) -> None:
    """The Mali phone on a kernel without the gpu_mem_total tracepoint: no channel at all."""
    profile = tmp_path / "mali-without-gpumem.yaml"
    profile.write_text(Path(MALI_PHONE).read_text().replace(
        "  readable: false", "  readable: false\n  gpumem: false"))
    (phone,) = virtual_phones(1, profile=str(profile))
    trials = _run(_one_offloaded_cell(tmp_path), phone.serial, tmp_path / "r", vulkan_build)
    (row,) = trials.itertuples()
    assert row.outcome == "ok", row.error
    assert pd.isna(row.accelerator_memory_bytes) and pd.isna(row.host_memory_bytes)
    assert row.accelerator_memory_source == NO_GPU_MEMORY
    assert row.device_reported_bytes > 0  # llama.cpp's own figure is still there


def test_a_gpu_that_computes_wrong_fails_its_own_cells_check_and_is_not_recommended(
        virtual_phones: Any, tmp_path: Path, vulkan_build: Build, bench_ladder: Any) -> None:
    """A faulty driver (the phone's Vulkan layer drops every 7th compute dispatch: fast and
    wrong, like the Adreno and PowerVR bugs users report) fails the output check of the cells
    it runs, and only those; their trials are invalid and recommend rejects them."""
    profile = tmp_path / "faulty-gpu.yaml"
    profile.write_text(Path(GPU_PHONE).read_text().replace(
        "  readable: true", "  readable: true\n  drop_dispatches: 7"))
    matrix = tmp_path / "check.yaml"
    matrix.write_text(MATRIX.read_text().replace("quant: [Q8_0, Q4_0]", "quant: [Q8_0]")
                      .replace("n_gpu_layers: [0, half, all]", "n_gpu_layers: [0, all]"))
    (phone,) = virtual_phones(1, profile=str(profile))
    results = tmp_path / "r"
    trials = _run(matrix, phone.serial, results, vulkan_build)
    cpu = _one(trials, "Q8_0", "none", 0)
    gpu = _one(trials, "Q8_0", "Vulkan0", -1)
    assert cpu["outcome"] == gpu["outcome"] == "ok", trials[["outcome", "error"]]
    assert cpu["output_check"] == "match" and bool(cpu["valid"])
    assert gpu["output_check"] == "mismatch" and not bool(gpu["valid"])
    assert "output" in str(gpu["invalid_reason"])
    assert str(gpu["output_check_detail"])  # where the continuations part
    found = CliRunner().invoke(main, ["recommend", "--device", phone.serial, "--results",
                                      str(results), "--reserve", "0", "--json"])
    assert found.exit_code == 0, found.output
    answer = json.loads(found.stdout)
    assert gpu["config_id"] not in {p["config_id"] for p in answer["picks"]}
    assert gpu["config_id"] in {r["config_id"] for r in answer["rejected"]}
    assert cpu["config_id"] in {p["config_id"] for p in answer["picks"]}
