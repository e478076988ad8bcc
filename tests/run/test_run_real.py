"""A real model on a virtual phone: Gemma 3 270M through the real llama-bench.

The predicted peak is checked against the kernel's VmHWM of the engine, and the predicted KV term
against the cache sizes llama.cpp itself logs, on cells where the sliding window matters (2048
tokens: the 15 windowed layers keep 768 cells, the 3 global ones 2048) and where it does not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from harness import store
from harness.artifacts.builds import Build
from harness.cli import main

pytestmark = pytest.mark.slow

MATRIX = """\
name: real-test
axes:
  build: [host-release]
  model: [gemma3]
  quant: [Q4_K_M]
  n_ctx: [512, 2048]
  kv: [f16, q4_0]
  threads: [1]
  flash_attn: [on]
  n_batch: [256]
  n_ubatch: [256]
exclude:
  - {n_ctx: 512, kv: q4_0}
include:
  - {build: host-release, model: gemma3, quant: Q8_0, n_ctx: 512, kv: f16, threads: 1,
     flash_attn: on, n_batch: 256, n_ubatch: 256, mmap: false}
models:
  gemma3: {ladder: gemma3-270m}
workload: {n_prompt: 32, n_gen: 8, n_depth: fill}
repetitions: 1
cooldown: {max_thermal_status: 2, max_temperature_c: 45, min_battery_pct: 10, max_wait_s: 30}
timeout: {trial_s: 180}
"""


def test_gemma_on_a_virtual_phone_peaks_where_the_predictor_says(
        sim_home: Path, tmp_path: Path, host_build: Build,
        gemma_ladder: dict[str, Path]) -> None:
    matrix = tmp_path / "real-test.yaml"
    matrix.write_text(MATRIX)
    results = tmp_path / "results"
    result = CliRunner().invoke(main, ["run", str(matrix), "--devices", "sim:1", "--results",
                                       str(results), "--builds", str(host_build.path.parent),
                                       "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["trials_by_outcome"] == {"ok": 4}
    trials = store.read_table(results, "trials").set_index(["quant", "n_ctx", "type_k"])
    assert (trials["swa_full"] == False).all()  # noqa: E712 - a stored boolean column
    kv = trials["predicted_kv_bytes"] / trials["kv_reported_bytes"]
    assert ((kv - 1).abs() <= 0.02).all(), kv
    peak = trials["predicted_peak_bytes"] / trials["vm_hwm_bytes"]
    assert ((peak - 1).abs() <= 0.10).all(), peak
    # the window at work: 3 global layers x 2048 + 15 windowed x 768 cells, not 18 x 2048
    assert trials.loc[("Q4_K_M", 2048, "f16"), "kv_reported_bytes"] == (3 * 2048 + 15 * 768) * 1024
    # an x86_64 AVX2 build repacks Q4_K (mmap keeps the file's pages too); Q8_0 it does not
    assert trials.loc[("Q4_K_M", 512, "f16"), "repack_reported_bytes"] > 0
    assert pd.isna(trials.loc[("Q8_0", 512, "f16"), "repack_reported_bytes"])  # no such buffer
