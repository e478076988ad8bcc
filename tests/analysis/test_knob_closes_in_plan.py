"""The knob recommend names when nothing fits closes the gap in `harness plan` too.

Each case is a configuration the planner predicts over the budget by a little; its trials carry
the planner's own figures (peak, KV term, weights), as a run stores them. recommend names one
knob; the same configuration with that knob turned, planned on the same phone, must fit.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from harness.analysis.recommend import recommend
from harness.cell import Cell
from harness.memory import ModelCard, estimate_weights_bytes, predict_peak
from harness.plan import plan_cells
from harness.store import read_table

from .factory import cell as make_cell
from .factory import trial, write

MIB = 1 << 20
RESERVE = 256 * MIB
CARD = ModelCard(n_layer=16, n_head=32, n_head_kv=8, head_dim=64, n_embd=2048, n_ff=8192,
                 n_vocab=128256, n_params=1_235_814_400)


def _turned(cell: Cell, knob: str, text: str) -> Cell:
    """The cell with the knob turned as the suggestion's text says."""
    if knob == "n_ctx":
        target = re.search(r"lower n_ctx from \d+ to (\d+)", text)
        assert target, text
        return dataclasses.replace(cell, n_ctx=int(target.group(1)))
    if knob == "kv":
        found = re.search(r"store the KV cache as (\S+) instead", text)
        assert found, text
        k, _, v = found.group(1).partition("/")
        return dataclasses.replace(cell, type_k=k, type_v=v or k)
    if knob == "quant":
        found = re.search(r"quantise the weights to (\S+) instead", text)
        assert found, text
        return dataclasses.replace(cell, quant=found.group(1))
    raise AssertionError(f"no rule for knob {knob}: {text}")


@pytest.mark.parametrize(("knob", "changes", "over_share"), [
    ("n_ctx", {"n_ctx": 8192}, 0.4),  # over by 40% of the KV cache: half of it closes the gap
    # a context that cannot halve (the workload needs 328 tokens): the KV type is next
    ("kv", {"n_ctx": 512, "n_prompt": 128, "n_gen": 200}, 0.4),
    # over by more than the whole KV cache: the weights' quant is next
    ("quant", {"n_ctx": 512, "n_prompt": 128, "n_gen": 200}, 1.5),
])
def test_the_knob_recommend_names_makes_the_plan_fit(
        tmp_path: Path, knob: str, changes: dict[str, int], over_share: float) -> None:
    base = make_cell(model="m", quant="Q4_K_M", type_k="f16", type_v="f16", flash_attn="on",
                     mmap=False, **changes)
    cell = Cell(**{f.name: getattr(base, f.name) for f in dataclasses.fields(Cell)})
    predicted = predict_peak(cell, CARD)
    over = int(predicted.kv * over_share)
    available = predicted.total + RESERVE - over
    (planned,) = plan_cells([cell], {("m", cell.quant): CARD}, available, RESERVE)
    assert planned.reason_code == "over_budget"
    write(tmp_path, [trial(base, rep=i, peak_pss_bytes=predicted.total,
                           predicted_peak_bytes=predicted.total,
                           predicted_kv_bytes=predicted.kv,
                           model_file_bytes=estimate_weights_bytes(CARD, cell.quant))
                     for i in range(3)])
    rec = recommend(read_table(tmp_path, "trials"), "SER1", reserve_bytes=RESERVE,
                    available_bytes=available)
    assert rec.picks == () and rec.suggestion is not None
    assert rec.suggestion.knob == knob, rec.suggestion.text
    turned = _turned(cell, knob, rec.suggestion.text)
    (after,) = plan_cells([turned], {("m", turned.quant): CARD}, available, RESERVE)
    assert after.feasible and after.reason_code == "fits", (rec.suggestion.text, after.reason)
