"""The planner's third verdict: over the budget, but the mmap'd weights page
(harness.paging_predict)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.artifacts.gguf_info import ModelInfo
from harness.cell import Cell
from harness.cli import main
from harness.memory import predict_peak
from harness.paging_predict import HIT_FLOOR, expert_hit_rate, predict_paging
from harness.plan import Reason, plan_cells

MiB = 2**20
MB = 1_000_000
DENSE = ModelInfo(
    path="/m.gguf", architecture="llama", name="dense", n_layer=8, n_head=12, n_head_kv=4,
    head_dim_k=64, head_dim_v=64, n_embd=768, n_ff=2048, n_vocab=16384, context_length=8192,
    file_type=1, file_type_name="F16", tensor_bytes=150 * MiB, n_params=75_000_000,
    file_size=150 * MiB + 4096, token_embd_bytes=24 * MiB)
MOE = dataclasses.replace(DENSE, name="moe", tensor_bytes=240 * MiB, file_size=240 * MiB,
                          n_expert=8, n_expert_used=2, expert_tensor_bytes=192 * MiB,
                          token_embd_bytes=16 * MiB)


def _cell(**changes: object) -> Cell:
    base = Cell(build="b", model="m", quant="F16", n_ctx=256, type_k="f16", type_v="f16",
                threads=1, affinity="all", flash_attn="auto", mmap=True, n_batch=64,
                n_ubatch=64, n_prompt=16, n_gen=4, repetitions=1)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _plan(cell: Cell, model: ModelInfo, budget: int, speed: float | None = 100.0) -> object:
    (planned,) = plan_cells([cell], {("m", "F16"): model}, budget, reserve=0,
                            storage_mb_s=speed)
    return planned


def test_a_dense_model_over_the_budget_pages_and_reads_every_matrix_per_token() -> None:
    cell = _cell()
    peak = predict_peak(cell, DENSE)
    resident = peak.total - peak.weights
    planned = _plan(cell, DENSE, resident + 60 * MiB)  # 60 MiB for 126 MiB of matrices
    assert planned.reason_code == Reason.PAGING and planned.feasible  # type: ignore[attr-defined]
    paging = planned.paging  # type: ignore[attr-defined]
    # every matrix but the token embedding (a token reads one row of it)
    assert paging.read_per_token == paging.working_set == 126 * MiB
    assert paging.resident == resident and paging.cache == 60 * MiB
    assert planned.paging_tg_tps == pytest.approx(100 * MB / (126 * MiB))  # type: ignore
    assert "runs by paging" in planned.reason  # type: ignore[attr-defined]
    # the duration follows the storage-bound decode speed
    assert planned.estimated_seconds >= 4 / planned.paging_tg_tps  # type: ignore


def test_without_a_storage_speed_the_verdict_stands_with_no_speed() -> None:
    cell = _cell()
    peak = predict_peak(cell, DENSE)
    planned = _plan(cell, DENSE, peak.total - peak.weights + 60 * MiB, speed=None)
    assert planned.reason_code == Reason.PAGING  # type: ignore[attr-defined]
    assert planned.paging_tg_tps is None  # type: ignore[attr-defined]
    assert "pass --storage-mb-s" in planned.reason  # type: ignore[attr-defined]


@pytest.mark.parametrize("changes", [{"mmap": False}, {"load_mode": "dio", "mmap": False},
                                     {"load_mode": "mmap+mlock"}])
def test_weights_read_into_memory_or_locked_cannot_page(changes: dict[str, object]) -> None:
    cell = _cell(**changes)
    peak = predict_peak(cell, DENSE)
    planned = _plan(cell, DENSE, peak.total - peak.weights + 60 * MiB)
    assert planned.reason_code == Reason.OVER_BUDGET  # type: ignore[attr-defined]
    assert not planned.feasible  # type: ignore[attr-defined]


def test_what_must_stay_resident_has_to_fit_for_paging_to_help() -> None:
    cell = _cell()
    peak = predict_peak(cell, DENSE)
    planned = _plan(cell, DENSE, peak.total - peak.weights - MiB)
    assert planned.reason_code == Reason.OVER_BUDGET  # type: ignore[attr-defined]


def test_a_mixture_of_experts_reads_only_its_active_experts_it_misses() -> None:
    cell = _cell()
    peak = predict_peak(cell, MOE)
    resident = peak.total - peak.weights
    dense = 240 * MiB - 192 * MiB - 16 * MiB  # output and attention: every token reads them
    active = 192 * MiB * 2 // 8
    # the cache holds the dense part and 3/4 of the experts: two-list reclaim keeps a hit rate
    # of (3/4 - 1/3) / (2/3)
    planned = _plan(cell, MOE, resident + dense + 144 * MiB)
    paging = planned.paging  # type: ignore[attr-defined]
    assert planned.reason_code == Reason.PAGING  # type: ignore[attr-defined]
    assert paging.working_set == dense + active
    assert paging.read_per_token == round(active * (1 - (0.75 - 1 / 3) / (2 / 3)))
    # with less than the working set left, every token reads all of it
    thrashing = _plan(cell, MOE, resident + dense + active - MiB).paging  # type: ignore
    assert thrashing.read_per_token == dense + active
    # with every expert resident nothing is read: the cell fits, untouched pages need not be
    fits = _plan(cell, MOE, resident + dense + 192 * MiB)
    assert fits.reason_code == Reason.FITS and fits.paging.read_per_token == 0  # type: ignore


def test_expert_hit_rate_is_zero_below_the_floor_and_one_with_every_expert() -> None:
    assert expert_hit_rate(0.0) == expert_hit_rate(HIT_FLOOR) == 0.0
    assert expert_hit_rate(1.0) == expert_hit_rate(1.5) == 1.0
    assert 0 < expert_hit_rate(0.6) < expert_hit_rate(0.8) < 1


def test_predict_paging_needs_mapped_weights() -> None:
    cell = _cell(mmap=False)
    assert predict_paging(cell, DENSE, predict_peak(cell, DENSE), 10**12, 100.0) is None


CARD_MATRIX = """
name: paging
axes:
  build: [b]
  model: [llama-1b]
  quant: [F16]
  n_ctx: [512]
  load_mode: [mmap, none]
models:
  llama-1b:
    path: absent-{quant}.gguf
    card: {n_layer: 16, n_head: 32, n_head_kv: 8, head_dim: 64, n_embd: 2048, n_ff: 8192,
           n_vocab: 128256, n_params: 1235814400}
workload: {n_prompt: 64, n_gen: 16}
"""


def test_plan_json_and_table_show_the_paging_verdict(tmp_path: Path) -> None:
    matrix = tmp_path / "paging.yaml"
    matrix.write_text(CARD_MATRIX)
    args = ["plan", str(matrix), "--memory", "1GiB", "--reserve", "0", "--storage-mb-s", "1500"]
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    cells = {c["load_mode"]: c for c in json.loads(result.output)["cells"]}
    # 2.3 GiB of F16 weights on 1 GiB: mapped, they page; read into memory, they do not fit
    assert cells["none"]["reason_code"] == "over_budget" and not cells["none"]["feasible"]
    paging = cells["mmap"]
    assert paging["reason_code"] == "runs_by_paging" and paging["feasible"]
    # a card knows no token embedding: every weight is read per token
    read = paging["paging"]["read_bytes_per_token"]
    assert read == paging["predicted"]["weights"]
    assert paging["paging"]["predicted_tg_tps"] == pytest.approx(1500 * MB / read, rel=1e-3)
    table = CliRunner().invoke(main, args)
    assert table.exit_code == 0, table.output
    assert "paging" in table.output and "1 of 2 cells run (1 by paging" in table.output
