"""What a GPU build's drivers hold in its process (issue 48, item 3b): the ``--list-devices``
probe's high-water mark, read by the phone's shell while it runs, less a CPU-only probe's, and
added to the host share the planner predicts for every cell of that build."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from analysis.factory import cell, trial, write
from engines.test_devices import VULKAN

from harness.analysis.offload_peak import driver_costs
from harness.engines.devices import (
    PROBE_BASE_BYTES,
    Capability,
    capability_from_output,
    peak_watched,
    probe_peak,
)
from harness.engines.llama_bench import LlamaBench
from harness.memory import ModelCard
from harness.plan import plan_cells
from harness.run.worker import with_driver
from harness.store import read_table

MIB = 1 << 20
# a process that grows to 96 MiB resident, frees it, lists a device, and exits 3
GROWS = ("import sys; b = bytearray(96 << 20); b[::4096] = b'x' * len(b[::4096]); del b; "
         "print('Available devices:'); print('  Vulkan0: llvmpipe (2048 MiB, 2048 MiB free)'); "
         "sys.exit(3)")


@pytest.mark.parametrize("shell", ["mksh", "dash"])
def test_the_probe_s_peak_is_read_while_it_runs_and_its_status_kept(shell: str) -> None:
    line = " ".join(shlex.quote(w) for w in (sys.executable, "-c", GROWS))
    ran = subprocess.run([shell, "-c", peak_watched(line)], capture_output=True, text=True,
                         timeout=60, check=False)
    assert ran.returncode == 3, ran.stderr
    peak = probe_peak(ran.stdout)
    assert peak is not None and peak >= 96 * MIB, ran.stdout  # freed before the exit: the HWM
    found = capability_from_output("host-vulkan", ran.returncode, ran.stdout, ran.stderr)
    assert found.names() == ("Vulkan0",) and found.peak_bytes == peak
    assert found.driver_bytes == peak - PROBE_BASE_BYTES


def test_a_probe_without_its_peak_says_nothing_of_drivers() -> None:
    found = capability_from_output("host-vulkan", 0, VULKAN, "")
    assert found.peak_bytes is None and found.driver_bytes is None
    small = Capability("host-release", peak_bytes=PROBE_BASE_BYTES // 2)
    assert small.driver_bytes == 0  # a CPU-only probe holds no driver


CARD = ModelCard(n_layer=8, n_head=8, n_head_kv=8, head_dim=64, n_embd=512, n_ff=1024,
                 n_vocab=1000, n_params=30_000_000)


def test_the_planner_adds_a_build_s_drivers_to_the_host_share_of_each_of_its_cells() -> None:
    cpu = cell(build="host-vulkan", model="card", quant="Q4_0")
    gpu = cell(build="host-vulkan", model="card", quant="Q4_0", compute_device="Vulkan0",
               n_gpu_layers=-1)
    other = cell(build="host-release", model="card", quant="Q4_0")
    models = {("card", "Q4_0"): CARD}
    plain = plan_cells([cpu, gpu, other], models, 4 << 30)
    drivers = {"host-vulkan": 50 * MIB}
    added = plan_cells([cpu, gpu, other], models, 4 << 30, drivers=drivers)
    for before, after in zip(plain, added, strict=True):
        assert before.prediction is not None and after.prediction is not None
        extra = drivers.get(after.cell.build, 0)
        assert after.prediction.host == before.prediction.host + extra
        assert after.prediction.total == before.prediction.total + extra
        assert after.prediction.device == before.prediction.device
        assert after.prediction.terms()["driver"] == extra
    assert added[1].prediction is not None and added[1].prediction.device > 0


def test_a_run_s_context_carries_the_drivers_in_its_predictions(tmp_path: Path) -> None:
    from harness.run.trial import TrialContext

    ctx = TrialContext(engine=LlamaBench(), binary="b", lib_dir=None, model="m", cpu_mask=None,
                       big_cpu=0, memory_limit_bytes=None, predicted_peak_bytes=100 * MIB,
                       device_meta=None, build_meta=None, model_meta=None,  # type: ignore[arg-type]
                       predicted_host_bytes=90 * MIB, predicted_accelerator_bytes=10 * MIB)
    probed = Capability("host-vulkan", peak_bytes=PROBE_BASE_BYTES + 40 * MIB)
    got = with_driver(ctx, probed)
    assert (got.predicted_peak_bytes, got.predicted_host_bytes, got.predicted_accelerator_bytes,
            got.driver_host_bytes) == (140 * MIB, 130 * MIB, 10 * MIB, 40 * MIB)
    unread = with_driver(ctx, Capability("host-vulkan"))
    assert unread.predicted_host_bytes == 90 * MIB and unread.driver_host_bytes is None
    assert unread.capability == Capability("host-vulkan")


def test_recommend_s_planned_cells_take_the_drivers_the_store_measured(tmp_path: Path) -> None:
    vk, release = cell(build="host-vulkan"), cell(build="host-release")
    write(tmp_path, [trial(vk, rep=0, driver_host_bytes=40 * MIB),
                     trial(vk, rep=1, driver_host_bytes=44 * MIB),
                     trial(release, rep=0), trial(vk, rep=0, serial="OTHER",
                                                  driver_host_bytes=90 * MIB)])
    trials = read_table(tmp_path, "trials")
    assert driver_costs(trials, "SER1") == {"host-vulkan": 42 * MIB}
    assert driver_costs(trials, "OTHER") == {"host-vulkan": 90 * MIB}


CARD_MATRIX = """
name: drivers
axes:
  build: [b1]
  model: [card]
  quant: [Q4_0]
  n_ctx: [512]
models:
  card:
    path: absent-{quant}.gguf
    card: {n_layer: 8, n_head: 8, n_head_kv: 8, head_dim: 64, n_embd: 512, n_ff: 1024,
           n_vocab: 1000, n_params: 30000000}
workload: {n_prompt: 32, n_gen: 16}
"""


def test_recommend_s_planned_cells_carry_the_drivers_its_store_measured(tmp_path: Path) -> None:
    """``harness recommend --matrix``: a planned cell of a build the store measured on this
    device is predicted with that build's drivers."""
    import json

    from click.testing import CliRunner

    from harness.cli import main

    matrix = tmp_path / "drivers.yaml"
    matrix.write_text(CARD_MATRIX)
    measured = cell(build="b1", quant="Q8_0")  # another config of the same build, measured

    def planned_peak(results: Path, driver: int | None) -> int:
        write(results, [trial(measured, driver_host_bytes=driver)])
        found = CliRunner().invoke(main, [
            "recommend", "--device", "SER1", "--results", str(results), "--matrix",
            str(matrix), "--memory", "8GiB", "--reserve", "0", "--json"])
        assert found.exit_code == 0, found.output
        (pick,) = [p for p in json.loads(found.stdout)["picks"] if p["source"] == "predicted"]
        return int(pick["peak_bytes"])

    assert planned_peak(tmp_path / "with", 40 * MIB) == \
        planned_peak(tmp_path / "without", None) + 40 * MIB
