"""recommend() never leaves a device's memory out of an offloaded config's peak (issue 48,
item 2): a Mali phone's GPU pages are not in the process's RSS, so where the phone could not say
the device's share the predictor's stands for it, and the pick says so."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.analysis.recommend import recommend
from harness.report import ReportOptions, build_report_data
from harness.report.html import render_report
from harness.run.offload import GPUMEM_SOURCE, NO_GPU_MEMORY
from harness.store import read_table

from .factory import cell, trial, write

MIB = 1 << 20
CPU = cell(model="bench", quant="Q4_0")
FULL = cell(model="bench", quant="Q4_0", compute_device="Vulkan0", n_gpu_layers=-1)
SAYS = "accelerator memory predicted, not read"


def _mali(root: Path, *, readable: bool) -> pd.DataFrame:
    """A CPU config and a full offload on a phone that reports no host share: the offload's
    process peaks at 100 MiB, its device holds 60 MiB (read from GpuService, or unreadable
    with the predictor's 50 MiB); the CPU config peaks at 130 MiB and decodes slower."""
    device = ({"accelerator_memory_bytes": 60 * MIB, "accelerator_memory_source": GPUMEM_SOURCE}
              if readable else {"accelerator_memory_bytes": None,
                                "accelerator_memory_source": NO_GPU_MEMORY})
    records = [trial(CPU, rep=r, tg_tps=10.0, peak_pss_bytes=120 * MIB,
                     vm_hwm_bytes=130 * MIB) for r in range(2)]
    records += [trial(FULL, rep=r, tg_tps=20.0, peak_pss_bytes=90 * MIB,
                      vm_hwm_bytes=(100 - r) * MIB, host_memory_bytes=None,
                      predicted_accelerator_bytes=50 * MIB, **device) for r in range(2)]
    write(root, records)
    return read_table(root, "trials")


def test_an_unreadable_device_counts_the_predicted_share_and_the_pick_says_so(
        tmp_path: Path) -> None:
    rec = recommend(_mali(tmp_path, readable=False), "SER1", reserve_bytes=0,
                    available_bytes=None)
    full, cpu = rec.picks
    assert full.config_id == FULL.config_id
    assert full.peak_bytes == 150 * MIB  # the process's worst 100 MiB + the predicted 50 MiB
    assert full.accelerator_memory == "predicted" and f"({SAYS})" in full.explanation
    assert cpu.peak_bytes == 130 * MIB and cpu.accelerator_memory is None
    assert SAYS not in cpu.explanation
    assert rec.to_json()["picks"][0]["accelerator_memory"] == "predicted"


def test_a_device_read_without_the_host_share_is_added_to_the_process_peak(
        tmp_path: Path) -> None:
    rec = recommend(_mali(tmp_path, readable=True), "SER1", reserve_bytes=0,
                    available_bytes=None)
    full = next(p for p in rec.picks if p.config_id == FULL.config_id)
    assert full.peak_bytes == 160 * MIB and full.accelerator_memory == "read"
    assert SAYS not in full.explanation


def test_the_predicted_share_decides_the_fit_and_the_rejection_says_so(tmp_path: Path) -> None:
    """140 MiB available: the offload's process (100 MiB) fits, with its device's it does not;
    the CPU config (130 MiB) is the pick."""
    rec = recommend(_mali(tmp_path, readable=False), "SER1", reserve_bytes=0,
                    available_bytes=140 * MIB)
    assert [p.config_id for p in rec.picks] == [CPU.config_id]
    (rejected,) = rec.rejected
    assert rejected.config_id == FULL.config_id and rejected.reason_code == "over_budget"
    assert f"worst measured peak ({SAYS}) 150" in rejected.reason


def test_an_offload_with_neither_reading_nor_prediction_is_marked_unknown(
        tmp_path: Path) -> None:
    write(tmp_path, [trial(FULL, vm_hwm_bytes=100 * MIB, accelerator_memory_bytes=None,
                           predicted_accelerator_bytes=None)])
    (pick,) = recommend(read_table(tmp_path, "trials"), "SER1", reserve_bytes=0,
                        available_bytes=None).picks
    assert pick.accelerator_memory == "unknown" and "neither read nor predicted" in pick.explanation


def test_the_report_s_recommendations_say_it_too(tmp_path: Path) -> None:
    _mali(tmp_path / "r", readable=False)
    data = build_report_data(ReportOptions(tmp_path / "r"))
    (device,) = data.recommendations
    best = device.items[0].pick
    assert best.config_id == FULL.config_id and best.peak_bytes == 150 * MIB
    html = render_report(data)
    start = html.index('<section id="recommendations">')
    assert SAYS in html[start:html.index("</section>", start)]
