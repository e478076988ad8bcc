"""The report's CPU/GPU/NPU section: the figures of analysis.offload_table, escaped."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from analysis.factory import cell, trial, write

from harness.analysis.offload_table import offload_table
from harness.report import ReportOptions, build_report_data
from harness.report.html import render_report
from harness.run.offload import KGSL_SOURCE, NO_GPU_MEMORY
from harness.store import read_table

MiB = 2**20


def _store(root: Path) -> None:
    cpu = cell(model="bench", quant="Q8_0")
    full = cell(model="bench", quant="Q8_0", compute_device="Vulkan0", n_gpu_layers=-1)
    half = cell(model="bench", quant="Q8_0", compute_device="Vulkan0", n_gpu_layers=4)
    common = {"serial": "<b>SER</b>", "gpu_emulated": "lavapipe"}
    records = [trial(cpu, rep=rep, accelerator_memory_bytes=0,
                     accelerator_memory_source=KGSL_SOURCE, host_memory_bytes=100 * MiB, **common)
               for rep in range(2)]
    records += [trial(full, rep=rep, tg_tps=4.0 + rep, accelerator_memory_bytes=(67 + rep) * MiB,
                      accelerator_memory_source=KGSL_SOURCE, host_memory_bytes=130 * MiB,
                      predicted_accelerator_bytes=68 * MiB, predicted_host_bytes=30 * MiB,
                      device_reported_bytes=66 * MiB, offloaded_layers=9, model_layers=9,
                      gpu_throttled=rep == 1, max_gpu_temp_c=41.0, output_check="match",
                      **common) for rep in range(2)]
    records += [trial(half, rep=0, accelerator_memory_bytes=None,
                      accelerator_memory_source=NO_GPU_MEMORY, predicted_accelerator_bytes=36 * MiB,
                      output_check="mismatch", **common)]
    write(root, records)


def test_offload_rows_are_medians_per_candidate_with_the_phone_s_report(tmp_path: Path) -> None:
    _store(tmp_path)
    rows = {(r.compute_device, r.n_gpu_layers): r
            for r in offload_table(read_table(tmp_path, "trials"))}
    assert set(rows) == {("none", "0"), ("Vulkan0", "all"), ("Vulkan0", "4")}
    full = rows[("Vulkan0", "all")]
    assert full.device_bytes == 67.5 * MiB and full.device_source == KGSL_SOURCE
    assert full.device_error == pytest.approx(67.5 / 68 - 1)
    assert (full.offloaded, full.gpu_throttled, full.output_check) == ("9/9", 1, "match")
    assert full.tg_tps == 4.5 and full.gpu_emulated == "lavapipe"
    unread = rows[("Vulkan0", "4")]
    assert unread.device_bytes is None and unread.device_error is None
    assert str(unread.device_source).startswith("unreadable: ")
    assert rows[("none", "0")].device_bytes == 0  # a kgsl phone said 0 for the CPU cell


def test_the_section_shows_them_escaped_and_only_when_there_is_something(
        tmp_path: Path) -> None:
    _store(tmp_path / "r")
    data = build_report_data(ReportOptions(tmp_path / "r"))
    assert data.offload.present and len(data.offload.rows) == 3
    html = render_report(data)
    start = html.index('<section id="offload">')
    section = html[start:html.index("</section>", start)]
    assert '<a href="#offload">CPU, GPU, NPU</a>' in html
    assert "&lt;b&gt;SER&lt;/b&gt;" in section and "<b>SER</b>" not in html
    rows = re.findall(r"<tr><td>.*?</tr>", section, re.S)
    assert len(rows) == 3
    assert any("unreadable: " in r and 'class="flagged">mismatch' in r for r in rows)
    assert any(">9/9<" in r and "(emulated: lavapipe)" in r for r in rows)
    plain = tmp_path / "plain"
    write(plain, [trial(cell(), rep=i) for i in range(2)])
    quiet = build_report_data(ReportOptions(plain))
    assert not quiet.offload.present and '<section id="offload">' not in render_report(quiet)
