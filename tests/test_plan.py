"""Planning: verdicts and reasons, the model resolver, and ``harness plan`` end to end."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_gguf_info import write_gguf

from harness.artifacts.gguf_info import ModelInfo
from harness.cell import Cell
from harness.cli import main
from harness.errors import ConfigError, ModelError
from harness.matrix import expand, load_matrix, parse_matrix
from harness.memory import ModelCard, predict_peak
from harness.plan import (
    MissingModel,
    ModelFacts,
    parse_size,
    plan_cells,
    resolve_models,
)
from harness.profiles import list_profiles

REPO = Path(__file__).resolve().parent.parent
GiB = 2**30
MiB = 2**20
CARD = ModelCard(n_layer=16, n_head=32, n_head_kv=8, head_dim=64, n_embd=2048, n_ff=8192,
                 n_vocab=128256, n_params=1_235_814_400)


def _cell(**changes: object) -> Cell:
    base = Cell(
        build="b", model="m", quant="Q4_K_M", n_ctx=2048, type_k="f16", type_v="f16",
        threads=4, affinity="all", flash_attn="on", mmap=True, n_batch=512, n_ubatch=512,
        n_prompt=128, n_gen=32, repetitions=3,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _models(*quants: str) -> dict[tuple[str, str], ModelFacts]:
    return {("m", q): CARD for q in quants}


def test_budget_is_available_minus_reserve_and_decides_feasibility() -> None:
    # weights read into memory (no mmap): over the budget is over the budget (mapped weights
    # could page instead: tests/test_paging_plan.py)
    small, big = _cell(n_ctx=512, mmap=False), _cell(n_ctx=8192, mmap=False)
    peak_small = predict_peak(small, CARD).total
    peak_big = predict_peak(big, CARD).total
    available = (peak_small + peak_big) // 2 + 100 * MiB
    planned = plan_cells([small, big], _models("Q4_K_M"), available, reserve=100 * MiB)
    assert [p.feasible for p in planned] == [True, False]
    assert [p.reason_code for p in planned] == ["fits", "over_budget"]
    assert planned[1].budget_bytes == available - 100 * MiB
    assert planned[1].reason.startswith(f"predicted {peak_big / MiB:,.0f} MiB > budget")
    assert planned[0].prediction is not None and planned[0].prediction.total == peak_small


def test_quantised_v_cache_without_flash_attention_is_infeasible() -> None:
    cell = _cell(type_k="q8_0", type_v="q8_0", flash_attn="off")
    (planned,) = plan_cells([cell], _models("Q4_K_M"), 16 * GiB)
    assert (planned.feasible, planned.reason_code) == (False, "v_cache_needs_flash_attn")
    k_only = _cell(type_k="q8_0", type_v="f16", flash_attn="off")
    assert plan_cells([k_only], _models("Q4_K_M"), 16 * GiB)[0].feasible


def test_workload_longer_than_the_context_is_infeasible() -> None:
    cell = _cell(n_ctx=512, n_depth=400, n_prompt=128, n_gen=32)
    (planned,) = plan_cells([cell], _models("Q4_K_M"), 16 * GiB)
    assert planned.reason_code == "workload_exceeds_ctx"
    assert planned.reason == (
        "the workload needs 560 tokens of context (depth 400 + prompt 128 + gen 32) but n_ctx "
        "is 512"
    )


def test_missing_model_and_unfit_cache_rows_have_no_prediction() -> None:
    odd = dataclasses.replace(CARD, n_head_kv=1, head_dim=48)
    models: dict[tuple[str, str], ModelFacts] = {
        ("m", "Q4_K_M"): MissingModel("no file"),
        ("m", "Q8_0"): odd,
    }
    missing, unfit = plan_cells(
        [_cell(), _cell(quant="Q8_0", type_k="q4_0", type_v="q4_0")], models, 16 * GiB
    )
    assert (missing.reason_code, missing.reason, missing.prediction) == (
        "model_unavailable", "no file", None)
    assert (unfit.reason_code, unfit.prediction) == ("kv_type_unsupported", None)
    assert missing.estimated_seconds == unfit.estimated_seconds == 0.0


def test_estimated_duration_grows_with_work_and_respects_the_timeout() -> None:
    def seconds(**changes: object) -> float:
        return plan_cells([_cell(**changes)], _models("Q4_K_M", "Q8_0"), 16 * GiB)[0] \
            .estimated_seconds

    base = seconds()
    assert base > 0
    assert seconds(n_gen=256) > base and seconds(n_prompt=1024) > base
    assert seconds(repetitions=6) > base and seconds(quant="Q8_0") > base
    assert seconds(threads=2) > base
    capped = plan_cells([_cell(n_gen=100_000)], _models("Q4_K_M"), 16 * GiB,
                        trial_timeout_s=10)[0].estimated_seconds
    assert capped < 10 * (3 + 1) + 5  # reps + warm-up, each at most the timeout, plus loading


@pytest.mark.parametrize(
    ("text", "expected"),
    [("6GiB", 6 * GiB), ("512MiB", 512 * MiB), ("6G", 6 * GiB), ("6GB", 6_000_000_000),
     ("1.5 GiB", int(1.5 * GiB)), ("4096", 4096), ("64k", 64 * 1024)],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


def test_parse_size_rejects_nonsense_in_one_line() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_size("lots", "--memory")
    assert str(caught.value) == (
        "--memory: 'lots' is not a size (examples: 6GiB, 512MiB, 6G, 6000MB, 1073741824)"
    )


# --- resolving models ---------------------------------------------------------------------------


def _ladder_matrix() -> dict[str, object]:
    return {
        "name": "l",
        "axes": {"build": ["b"], "model": ["tiny"], "quant": ["Q8_0", "Q4_K_M", "Q2_K"],
                 "n_ctx": [256]},
        "models": {"tiny": {"ladder": "tiny"}},
        "workload": {"n_prompt": 32, "n_gen": 16},
    }


def test_ladder_models_are_read_from_the_resolvers_files(tmp_path: Path) -> None:
    files = {q: write_gguf(tmp_path / f"{q}.gguf", file_type=ft)
             for q, ft in (("Q8_0", 7), ("Q4_K_M", 15))}
    asked: list[str] = []

    def fake_ladder(size: str) -> dict[str, Path]:
        asked.append(size)
        return files

    matrix = parse_matrix(_ladder_matrix(), "l.yaml")
    facts = resolve_models(matrix, expand(matrix), ladder=fake_ladder)
    assert asked == ["tiny"]  # made once for all quants
    q8 = facts[("tiny", "Q8_0")]
    assert isinstance(q8, ModelInfo) and q8.file_type_name == "Q8_0"
    assert facts[("tiny", "Q2_K")] == MissingModel(
        "the tiny ladder has no Q2_K (it has Q8_0, Q4_K_M)"
    )


def test_ladder_that_cannot_be_imported_makes_cells_unavailable() -> None:
    def broken(size: str) -> dict[str, Path]:
        raise ImportError("no module")

    matrix = parse_matrix(_ladder_matrix(), "l.yaml")
    facts = resolve_models(matrix, expand(matrix), ladder=broken)
    assert set(facts.values()) == {
        MissingModel("the test-model ladder (harness.artifacts.testmodels) is not available")}


def _path_matrix(tmp_path: Path, card: bool) -> dict[str, object]:
    source: dict[str, object] = {"path": str(tmp_path / "m-{quant}.gguf")}
    if card:
        source["card"] = {k: getattr(CARD, k) for k in (
            "n_layer", "n_head", "n_head_kv", "head_dim", "n_embd", "n_ff", "n_vocab", "n_params")}
    return {
        "name": "p",
        "axes": {"build": ["b"], "model": ["m"], "quant": ["Q8_0", "Q4_K_M"], "n_ctx": [512]},
        "models": {"m": source},
        "workload": {"n_prompt": 32, "n_gen": 16},
    }


def test_path_models_use_the_file_when_present_else_the_card(tmp_path: Path) -> None:
    write_gguf(tmp_path / "m-Q8_0.gguf", file_type=7)
    matrix = parse_matrix(_path_matrix(tmp_path, card=True), "p.yaml")
    facts = resolve_models(matrix, expand(matrix))
    assert isinstance(facts[("m", "Q8_0")], ModelInfo)
    assert facts[("m", "Q4_K_M")] == CARD


def test_path_models_without_file_or_card_are_unavailable(tmp_path: Path) -> None:
    matrix = parse_matrix(_path_matrix(tmp_path, card=False), "p.yaml")
    facts = resolve_models(matrix, expand(matrix))
    assert facts[("m", "Q4_K_M")] == MissingModel(
        f"{tmp_path / 'm-Q4_K_M.gguf'} is absent and models.m has no card")


def test_a_corrupt_model_file_is_an_error_not_a_guess(tmp_path: Path) -> None:
    (tmp_path / "m-Q8_0.gguf").write_bytes(b"GGML" + bytes(64))
    matrix = parse_matrix(_path_matrix(tmp_path, card=True), "p.yaml")
    with pytest.raises(ModelError, match="not a GGUF file"):
        resolve_models(matrix, expand(matrix))


# --- the command --------------------------------------------------------------------------------


def test_plan_nightly_json_lists_every_cell_with_peak_and_verdict() -> None:
    nightly = REPO / "matrices" / "nightly.yaml"
    result = CliRunner().invoke(main, ["plan", str(nightly), "--device", "midrange-8gb", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    cells = expand(load_matrix(nightly))
    assert doc["device"]["name"] == "midrange-8gb"
    assert doc["available_bytes"] == 4608 * MiB and doc["budget_bytes"] == 4096 * MiB
    assert [c["cell_id"] for c in doc["cells"]] == [c.cell_id for c in cells]
    for entry in doc["cells"]:
        assert isinstance(entry["predicted_peak_bytes"], int) and entry["predicted_peak_bytes"] > 0
        assert entry["predicted_peak_bytes"] == sum(entry["predicted"].values())
        assert isinstance(entry["feasible"], bool) and entry["reason"]
    assert doc["summary"]["cells"] == len(cells)


def test_plan_memory_override_marks_large_cells_paging_or_over_budget() -> None:
    nightly = REPO / "matrices" / "nightly.yaml"
    result = CliRunner().invoke(
        main, ["plan", str(nightly), "--memory", "1GiB", "--reserve", "0", "--json"])
    doc = json.loads(result.output)
    assert doc["available_bytes"] == GiB and doc["device"]["name"] == "custom"
    verdicts = {(c["quant"], c["reason_code"]) for c in doc["cells"]}
    # the mmap'd Q8_0 weights do not fit 1 GiB: they page; Q2_K fits
    assert ("Q8_0", "runs_by_paging") in verdicts and ("Q2_K", "fits") in verdicts
    paging = next(c for c in doc["cells"] if c["reason_code"] == "runs_by_paging")
    assert paging["feasible"] and paging["paging"]["read_bytes_per_token"] > 0
    assert paging["paging"]["predicted_tg_tps"] is None  # no storage speed given
    tighter = json.loads(CliRunner().invoke(
        main, ["plan", str(nightly), "--memory", "64MiB", "--reserve", "0", "--json"]).output)
    assert tighter["summary"]["reasons"]["over_budget"] == tighter["summary"]["infeasible"] > 0


def test_plan_without_device_plans_for_every_profile() -> None:
    nightly = REPO / "matrices" / "nightly.yaml"
    result = CliRunner().invoke(main, ["plan", str(nightly), "--json"])
    doc = json.loads(result.output)
    names = [p["device"]["name"] for p in doc["plans"]]
    assert names == [p.name for p in list_profiles()] and len(names) >= 2
    fit = {p["device"]["name"]: p["summary"]["reasons"].get("fits", 0) for p in doc["plans"]}
    assert fit["budget-4gb"] < fit["flagship-16gb"]


def test_plan_human_output_has_a_table_and_a_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {q: write_gguf(tmp_path / f"{q}.gguf") for q in ("Q8_0", "Q4_K_M")}
    monkeypatch.setattr("harness.plan._default_ladder", lambda size: files)
    smoke = REPO / "matrices" / "smoke.yaml"
    result = CliRunner().invoke(main, ["plan", str(smoke), "--device", "budget-4gb"])
    assert result.exit_code == 0, result.output
    assert "tiny Q4_K_M ctx512 kv=q8_0 t1 fa=auto p32/g16/dfill b256/ub128" in result.output
    assert "8 of 8 cells fit; estimated " in result.output
    assert "budget-4gb: available 1,792 MiB - reserve 512 MiB = budget 1,280 MiB" in result.output


def test_unknown_device_is_one_line_and_exit_2() -> None:
    smoke = REPO / "matrices" / "smoke.yaml"
    result = CliRunner().invoke(main, ["plan", str(smoke), "--device", "pixel-99"])
    assert result.exit_code == 2
    assert result.output.startswith("Error: no device profile 'pixel-99'")
    assert result.output.count("\n") == 1


def test_bad_memory_size_is_one_line_and_exit_2() -> None:
    smoke = REPO / "matrices" / "smoke.yaml"
    result = CliRunner().invoke(main, ["plan", str(smoke), "--memory", "lots"])
    assert result.exit_code == 2
    assert result.output == (
        "Error: --memory: 'lots' is not a size (examples: 6GiB, 512MiB, 6G, 6000MB, 1073741824)\n"
    )


def test_plan_for_an_attached_device_uses_its_live_available_memory(virtual_phones) -> None:
    (phone,) = virtual_phones(1, profile="budget-4gb", ram_mb=300)
    result = CliRunner().invoke(
        main, ["plan", str(REPO / "matrices" / "smoke.yaml"), "--device", phone.serial, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["device"]["name"] == phone.serial
    # the phone's live MemAvailable: its 300 MiB limit less what its own processes hold now,
    # not the budget-4gb profile's 1,792 MiB
    assert 200 * 2**20 < document["available_bytes"] <= 300 * 2**20
