"""One configuration, one row: the report never merges configurations that differ.

The trials are those ``matrices/real.yaml`` asks for (its cells, one device, every trial ok);
its mmap true and false cells of Q4_K_M at 512 differ only in mmap, and are measured apart here
(the mapped one faster and smaller), so a report that merged them would show a median of both.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from analysis.factory import trial, write

from harness.cell import Cell
from harness.labels import config_label, distinct_labels
from harness.matrix import expand, load_matrix
from harness.report import ReportOptions, build_report_data
from harness.report.html import render_report

MATRIX = Path(__file__).resolve().parents[2] / "matrices" / "real.yaml"
MIB = 1 << 20


def _twins(cells: list[Cell]) -> tuple[Cell, Cell]:
    """The two cells of real.yaml that differ in mmap alone."""
    unmapped = [c for c in cells if not c.mmap]
    assert len(unmapped) == 1
    twins = [c for c in cells if c == dataclasses.replace(unmapped[0], mmap=True)]
    assert len(twins) == 1
    return twins[0], unmapped[0]


def _figures(c: Cell, unmapped: Cell) -> tuple[float, int]:
    """tg tokens/s and peak RSS per cell: distinct per cell, the unmapped one slower."""
    if c == unmapped:
        return 9.0, 400 * MIB
    return 20.0 + c.threads + c.n_ctx / 1024, 300 * MIB + c.n_ctx * 1024


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[Cell]]:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    cells = expand(load_matrix(MATRIX))
    _, unmapped = _twins(cells)
    records = []
    for c in cells:
        tg, peak = _figures(c, unmapped)
        records += [trial(c, rep=i, tg_tps=tg, pp_tps=tg * 10, peak_rss_bytes=peak,
                          peak_pss_bytes=peak, predicted_peak_bytes=peak) for i in range(3)]
    root = tmp_path / "results"
    write(root, records)
    return root, cells


def test_real_matrix_mmap_true_and_false_are_two_rows_everywhere(
        store: tuple[Path, list[Cell]]) -> None:
    root, cells = store
    mapped, unmapped = _twins(cells)
    data = build_report_data(ReportOptions(root))

    memory = {m.config: m.measured_bytes for m in data.memory_cells}
    assert len(memory) == len({c.config_id for c in cells}) == 14
    by_peak = {peak: label for label, peak in memory.items()}
    assert "no-mmap" in by_peak[400 * MIB]  # the unmapped cell, its own peak
    assert 300 * MIB + 512 * 1024 in by_peak  # the mapped twin, its own
    assert mapped.mmap and not unmapped.mmap

    assert len(data.conditions.rows) == 14
    assert len({r.config for r in data.conditions.rows}) == 14

    # the heatmaps: the unmapped cell has its own table, never a median with the mapped one
    tg = [h for h in data.heatmaps if h.metric == "tg_tps" and h.kv == "f16"]
    assert sorted(h.variant for h in tg) == ["mmap", "no-mmap"]
    for heatmap in tg:
        value = heatmap.values[heatmap.rows.index("Q4_K_M")][heatmap.cols.index(512)]
        # mapped: the best thread count (2 threads); unmapped: its only one
        assert value == (9.0 if heatmap.variant == "no-mmap" else 22.5)

    html = render_report(data, 10)
    assert "no-mmap" in html and "KV f16 · no-mmap" in html


def test_a_label_names_every_knob_that_differs() -> None:
    base = Cell(build="b1", model="m", quant="Q4_K_M", n_ctx=512, type_k="f16", type_v="f16",
                threads=4, affinity="all", flash_attn="auto", mmap=True, n_batch=256,
                n_ubatch=128, n_prompt=32, n_gen=16)
    variants = {
        "fa": Cell(**{**base.__dict__, "flash_attn": "on"}),
        "batch": Cell(**{**base.__dict__, "n_ubatch": 64}),
        "workload": Cell(**{**base.__dict__, "n_gen": 64}),
        "swa": Cell(**{**base.__dict__, "swa_full": True}),
        "load": Cell(**{**base.__dict__, "load_mode": "dio", "mmap": False}),
        "cache": Cell(**{**base.__dict__, "cache": "cold"}),
        "sustained": Cell(**{**base.__dict__, "sustained_s": 60.0}),
        "affinity": Cell(**{**base.__dict__, "affinity": "big"}),
    }
    rows = {"base": base.row(), **{k: c.row() for k, c in variants.items()}}
    labels = distinct_labels(rows)
    assert len(set(labels.values())) == len(rows)  # no two alike
    assert labels["base"] == "Q4_K_M ctx512 kv=f16 t4@all fa=auto p32/g16 b256/ub128 mmap " \
                             "cache=as-found swa-window burst"
    assert labels["fa"].split()[4] == "fa=on"
    assert "ub64" in labels["batch"] and "g64" in labels["workload"]
    assert "swa-full" in labels["swa"] and "lm=dio" in labels["load"]
    assert "cache=cold" in labels["cache"] and "sustained60s" in labels["sustained"]
    assert labels["affinity"].startswith("Q4_K_M ctx512 kv=f16 t4@big ")
    # config_id tells every one apart, and so does the full label
    assert len({c.config_id for c in (base, *variants.values())}) == len(rows)
    assert len({config_label(r) for r in rows.values()}) == len(rows)
    assert config_label(base.row()) == "m Q4_K_M ctx512 kv=f16 t4 fa=auto p32/g16 b256/ub128"


def test_configurations_a_store_cannot_tell_apart_still_get_two_labels() -> None:
    row = {"model_name": "m", "quant": "Q8_0", "n_ctx": 512, "type_k": "f16",
           "type_v": "f16", "threads": 2}
    labels = distinct_labels({"aaaaaaaaaaaa": row, "bbbbbbbbbbbb": dict(row)})
    assert labels == {"aaaaaaaaaaaa": "Q8_0 ctx512 kv=f16 t2 #aaaaaaaa",
                      "bbbbbbbbbbbb": "Q8_0 ctx512 kv=f16 t2 #bbbbbbbb"}


def test_missing_and_null_columns_read_as_the_knobs_defaults() -> None:
    full = {"model_name": "m", "quant": "Q8_0", "n_ctx": 512.0, "type_k": "q8_0",
            "type_v": "q8_0", "threads": 2.0, "affinity": None, "flash_attn": "auto",
            "n_prompt": 32, "n_gen": 16, "n_depth": float("nan"), "n_batch": 256,
            "n_ubatch": 128, "mmap": True, "load_mode": None, "cache": None,
            "swa_full": None, "sustained_s": float("nan")}
    assert config_label(full) == "m Q8_0 ctx512 kv=q8_0 t2 fa=auto p32/g16 b256/ub128"


def test_numpy_and_float_figures_read_as_the_matrix_wrote_them() -> None:
    import numpy as np

    row = {"model_name": "m", "quant": "Q8_0", "n_ctx": np.int64(512), "type_k": "f16",
           "type_v": "f16", "threads": np.int32(2), "n_prompt": np.int64(32),
           "n_gen": 16.0, "n_depth": np.int64(464), "n_batch": 256, "n_ubatch": 128}
    assert config_label(row) == "m Q8_0 ctx512 kv=f16 t2 fa=auto p32/g16/dfill b256/ub128"
