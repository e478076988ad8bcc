"""`harness plan --check-kv`: the predictor's KV term against llama.cpp's own log, on the real
model, where the sliding window changes the cache several times over."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import main

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

MATRIX = """\
name: kv-test
axes:
  build: [host-release]
  model: [gemma3]
  quant: [Q4_K_M]
  n_ctx: [512, 8192, 32768]
  kv: [f16, q8_0, q4_0]
  flash_attn: [on]
  swa_full: [false, true]
exclude:
  - {n_ctx: 512, swa_full: true}
models:
  gemma3: {ladder: gemma3-270m}
workload: {n_prompt: 64, n_gen: 16}
"""


def test_every_cell_is_within_two_percent_of_llama_cpp(tmp_path: Path,
                                                       gemma_ladder: dict[str, Path]) -> None:
    matrix = tmp_path / "kv.yaml"
    matrix.write_text(MATRIX)
    result = CliRunner().invoke(main, ["plan", str(matrix), "--check-kv", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    checks = document["checks"]
    assert document["within"] == document["cells"] == len(checks) == 15
    assert all(abs(c["ratio"] - 1) <= 0.02 for c in checks)
    by = {(c["n_ctx"], c["type_k"], c["swa_full"]): c for c in checks}
    # the window: 111 MiB instead of 576 MiB at 32k tokens of f16; two caches per context
    assert by[(32768, "f16", False)]["reported_bytes"] == 111 * 2**20
    assert by[(32768, "f16", True)]["reported_bytes"] == 576 * 2**20
    assert {c["reported_caches"] for c in checks} == {2}
    # an 8-bit cache is 17/32 of f16, a 4-bit one 9/32 (block scales included)
    f16, q8, q4 = (by[(8192, t, True)]["reported_bytes"] for t in ("f16", "q8_0", "q4_0"))
    assert q8 / f16 == pytest.approx(17 / 32, abs=0.001)
    assert q4 / f16 == pytest.approx(9 / 32, abs=0.001)


def test_the_shipped_kv_matrix_covers_512_to_32768_with_every_kv_type() -> None:
    from harness.matrix import expand, load_matrix

    cells = expand(load_matrix(REPO / "matrices" / "real-kv.yaml"))
    assert {c.n_ctx for c in cells} == {512, 1024, 2048, 4096, 8192, 16384, 32768}
    assert {c.type_k for c in cells} == {"f16", "q8_0", "q4_0"} and len(cells) == 42
