"""engine_table: each side's medians on the configs several engines measured, and the verdicts
between two engines."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis.engines import engine_table
from harness.analysis.frames import Side
from harness.store import read_table

from .factory import cell, noisy, trial, write

PY = "llama-cpp-python"


def _frame(root: Path, python_quants: tuple[str, ...] = ("Q4_K_M",)) -> pd.DataFrame:
    rng = np.random.default_rng(9)
    records = []
    for quant in ("Q4_K_M", "Q8_0"):
        records += [trial(cell(build="rel", quant=quant), rep=i, tg_tps=v, pp_tps=v * 10)
                    for i, v in enumerate(noisy(rng, 30.0, 6))]
    for quant in python_quants:
        py = cell(build="device-python", engine=PY, quant=quant)
        records += [trial(py, rep=i, tg_tps=v, pp_tps=v * 10, run_id="py",
                          vm_hwm_bytes=(1 << 30) + (50 << 20))
                    for i, v in enumerate(noisy(rng, 21.0, 6))]
        records.append(trial(py, rep=7, run_id="py", tg_tps=5.0, throttled=True))
    write(root, records)
    return read_table(root, "trials")


def test_shared_configs_get_each_sides_medians_and_the_engine_verdict(tmp_path: Path) -> None:
    table = engine_table(_frame(tmp_path))
    assert table.shown and table.engines == ("llama-bench", PY)
    assert table.sides == (Side("device-python", PY), Side("rel"))
    (row,) = table.rows  # Q8_0 was measured by one engine only
    assert row.config_id == cell(quant="Q4_K_M").config_id and row.device == "SER1"
    python, bench = row.figures
    assert python is not None and bench is not None
    assert python.tg_tps is not None and 20.0 < python.tg_tps < 22.0  # the throttled 5.0 left out
    assert python.vm_hwm_bytes == (1 << 30) + (50 << 20)
    (result,) = table.comparisons
    assert (result.baseline_side, result.candidate_side) == (Side("rel"),
                                                             Side("device-python", PY))
    tg = row.verdict(0, "tg_tps")
    assert tg is not None and tg.verdict == "regression" and 0.65 < tg.ratio < 0.75
    cells = {c.metric: c for c in result.cells}
    assert tg.ratio == cells["tg_tps"].comparison.ratio
    assert cells["tg_tps"].comparison.throttled_candidate == 1


def test_one_engine_has_nothing_to_show(tmp_path: Path) -> None:
    table = engine_table(_frame(tmp_path, python_quants=()))
    assert not table.shown and table.rows == () and table.comparisons == ()
    assert table.engines == ("llama-bench",)
